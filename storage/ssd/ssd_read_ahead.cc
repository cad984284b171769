// ssd::ReadAhead (ssd_read_ahead.h): a bounded set of reads made ahead of the
// Gets that will take them, keyed by block, and the threads that make them.
// A slot lives in slots_ from Start until Take or Drop; its bytes count
// against the bound until then, or until its running read ends if it was
// forgotten while being read.
#include "ssd_read_ahead.h"

namespace prefixkv::ssd {

ReadAhead::ReadAhead(uint32_t threads, uint64_t max_bytes, Reader read)
    : threads_(threads), max_bytes_(max_bytes), read_(std::move(read)) {}

ReadAhead::~ReadAhead() { Stop(); }

ReadAheadResult ReadAhead::Start(const BlockKey& key, const IndexEntry& entry) {
  if (!enabled()) return ReadAheadResult::kNone;
  MutexLock lock(&mu_);
  if (stopped_ || slots_.contains(key)) return ReadAheadResult::kNone;
  if (bytes_ > 0 && bytes_ + entry.bytes > max_bytes_) return ReadAheadResult::kFull;
  auto slot = std::make_shared<Slot>();
  slot->key = key;
  slot->entry = entry;
  slots_.emplace(key, slot);
  slot_count_.store(slots_.size(), std::memory_order_release);
  queue_.push_back(slot);
  bytes_ += entry.bytes;
  stats_.started += 1;
  if (readers_.empty()) {
    for (uint32_t i = 0; i < threads_; ++i) readers_.emplace_back([this] { Run(); });
  }
  work_.NotifyOne();
  return ReadAheadResult::kStarted;
}

void ReadAhead::Forget(std::shared_ptr<Slot> slot) {  // a copy: erased below
  slots_.erase(slot->key);
  slot_count_.store(slots_.size(), std::memory_order_release);
  slot->forgotten = true;
  if (slot->state != State::kReading) bytes_ -= slot->entry.bytes;
}

std::optional<SharedBytes> ReadAhead::Take(const BlockKey& key,
                                           const IndexEntry& current) {
  // Every Get asks; most find nothing read ahead, and skip the lock.
  if (slot_count_.load(std::memory_order_acquire) == 0) return std::nullopt;
  MutexLock lock(&mu_);
  auto it = slots_.find(key);
  if (it == slots_.end()) return std::nullopt;
  std::shared_ptr<Slot> slot = std::move(it->second);
  slots_.erase(it);  // out of sight before any wait: no Drop or Start finds it
  slot_count_.store(slots_.size(), std::memory_order_release);
  if (slot->state == State::kQueued) {
    slot->forgotten = true;  // the reader skips it
    bytes_ -= slot->entry.bytes;
    stats_.unused += 1;
    return std::nullopt;
  }
  done_.Wait(lock, [&]() REQUIRES(mu_) { return slot->state == State::kDone; });
  bytes_ -= slot->entry.bytes;
  if (!slot->result.ok() || !SameExtent(slot->entry, current)) {
    stats_.stale += 1;
    return std::nullopt;
  }
  stats_.served += 1;
  return std::move(slot->result).value();
}

void ReadAhead::Drop(const BlockKey& key) {
  MutexLock lock(&mu_);
  auto it = slots_.find(key);
  if (it == slots_.end()) return;
  std::shared_ptr<Slot> slot = it->second;
  Forget(slot);
  stats_.unused += 1;
}

void ReadAhead::Stop() {
  std::vector<std::thread> readers;
  {
    MutexLock lock(&mu_);
    stopped_ = true;
    // Running reads finish (their readers account for them); the rest go.
    while (!slots_.empty()) Forget(slots_.begin()->second);
    queue_.clear();
    readers.swap(readers_);
    work_.NotifyAll();
  }
  for (std::thread& t : readers) t.join();
}

SsdReadAheadStats ReadAhead::Stats() const {
  MutexLock lock(&mu_);
  SsdReadAheadStats s = stats_;
  s.pending_bytes = bytes_;
  return s;
}

void ReadAhead::Run() {
  MutexLock lock(&mu_);
  while (true) {
    work_.Wait(lock, [this]() REQUIRES(mu_) { return stopped_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopped
    std::shared_ptr<Slot> slot = std::move(queue_.front());
    queue_.pop_front();
    if (slot->forgotten) continue;  // taken or dropped while queued
    slot->state = State::kReading;
    lock.Unlock();
    StatusOr<SharedBytes> read = read_(slot->entry);
    lock.Lock();
    slot->result = std::move(read);
    slot->state = State::kDone;
    if (slot->result.ok()) {
      stats_.bytes_read += slot->entry.bytes;
    } else {
      stats_.failed += 1;
    }
    if (slot->forgotten) {
      bytes_ -= slot->entry.bytes;
      slot->result = Status::Aborted("dropped");  // its bytes go now
    }
    done_.NotifyAll();
  }
}

}  // namespace prefixkv::ssd
