// Engine::RestorePinned: a restore plus its blocks as the tiers hold them,
// hot ones pinned, for callers that read the per-block tensors in place (the
// Python bindings' zero-copy arrays, docs/python.md). Engine::PlanRestore:
// the same pins around a plan of host ranges (RestorePlan, prefix_types.h) for a copy
// engine.
#include <algorithm>
#include <cstring>
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

// Whether `pinned` holds the bytes `loaded` holds: the very buffer the
// restore read, or the copy an SSD hit was promoted to. A block rewritten
// since the read (a tip stripped or rewritten by a concurrent store) differs.
bool SameBytes(const SharedBytes& pinned, const SharedBytes& loaded) {
  if (pinned.size() != loaded.size()) return false;
  return pinned.data() == loaded.data() ||
         std::memcmp(pinned.data(), loaded.data(), loaded.size()) == 0;
}

// A block the restore read, pinned in the hot tier when the tier still holds
// those bytes. Otherwise (it left the hot tier, or was rewritten there, after
// the read; or it is not resident) the block keeps the bytes the restore read,
// unpinned, so `blocks` is always what `result` was assembled from.
StatusOr<RestoredBlock> PinLoaded(HotTier* hot,
                                  const std::shared_ptr<SharedHotBudget>& budget,
                                  const BlockRecord& record, TierLevel level,
                                  const SharedBytes& payload,
                                  const DecodeLimits& limits) {
  RestoredBlock block;
  block.key = record.key;
  // Contains first: a block that left the hot tier counts no miss.
  std::optional<PinnedBlock> pinned;
  if (hot != nullptr && hot->Contains(record.key)) pinned = hot->Pin(record.key);
  if (pinned && SameBytes(pinned->payload(), payload)) {
    block.level = TierLevel::kHot;
    block.payload = pinned->payload();
    block.pin = std::make_shared<const HotPin>(HotPin{budget, std::move(*pinned)});
    // The hot tier's bytes were encoded by this process or verified when
    // stored, as the restore itself trusts them (block_io.cc).
    PKV_ASSIGN_OR_RETURN(block.record, DecodeTrustedBlock(block.payload, limits));
    return block;
  }
  block.level = level;
  block.payload = payload;
  block.record = record;  // its raw tensors view `payload`, held above
  return block;
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
  const uint64_t start_nanos = impl_->clock_->NowNanos();
  PinnedRestore out;
  // The blocks the restore itself read, pinned after it: pinning by key
  // instead could pair `result` with another version of a block, or fail on
  // one that left the tiers in between.
  struct Loaded {
    BlockRecord record;
    TierLevel level;
    SharedBytes payload;
  };
  std::vector<Loaded> loaded;
  StatusOr<RestoreResult> result = impl_->cache_->Restore(
      match,
      [&loaded](const BlockRecord& record, TierLevel level, const SharedBytes& payload) {
        loaded.push_back(Loaded{record, level, payload});
      });
  // Counted and timed like any restore.
  internal::RecordRestore(*impl_, match.ns, start_nanos,
                          result.ok() ? &*result : nullptr);
  PKV_ASSIGN_OR_RETURN(out.result, std::move(result));
  if (impl_->hooks_.before_restore_pins) impl_->hooks_.before_restore_pins();
  const EngineModel* model = impl_->Find(match.ns);
  HotTier* hot = model != nullptr ? model->tiers.hot.get() : nullptr;
  out.blocks.reserve(loaded.size());
  for (const Loaded& l : loaded) {
    PKV_ASSIGN_OR_RETURN(RestoredBlock block,
                         PinLoaded(hot, impl_->budget_, l.record, l.level, l.payload,
                                   impl_->options_.decode_limits));
    out.blocks.push_back(std::move(block));
  }
  return out;
}

}  // namespace prefixkv
