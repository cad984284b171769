// The built-in eviction policies. All order by recency (Rank is the last
// access, plus a protection window for the chain policy); they differ in which
// blocks may leave and how long a reused chain is kept.
#include "prefixkv/advanced/eviction_policy.h"

#include <algorithm>
#include <string>

namespace prefixkv {
namespace {

// chain_hits fills what was padding, and unlikely_reuse its top bit: the
// per-block facts stay 32 bytes.
static_assert(sizeof(EvictionCandidate) == 32, "EvictionCandidate grew");

// A block hinted unlikely to be reused (EvictionCandidate::unlikely_reuse)
// ranks below every access sequence number (they start at 1), so hinted
// blocks leave first, in the order of their last access (the tie-break).
constexpr uint64_t kUnlikelyReuseRank = 0;

class LruPolicy final : public EvictionPolicy {
 public:
  std::string_view name() const override { return "lru"; }
  bool MayEvict(const EvictionCandidate&) const override { return true; }
  uint64_t Rank(const EvictionCandidate& c) const override {
    return c.unlikely_reuse ? kUnlikelyReuseRank : c.last_access_seq;
  }
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
  uint64_t Rank(const EvictionCandidate& c) const override {
    return c.unlikely_reuse ? kUnlikelyReuseRank : c.last_access_seq;
  }
};

// Leaf-first like leaf-lru, and a chain that was reused before (chain_hits >
// 0: a resumed conversation, a shared system prompt, and every block appended
// under them) ranks as if it had been accessed `window` accesses later, where
// `window` is how many blocks of its size the budget holds. On conversation
// traffic most chains seen once never come back, while a resumed one usually
// does (docs/eviction.md has the measurements), so one budget's worth of
// extra life is spent on the chains that pay for it. Rank stays a function
// of the block's facts: the window is fixed at construction.
class ChainPolicy final : public EvictionPolicy {
 public:
  explicit ChainPolicy(uint64_t capacity_bytes) : capacity_bytes_(capacity_bytes) {}
  std::string_view name() const override { return "chain"; }
  bool MayEvict(const EvictionCandidate& c) const override {
    return c.resident_children == 0;
  }
  uint64_t Rank(const EvictionCandidate& c) const override {
    if (c.unlikely_reuse) return kUnlikelyReuseRank;
    if (c.chain_hits == 0) return c.last_access_seq;
    return c.last_access_seq + capacity_bytes_ / std::max<uint64_t>(c.charge_bytes, 1);
  }

 private:
  const uint64_t capacity_bytes_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> MakeEvictionPolicy(EvictionPolicyKind kind,
                                                   uint64_t capacity_bytes) {
  switch (kind) {
    case EvictionPolicyKind::kLru:
      return std::make_unique<LruPolicy>();
    case EvictionPolicyKind::kLeafLru:
      return std::make_unique<LeafLruPolicy>();
    case EvictionPolicyKind::kChain:
      return std::make_unique<ChainPolicy>(capacity_bytes);
  }
  return std::make_unique<LruPolicy>();
}

}  // namespace prefixkv
