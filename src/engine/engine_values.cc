// Engine's key-value space: opaque values by name in their own hot owner
// ("values") over the shared SSD tier. A name becomes a BlockKey as
// XXH3-128(kValueDomain + name) with a zero namespace. The 16-byte domain
// keeps the key spaces apart: a namespace root hashes "prefixkv/v1|...", and
// a chain key hashes its 16-byte parent key first, so a chain input equals a
// value's only if a root or block key equals the domain itself (a 128-bit
// preimage). Before it, names hashed "raw|" + name, which a namespace whose
// root begins with those 4 bytes (a salt found in 2^32 tries) could reach;
// such entries of an older data directory are no longer found by name and
// leave as SSD capacity evicts them (docs/protocol.md).
#include <algorithm>
#include <vector>

#include "engine_impl.h"
#include "prefixkv/advanced/hash.h"

namespace prefixkv {
namespace {

BlockKey ValueKey(std::string_view name) {
  static constexpr char kValueDomain[16] = {'p', 'r', 'e', 'f', 'i', 'x', 'k', 'v',
                                            '/', 'r', 'a', 'w', '/', 'v', '2', '|'};
  HashStream h(HashStream::Width::k128);
  h.Update(kValueDomain, sizeof(kValueDomain));
  h.Update(name.data(), name.size());
  return h.Digest128();
}

}  // namespace

StatusOr<std::vector<BlockKey>> internal::EngineImpl::ValueKeysInRam() {
  std::vector<BlockKey> keys;
  if (ssd_ != nullptr) PKV_RETURN_IF_ERROR(ssd_->Flush());  // queued ones are stored
  PKV_RETURN_IF_ERROR(Values().status());
  HotTier* hot = nullptr;
  {
    MutexLock lock(&mu_);
    hot = values_->hot.get();
  }
  if (hot == nullptr) return keys;
  // Collected first: the SSD tier is not asked under the hot tier's lock.
  hot->ForEach([&](const BlockMeta& meta, uint64_t) {
    if (meta.namespace_id.IsZero()) keys.push_back(meta.key);
  });
  return keys;
}

StatusOr<TierStack*> internal::EngineImpl::Values() {
  if (TierStack* stack = values_stack_.load(std::memory_order_acquire)) return stack;
  MutexLock lock(&mu_);
  if (values_ == nullptr) {
    PKV_ASSIGN_OR_RETURN(EngineOwner owner,
                         NewOwner("values", std::nullopt, /*with_remote=*/false));
    values_ = std::make_unique<EngineOwner>(std::move(owner));
    values_stack_.store(values_->stack.get(), std::memory_order_release);
  }
  return values_->stack.get();
}

StatusOr<SharedBytes> Engine::GetValue(std::string_view key) {
  PKV_RETURN_IF_ERROR(impl_->CheckOpen());
  PKV_ASSIGN_OR_RETURN(TierStack * stack, impl_->Values());
  PKV_ASSIGN_OR_RETURN(TierHit hit, stack->Get(ValueKey(key)));
  return std::move(hit.payload);
}

Status Engine::PutValue(std::string_view key, SharedBytes value) {
  PKV_RETURN_IF_ERROR(impl_->CheckOpen());
  PKV_ASSIGN_OR_RETURN(TierStack * stack, impl_->Values());
  BlockMeta meta;
  meta.key = ValueKey(key);
  return stack->Put(meta, std::move(value));
}

StatusOr<bool> Engine::DeleteValue(std::string_view key) {
  PKV_RETURN_IF_ERROR(impl_->CheckOpen());
  PKV_ASSIGN_OR_RETURN(TierStack * stack, impl_->Values());
  Status s = stack->Remove(ValueKey(key));
  if (s.IsNotFound()) return false;
  PKV_RETURN_IF_ERROR(s);
  return true;
}

bool Engine::ContainsValue(std::string_view key) const {
  if (!impl_->CheckOpen().ok()) return false;
  StatusOr<TierStack*> stack = impl_->Values();
  return stack.ok() && (*stack)->Contains(ValueKey(key));
}

StatusOr<uint64_t> Engine::CountValues() {
  PKV_RETURN_IF_ERROR(impl_->CheckOpen());
  PKV_ASSIGN_OR_RETURN(std::vector<BlockKey> hot, impl_->ValueKeysInRam());
  SsdTier* ssd = impl_->ssd_.get();
  uint64_t n = 0;
  if (ssd != nullptr) {
    ssd->ForEach([&](const BlockMeta& meta, uint64_t) {
      if (meta.namespace_id.IsZero()) ++n;
    });
  }
  for (const BlockKey& key : hot) n += ssd != nullptr && ssd->Contains(key) ? 0 : 1;
  return n;
}

StatusOr<uint64_t> Engine::ClearValues() {
  PKV_RETURN_IF_ERROR(impl_->CheckOpen());
  PKV_ASSIGN_OR_RETURN(std::vector<BlockKey> keys, impl_->ValueKeysInRam());
  if (SsdTier* ssd = impl_->ssd_.get()) {
    ssd->ForEach([&](const BlockMeta& meta, uint64_t) {
      if (meta.namespace_id.IsZero()) keys.push_back(meta.key);
    });
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  PKV_ASSIGN_OR_RETURN(TierStack * stack, impl_->Values());
  uint64_t removed = 0;
  for (const BlockKey& key : keys) {
    Status s = stack->Remove(key);
    if (s.ok()) {
      ++removed;
    } else if (!s.IsNotFound()) {
      return s;
    }
  }
  return removed;
}

}  // namespace prefixkv
