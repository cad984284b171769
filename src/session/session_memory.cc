// SessionManager, part 4: charging sessions' bytes, to the manager's own
// budget_bytes or to an engine's RAM budget (SessionManagerOptions::memory).
//
// With a MemoryCharge the live sessions are one owner of the budget the
// cached blocks live in. Growth is charged there first, which evicts cache
// blocks (they spill to SSD) to make room; only when the budget cannot make
// room that way does the manager evict its own least recently used sessions,
// exactly enough to cover the shortfall the budget reports, and retry. The
// charge runs outside State::mu because evicting blocks may wait for the SSD
// tier's write-back queue; what it charged is recorded in the table under
// State::mu afterwards, or refunded (PendingCharge) when the session stopped
// being live meanwhile. Charges run one at a time (State::charge_mu, held
// until recorded), so when the budget reports a shortfall every other byte
// this manager holds there belongs to a recorded, evictable session: the
// manager evicts only when that can make room. Shrinking and removal refund
// under State::mu (Uncharge never blocks), so the charge equals total_bytes
// whenever no charge is in flight.
#include <algorithm>
#include <string>

#include "session_internal.h"

namespace prefixkv {

StatusOr<std::optional<CacheMiss>> SessionManager::State::Recharge(
    const SessionManagerOptions& config, const std::shared_ptr<Session>& session,
    uint64_t new_bytes) {
  if (memory == nullptr) return RechargeWithinBudget(config, session, new_bytes);
  const std::string& id = session->session_id();
  uint64_t grow = 0;
  {
    MutexLock lock(&mu);
    State::Entry* entry = LiveEntry(session);
    if (entry == nullptr) return GoneMiss(session);
    const uint64_t limit = memory->limit_bytes();
    if (new_bytes > limit) {
      return Status::NoSpace("kv budget exceeded: session '" + id + "' would hold " +
                             std::to_string(new_bytes) + " bytes, budget is " +
                             std::to_string(limit));
    }
    if (new_bytes <= entry->bytes) {
      const uint64_t freed = entry->bytes - new_bytes;
      Refund(freed);
      total_bytes -= freed;
      entry->bytes = new_bytes;
      return std::optional<CacheMiss>();
    }
    grow = new_bytes - entry->bytes;
  }
  MutexLock charging(&charge_mu);
  PKV_RETURN_IF_ERROR(ChargeMemory(config, id, grow));
  PendingCharge pending(memory, grow);
  MutexLock lock(&mu);
  // The entry's bytes cannot have changed (only Recharge changes them, under
  // the session's exclusive lock), but the session may have been evicted.
  State::Entry* entry = LiveEntry(session);
  if (entry == nullptr) return GoneMiss(session);
  entry->bytes += grow;
  total_bytes += grow;
  pending.Commit();
  return std::optional<CacheMiss>();
}

Status SessionManager::State::ChargeMemory(const SessionManagerOptions& config,
                                           const std::string& keep, uint64_t bytes,
                                           const uint64_t* opening_epoch) {
  while (true) {
    uint64_t shortfall = 0;
    Status charged = memory->Charge(bytes, &shortfall);
    if (!charged.IsNoSpace()) return charged;
    shortfall = std::max<uint64_t>(shortfall, 1);
    MutexLock lock(&mu);
    auto kept = live.find(keep);
    // An older epoch of the session being opened goes when the open commits:
    // its bytes are freeable, and first (as under budget_bytes, where the
    // open supersedes before it evicts), so no other session is lost for them.
    const bool superseded = kept != live.end() && opening_epoch != nullptr &&
                            kept->second.session->route_epoch() < *opening_epoch;
    const uint64_t others =
        total_bytes - (kept != live.end() && !superseded ? kept->second.bytes : 0);
    // Evicting sessions that cannot make enough room would only lose them.
    if (shortfall > others) {
      return Status::NoSpace(
          "kv budget exceeded: session '" + keep + "' needs " + std::to_string(bytes) +
          " more bytes; the shared hot budget lacks " +
          (shortfall == UINT64_MAX ? std::string("them for good")
                                   : std::to_string(shortfall)) +
          " after evicting every cache block it can, and the other sessions hold " +
          std::to_string(others));
    }
    if (superseded) {
      Supersede(keep, config.max_tombstones);
      continue;
    }
    // Until before - total_bytes >= shortfall (shortfall <= others <= before).
    EvictLruUntil(keep, SIZE_MAX, total_bytes - shortfall, config.max_tombstones);
  }
}

}  // namespace prefixkv
