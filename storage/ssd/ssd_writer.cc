// WriteBackQueue: bounded write-back with retry (see ssd_writer.h).
#include "ssd_writer.h"

#include <algorithm>
#include <cstdint>

namespace prefixkv::ssd {

WriteBackQueue::WriteBackQueue(uint32_t depth, uint32_t threads,
                               uint64_t retry_interval_ms, Clock* clock, WriteFn write)
    : depth_(depth == 0 ? 1 : depth),
      retry_interval_ms_(retry_interval_ms),
      clock_(clock),
      write_(std::move(write)) {
  if (threads == 0) threads = 1;
  for (uint32_t i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
}

WriteBackQueue::~WriteBackQueue() { (void)Stop(); }

bool WriteBackQueue::Enqueue(const BlockMeta& meta, const SharedBytes& payload) {
  MutexLock lock(&mu_);
  if (auto it = queued_.find(meta.key); it != queued_.end()) {
    it->second = Item{meta, payload};  // newer version; keeps its place
    NumberNewVersion(meta.key);
    return true;
  }
  if (queued_.size() >= depth_) return false;
  queued_.emplace(meta.key, Item{meta, payload});
  NumberNewVersion(meta.key);
  queued_tickets_[meta.key] = ++last_ticket_;
  order_.push_back(meta.key);
  work_cv_.NotifyOne();
  return true;
}

void WriteBackQueue::EnqueueFailed(const BlockMeta& meta, const SharedBytes& payload,
                                   const Status& error) {
  MutexLock lock(&mu_);
  NoteFailure(error);
  failed_.insert(meta.key);
  if (auto it = queued_.find(meta.key); it != queued_.end()) {
    it->second = Item{meta, payload};
    NumberNewVersion(meta.key);
    return;
  }
  queued_.emplace(meta.key, Item{meta, payload});
  NumberNewVersion(meta.key);
  queued_tickets_[meta.key] = ++last_ticket_;
  order_.push_back(meta.key);
  work_cv_.NotifyOne();
}

std::optional<SharedBytes> WriteBackQueue::Find(const BlockKey& key) const {
  MutexLock lock(&mu_);
  if (auto it = queued_.find(key); it != queued_.end()) return it->second.payload;
  if (auto it = in_flight_.find(key); it != in_flight_.end()) return it->second.payload;
  return std::nullopt;
}

std::optional<BlockMeta> WriteBackQueue::FindMeta(const BlockKey& key) const {
  MutexLock lock(&mu_);
  if (auto it = queued_.find(key); it != queued_.end()) return it->second.meta;
  if (auto it = in_flight_.find(key); it != in_flight_.end()) return it->second.meta;
  return std::nullopt;
}

std::vector<std::pair<BlockMeta, uint64_t>> WriteBackQueue::Contents() const {
  MutexLock lock(&mu_);
  std::vector<std::pair<BlockMeta, uint64_t>> out;
  out.reserve(queued_.size() + in_flight_.size());
  for (const auto& [key, item] : queued_) out.push_back({item.meta, item.payload.size()});
  for (const auto& [key, item] : in_flight_) {
    if (!queued_.contains(key)) out.push_back({item.meta, item.payload.size()});
  }
  return out;
}

bool WriteBackQueue::HasChildOf(const BlockKey& key) const {
  MutexLock lock(&mu_);
  const auto child = [&](const auto& entry) { return entry.second.meta.parent == key; };
  return std::any_of(queued_.begin(), queued_.end(), child) ||
         std::any_of(in_flight_.begin(), in_flight_.end(), child);
}

uint64_t WriteBackQueue::Hold(const BlockKey& key) {
  MutexLock lock(&mu_);
  while (in_flight_.count(key) > 0) done_cv_.Wait(lock);
  if (!queued_.contains(key)) return 0;
  ++held_[key];
  return versions_.at(key);
}

void WriteBackQueue::Release(const BlockKey& key, uint64_t held, bool superseded) {
  if (held == 0) return;  // held nothing: another call's hold is not ours
  MutexLock lock(&mu_);
  if (auto it = held_.find(key); it != held_.end() && --it->second == 0) held_.erase(it);
  if (auto v = versions_.find(key);
      superseded && v != versions_.end() && v->second == held) {
    // The version this call saw is past, whatever other holders do next; a
    // version queued after it would have another number.
    versions_.erase(v);
    queued_.erase(key);
    queued_tickets_.erase(key);
    std::erase(order_, key);
    failed_.erase(key);  // nothing of the key waits any more
    done_cv_.NotifyAll();
  }
  work_cv_.NotifyAll();  // a held block (or its child) may be taken now
}

void WriteBackQueue::NumberNewVersion(const BlockKey& key) {
  versions_[key] = ++last_version_;
}

Status WriteBackQueue::Flush() {
  MutexLock lock(&mu_);
  // Only the failure of an attempt begun after this call ends it: one under
  // way now is retried at once like the paused ones (attempts_started_).
  const uint64_t attempts_at_start = attempts_started_;
  // Only what was queued so far: waiting for an empty queue waited as long
  // as evictions kept coming
  // (WriteBackQueueHealth.FlushWaitsForWhatWasQueuedBeforeItNotForWhatCameAfter).
  const uint64_t queued_before = last_ticket_;
  paused_after_error_ = false;  // retry now rather than after the interval
  retry_now_through_ = attempts_at_start;
  work_cv_.NotifyAll();
  done_cv_.Wait(lock, [&]() REQUIRES(mu_) {
    return !Waiting(queued_before) || last_failed_attempt_ > attempts_at_start;
  });
  if (!Waiting(queued_before)) return Status::OK();
  return last_failed_attempt_error_;
}

Status WriteBackQueue::Stop() {
  {
    MutexLock lock(&mu_);
    if (stopping_) return Status::OK();
    stopping_ = true;
    work_cv_.NotifyAll();
  }
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  // One last attempt per block, parents first, on the calling thread. Nothing
  // is in flight any more, so some queued block always has no queued parent.
  Status first;
  uint64_t lost = 0, lost_bytes = 0, total = 0;
  auto attempt = [&](const Item& item) {
    ++total;
    Status s = write_({item});
    if (s.ok()) return;
    if (first.ok()) first = s;
    ++lost;
    lost_bytes += item.payload.size();
  };
  MutexLock lock(&mu_);
  Item item;
  while (TakeNext({}, &item)) {
    lock.Unlock();
    attempt(item);
    lock.Lock();
    in_flight_.erase(item.meta.key);
    in_flight_tickets_.erase(item.meta.key);
  }
  // Only a parent cycle (a 128-bit key collision) can leave blocks behind.
  std::vector<Item> left;
  for (const BlockKey& key : order_) left.push_back(std::move(queued_.at(key)));
  order_.clear();
  queued_.clear();
  queued_tickets_.clear();
  versions_.clear();
  failed_.clear();
  held_.clear();
  lock.Unlock();
  for (const Item& i : left) attempt(i);
  done_cv_.NotifyAll();
  if (first.ok()) return first;
  // Exactly what is lost: those blocks were acknowledged and live nowhere else.
  return first.WithContext("write-back at close: " + std::to_string(lost) + " of " +
                           std::to_string(total) + " queued blocks (" +
                           std::to_string(lost_bytes) +
                           " bytes) could not be written and are lost");
}

uint64_t WriteBackQueue::size() const {
  MutexLock lock(&mu_);
  return queued_.size() + in_flight_.size();
}

Status WriteBackQueue::Health() const {
  MutexLock lock(&mu_);
  return failed_.empty() ? Status::OK() : last_error_;
}

uint64_t WriteBackQueue::failed_blocks() const {
  MutexLock lock(&mu_);
  return failed_.size();
}

uint64_t WriteBackQueue::failed_attempts() const {
  MutexLock lock(&mu_);
  return failures_;
}

bool WriteBackQueue::Waiting(uint64_t ticket) const {
  const auto older = [&](const auto& entry) { return entry.second <= ticket; };
  return std::any_of(queued_tickets_.begin(), queued_tickets_.end(), older) ||
         std::any_of(in_flight_tickets_.begin(), in_flight_tickets_.end(), older);
}

void WriteBackQueue::NoteFailure(const Status& s) {
  ++failures_;
  last_error_ = s;
}

bool WriteBackQueue::TakeNext(const std::vector<Item>& batch, Item* item) {
  auto in_batch = [&](const BlockKey& k) {
    return std::any_of(batch.begin(), batch.end(),
                       [&](const Item& i) { return i.meta.key == k; });
  };
  for (auto it = order_.begin(); it != order_.end(); ++it) {
    Item& candidate = queued_.at(*it);
    if (in_flight_.count(*it) > 0) continue;  // an older version is being written
    if (held_.contains(*it)) continue;        // a direct Put or Remove of it is under way
    // Parent first (whether it was queued before or after this block), unless
    // the parent is in this very (atomic) batch.
    const BlockKey& parent = candidate.meta.parent;
    if (parent != *it && queued_.count(parent) > 0) continue;
    if (in_flight_.count(parent) > 0 && !in_batch(parent)) continue;
    *item = std::move(candidate);
    in_flight_.emplace(item->meta.key, *item);
    in_flight_tickets_[*it] = queued_tickets_.at(*it);
    queued_tickets_.erase(*it);
    versions_.erase(*it);
    queued_.erase(*it);
    order_.erase(it);
    return true;
  }
  return false;
}

std::vector<WriteBackQueue::Item> WriteBackQueue::TakeBatch() {
  std::vector<Item> batch;
  uint64_t bytes = 0;
  Item item;
  while (batch.size() < kMaxBatchBlocks && bytes < kMaxBatchBytes &&
         TakeNext(batch, &item)) {
    bytes += item.payload.size();
    batch.push_back(std::move(item));
  }
  return batch;
}

void WriteBackQueue::Run() {
  MutexLock lock(&mu_);
  while (true) {
    if (paused_after_error_ && !stopping_) {
      // Clock time: a FakeClock test advances it instead of sleeping. Ends
      // early on Stop() and on Flush() (which clears the pause).
      const uint64_t nanos = retry_interval_ms_ > UINT64_MAX / 1000000
                                 ? UINT64_MAX
                                 : retry_interval_ms_ * 1000000;
      clock_->WaitFor(work_cv_.native(), lock.native(), nanos,
                      [&]() REQUIRES(mu_) { return stopping_ || !paused_after_error_; });
      paused_after_error_ = false;
    }
    if (stopping_) return;  // Stop() writes what is left
    std::vector<Item> batch = TakeBatch();
    if (batch.empty()) {
      work_cv_.Wait(lock);
      continue;
    }
    const uint64_t attempt = ++attempts_started_;
    lock.Unlock();
    Status s = write_(batch);
    lock.Lock();
    Finish(batch, s, attempt);
  }
}

void WriteBackQueue::Finish(const std::vector<Item>& batch, const Status& s,
                            uint64_t attempt) {
  if (!s.ok()) {
    NoteFailure(s);
    if (attempt > last_failed_attempt_) {
      last_failed_attempt_ = attempt;
      last_failed_attempt_error_ = s;
    }
    // A Flush called while this attempt was under way asked for a retry now.
    if (attempt > retry_now_through_) paused_after_error_ = true;
  }
  // Back at the front, in order, unless a newer version was queued meanwhile.
  for (auto it = batch.rbegin(); it != batch.rend(); ++it) {
    const BlockKey& key = it->meta.key;
    const uint64_t ticket = in_flight_tickets_.at(key);
    in_flight_.erase(key);
    in_flight_tickets_.erase(key);
    if (s.ok()) {
      // Written. A newer version queued meanwhile keeps the key's mark.
      if (!queued_.contains(key)) failed_.erase(key);
      continue;
    }
    failed_.insert(key);
    if (queued_.emplace(key, *it).second) {
      queued_tickets_[key] = ticket;
      NumberNewVersion(key);
      order_.push_front(key);
    }
  }
  done_cv_.NotifyAll();
  work_cv_.NotifyAll();
}

}  // namespace prefixkv::ssd
