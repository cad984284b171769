// The built-in eviction policies. Both order by recency (Rank is the last
// access); they differ in which blocks may leave.
#include "prefixkv/advanced/eviction_policy.h"

#include <string>

namespace prefixkv {
namespace {

class LruPolicy final : public EvictionPolicy {
 public:
  std::string_view name() const override { return "lru"; }
  bool MayEvict(const EvictionCandidate&) const override { return true; }
  uint64_t Rank(const EvictionCandidate& c) const override { return c.last_access_seq; }
};

// A block with a resident child stays until that child is gone, so a chain is
// trimmed from its tip and restore never finds a resident block whose parent
// was evicted before it.
class LeafLruPolicy final : public EvictionPolicy {
 public:
  std::string_view name() const override { return "leaf-lru"; }
  bool MayEvict(const EvictionCandidate& c) const override {
    return c.resident_children == 0;
  }
  uint64_t Rank(const EvictionCandidate& c) const override { return c.last_access_seq; }
};

}  // namespace

std::unique_ptr<EvictionPolicy> MakeEvictionPolicy(EvictionPolicyKind kind) {
  switch (kind) {
    case EvictionPolicyKind::kLru:
      return std::make_unique<LruPolicy>();
    case EvictionPolicyKind::kLeafLru:
      return std::make_unique<LeafLruPolicy>();
  }
  return std::make_unique<LruPolicy>();
}

}  // namespace prefixkv
