// The engine's KV events (docs/events.md): the one function every tier's
// change goes through (EmitKvEvent: numbered by the event log, then handed
// to EngineOptions::on_kv_event), opening the log with its reconciliation
// against the SSD tier, and the readers (Events, EventSnapshot, WatchEvents).
//
// Reconciliation: a kill -9 can fall between an SSD commit and its event (or
// the other way round, depending on where a tier emits). At open the log's
// replay of the SSD key set (its checkpoint plus the events after it) is
// compared with the SSD tier's index, and each difference becomes one
// kStored or kRemoved event with reason kReconciled; when the log cannot
// replay the set (no checkpoint, or events after it trimmed) one kCleared of
// the SSD tier (reason kReconciled) and a kStored of every SSD block rebase
// it. Either way a consumer that applied every event holds the SSD tier's
// exact key set after the open's events.
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "engine_impl.h"
#include "event_log.h"

namespace prefixkv {

void internal::EngineImpl::EmitKvEvent(KvEvent& e) {
  e.unix_ms = static_cast<int64_t>(clock_->UnixMillis());
  // Under the SSD tier's lock: the budget's lock comes after it, and the
  // budget never calls into the SSD tier holding its own.
  if (e.kind == KvEventKind::kRemoved && e.tier == TierLevel::kSsd &&
      budget_ != nullptr) {
    e.copy_remains = budget_->HoldsNow(kEveryOwner, e.key);  // one key space
  }
  if (options_.event_log) {
    // Before the log is open (the SSD tier's own recovery) events are
    // dropped: the reconciliation that follows accounts for them.
    if (!events_ready_.load(std::memory_order_acquire)) return;
    events_->Append(e);
  }
  if (options_.on_kv_event) options_.on_kv_event(e);
}

Status internal::EngineImpl::OpenEvents(FileSystem* fs) {
  if (!options_.event_log) return Status::OK();
  if (options_.event_retention_bytes < 2 * kMinEventSegmentBytes ||
      options_.event_retention_ms == 0) {
    return Status::InvalidArgument("event retention must be at least " +
                                   std::to_string(2 * kMinEventSegmentBytes) +
                                   " bytes and 1 ms");
  }
  EventLogOptions o;
  if (!options_.data_dir.empty()) o.dir = options_.data_dir + "/events";
  o.fs = fs;
  o.clock = clock_;
  o.retention_bytes = options_.event_retention_bytes;
  o.retention_ms = options_.event_retention_ms;
  o.log = options_.log;
  PKV_ASSIGN_OR_RETURN(events_, EventLog::Open(o));
  events_ready_.store(true, std::memory_order_release);
  // Also without a hot tier: the last run on this log may have had one, and
  // a consumer resuming across the open would keep its blocks for good.
  KvEvent cleared{.kind = KvEventKind::kCleared, .tier = TierLevel::kHot};
  EmitKvEvent(cleared);
  if (ssd_ == nullptr) return Status::OK();
  ReconcileSsdEvents();
  Status s = events_->Checkpoint();
  if (!s.ok() && options_.log)
    options_.log("event log: checkpoint failed: " + s.ToString());
  return Status::OK();
}

void internal::EngineImpl::ReconcileSsdEvents() {
  KvKeySet logged = events_->SsdKeys();
  uint64_t corrections = 0;
  const auto emit = [&](KvEventKind kind, const KvSnapshotBlock& b) {
    KvEvent e{.kind = kind,
              .reason = KvRemoveReason::kReconciled,
              .tier = TierLevel::kSsd,
              .owner = b.owner,
              .namespace_id = b.namespace_id,
              .key = b.key,
              .parent = b.parent,
              .bytes = kind == KvEventKind::kCleared ? 0 : b.bytes};
    EmitKvEvent(e);
    ++corrections;
  };
  if (!events_->ssd_keys_proven()) {
    emit(KvEventKind::kCleared, KvSnapshotBlock{});
    logged.clear();
  }
  std::vector<KvSnapshotBlock> held;
  ssd_->ForEach([&](const BlockMeta& m, uint64_t bytes) {
    held.push_back({.namespace_id = m.namespace_id,
                    .key = m.key,
                    .parent = m.parent,
                    .owner = m.owner,
                    .bytes = bytes});
  });
  for (const KvSnapshotBlock& b : held) {
    if (logged.erase(b.key) == 0) emit(KvEventKind::kStored, b);
  }
  for (const auto& [key, b] : logged) emit(KvEventKind::kRemoved, b);
  events_->CountReconciled(corrections);
  if (corrections > 0 && options_.log) {
    options_.log("event log: " + std::to_string(corrections) +
                 " reconciling events for the SSD tier");
  }
}

void internal::EngineImpl::SyncEvents() {
  // Write-back acknowledges changes that only RAM holds (a kill -9 loses
  // them, and the hot tier is cleared at open): their events need not be
  // written first. Write-through and kSync acknowledge durable changes.
  if (events_ == nullptr ||
      (!options_.write_through && options_.durability != SsdDurability::kSync)) {
    return;
  }
  Status s = events_->Flush(options_.durability == SsdDurability::kSync);
  if (!s.ok() && options_.log) options_.log("event log: sync failed: " + s.ToString());
}

void internal::EngineImpl::CloseEvents() {
  if (events_ == nullptr) return;
  Status s = events_->Close();
  if (!s.ok() && options_.log) options_.log("event log: close failed: " + s.ToString());
}

namespace {

Status NoLog() {
  return Status::NotSupported("the event log is off (EngineOptions::event_log)");
}

// `wait_ms` in nanoseconds, saturated: a product past 2^64 would wrap to a
// short wait (18446744073710 ms to 0.45 ms) and the wait end at once.
uint64_t WaitNanos(uint64_t wait_ms) {
  uint64_t nanos = 0;
  return __builtin_mul_overflow(wait_ms, uint64_t{1'000'000}, &nanos) ? UINT64_MAX
                                                                      : nanos;
}

}  // namespace

StatusOr<KvEventPage> Engine::Events(uint64_t from_seq, size_t max_events,
                                     uint64_t wait_ms) const {
  PKV_RETURN_IF_ERROR(impl_->CheckOpen());
  if (impl_->events_ == nullptr) return NoLog();
  StatusOr<KvEventPage> page = impl_->events_->Read(from_seq, max_events);
  if (!page.ok() || !page->events.empty() || wait_ms == 0 || max_events == 0) return page;
  struct Waiter {
    std::mutex mu;
    std::condition_variable cv;
    bool woken = false;
  };
  auto w = std::make_shared<Waiter>();
  const uint64_t id = impl_->events_->Watch(from_seq, [w] {
    std::lock_guard<std::mutex> l(w->mu);
    w->woken = true;
    w->cv.notify_all();
  });
  {
    std::unique_lock<std::mutex> l(w->mu);
    impl_->clock_->WaitFor(w->cv, l, WaitNanos(wait_ms), [&w] { return w->woken; });
  }
  impl_->events_->Unwatch(id);
  return impl_->events_->Read(from_seq, max_events);
}

StatusOr<std::vector<KvEvent>> Engine::EventRange(uint64_t first_seq, uint64_t last_seq,
                                                  size_t max_events, bool reverse) const {
  PKV_RETURN_IF_ERROR(impl_->CheckOpen());
  if (impl_->events_ == nullptr) return NoLog();
  return impl_->events_->Range(first_seq, last_seq, max_events, reverse);
}

StatusOr<uint64_t> Engine::WatchEvents(uint64_t from_seq,
                                       std::function<void()> wake) const {
  PKV_RETURN_IF_ERROR(impl_->CheckOpen());
  if (impl_->events_ == nullptr) return NoLog();
  return impl_->events_->Watch(from_seq, std::move(wake));
}

void Engine::UnwatchEvents(uint64_t watch_id) const {
  if (impl_->events_ != nullptr && watch_id != 0) impl_->events_->Unwatch(watch_id);
}

StatusOr<KvEventSnapshot> Engine::EventSnapshot() const {
  PKV_RETURN_IF_ERROR(impl_->CheckOpen());
  if (impl_->events_ == nullptr) return NoLog();
  return impl_->events_->Snapshot();
}

StatusOr<KvEventSnapshot> Engine::EventSnapshotPage(uint64_t cursor, size_t count) const {
  PKV_RETURN_IF_ERROR(impl_->CheckOpen());
  if (impl_->events_ == nullptr) return NoLog();
  if (count == 0) return Status::InvalidArgument("a snapshot page of 0 blocks");
  return impl_->events_->Snapshot(cursor, count);
}

KvEventLogStats Engine::EventLogStats() const {
  return impl_->events_ != nullptr ? impl_->events_->Stats() : KvEventLogStats{};
}

}  // namespace prefixkv
