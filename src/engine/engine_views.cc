// Engine::RestorePinned: a restore plus its blocks as the tiers hold them,
// hot ones pinned, for callers that read the per-block tensors in place (the
// Python bindings' zero-copy arrays, docs/python.md). Engine::PlanRestore:
// the same pins around a plan of host ranges (RestorePlan, prefix_types.h) for a copy
// engine.
#include <algorithm>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine_impl.h"

namespace prefixkv {
namespace {

// One held pin and the budget it belongs to: the pin is released (member
// order) before the budget reference, so a pin outliving Close() still finds
// its budget.
struct HotPin {
  std::shared_ptr<SharedHotBudget> budget;
  PinnedBlock pin;
};

// The keys of the blocks a restore of `match` used: the first
// restored_blocks matched keys, except when the restore ended at a partial
// tip beside the chain (docs/prefix_cache.md, "Tips beside the chain"); that
// tip's key is the chain key of its tokens after the blocks before it.
StatusOr<std::vector<BlockKey>> RestoredKeys(const MatchResult& match,
                                             const RestoreResult& result,
                                             uint32_t block_tokens) {
  const size_t n = result.restored_blocks;
  const size_t b = block_tokens;
  if (n > match.keys.size() || result.restored_tokens > match.tokens.size() ||
      result.restored_tokens <= (n - 1) * b) {
    return Status::Internal("restore of " + std::to_string(n) + " blocks and " +
                            std::to_string(result.restored_tokens) +
                            " tokens does not fit its match");
  }
  std::vector<BlockKey> keys(match.keys.begin(),
                             match.keys.begin() + static_cast<int64_t>(n));
  if (result.restored_tokens != std::min(n * b, match.tokens.size())) {
    const size_t j = n - 1;  // full blocks before the tip
    const BlockKey parent = j == 0 ? match.ns.root : match.keys[j - 1];
    keys[j] = ChainKey(parent, std::span<const int32_t>(match.tokens)
                                   .subspan(j * b, result.restored_tokens - j * b));
  }
  return keys;
}

// Whether `record` views `payload` (some tensor lies in it): a pin of that
// payload keeps the record's bytes in the hot tier. A block replaced since
// it was loaded has another payload.
bool Views(const BlockRecord& record, const SharedBytes& payload) {
  for (const LayerState& layer : record.layers) {
    for (const Tensor& t : layer.tensors) {
      if (t.nbytes() > 0 && t.data() >= payload.data() &&
          t.data() + t.nbytes() <= payload.data() + payload.size()) {
        return true;
      }
    }
  }
  return false;
}

}  // namespace

StatusOr<RestorePlan> Engine::PlanRestore(const MatchResult& match) {
  PKV_RETURN_IF_ERROR(impl_->CheckOpen());
  const uint64_t start_nanos = impl_->clock_->NowNanos();
  const EngineModel* model = impl_->Find(match.ns);
  HotTier* hot = model != nullptr ? model->tiers.hot.get() : nullptr;
  std::shared_ptr<SharedHotBudget> budget = impl_->budget_;
  auto pin = [hot, &budget](const BlockRecord& record) -> std::shared_ptr<const void> {
    // Contains first: a block that left meanwhile counts no second miss.
    if (hot == nullptr || !hot->Contains(record.key)) return nullptr;
    std::optional<PinnedBlock> pinned = hot->Pin(record.key);
    if (!pinned || !Views(record, pinned->payload())) return nullptr;
    return std::make_shared<const HotPin>(HotPin{budget, std::move(*pinned)});
  };
  StatusOr<RestorePlan> plan = impl_->cache_->PlanRestore(match, impl_->memory_, pin);
  internal::RecordRestore(*impl_, match.ns, start_nanos,
                          plan.ok() ? &plan->result : nullptr);
  return plan;
}

StatusOr<PinnedRestore> Engine::RestorePinned(const MatchResult& match) {
  PKV_RETURN_IF_ERROR(impl_->CheckOpen());
  PinnedRestore out;
  // Through Engine::Restore, so a pinned restore is counted and timed like any.
  PKV_ASSIGN_OR_RETURN(out.result, Restore(match));
  if (out.result.restored_blocks == 0) return out;
  PKV_ASSIGN_OR_RETURN(NamespaceSpec spec, impl_->cache_->Spec(match.ns));
  PKV_ASSIGN_OR_RETURN(std::vector<BlockKey> keys,
                       RestoredKeys(match, out.result, spec.block_tokens));
  const EngineModel* model = impl_->Find(match.ns);
  HotTier* hot = model != nullptr ? model->tiers.hot.get() : nullptr;
  const DecodeLimits& limits = impl_->options_.decode_limits;
  out.blocks.reserve(keys.size());
  for (const BlockKey& key : keys) {
    RestoredBlock block;
    block.key = key;
    // Contains first: a block that left the hot tier is read below without
    // a second miss counted for it.
    std::optional<PinnedBlock> pinned;
    if (hot != nullptr && hot->Contains(key)) pinned = hot->Pin(key);
    if (pinned) {
      block.level = TierLevel::kHot;
      block.payload = pinned->payload();
      block.pin =
          std::make_shared<const HotPin>(HotPin{impl_->budget_, std::move(*pinned)});
      // The hot tier's bytes were encoded by this process or verified when
      // stored, as the restore itself trusts them (block_io.cc).
      PKV_ASSIGN_OR_RETURN(block.record, DecodeTrustedBlock(block.payload, limits));
    } else {
      block.level = TierLevel::kSsd;
      PKV_ASSIGN_OR_RETURN(block.payload, impl_->cache_->GetBlock(match.ns, key));
      PKV_ASSIGN_OR_RETURN(block.record, DecodeBlock(block.payload, limits));
    }
    if (block.record.key != key) {
      return Status::Corruption("block " + key.ToHex() + " holds record " +
                                block.record.key.ToHex());
    }
    out.blocks.push_back(std::move(block));
  }
  return out;
}

}  // namespace prefixkv
