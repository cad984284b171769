// The engine's KV events (kv_events.h). Every tier reports its own changes
// under the lock that makes them (kv_event_sink.h), into this one function, so
// a consumer sees each key's changes in order. It stamps the time, fills what
// only the engine knows (whether the hot tier still holds a block the SSD tier
// dropped) and hands the event on.
#include "engine_impl.h"

namespace prefixkv {

void internal::EngineImpl::EmitKvEvent(KvEvent& event) {
  event.unix_ms = static_cast<int64_t>(clock_->UnixMillis());
  // Under the SSD tier's lock: the budget's lock comes after it, and the
  // budget never calls into the SSD tier holding its own.
  if (event.kind == KvEventKind::kRemoved && event.tier == TierLevel::kSsd &&
      budget_ != nullptr) {
    event.copy_remains = budget_->HoldsNow(event.owner, event.key);
  }
  if (options_.on_kv_event) options_.on_kv_event(event);
}

}  // namespace prefixkv
