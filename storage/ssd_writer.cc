// WriteBackQueue: bounded write-back with retry (see ssd_writer.h).
#include "storage/ssd_writer.h"

#include <chrono>

namespace prefixkv::ssd {

WriteBackQueue::WriteBackQueue(uint32_t depth, uint32_t threads,
                               uint64_t retry_interval_ms, WriteFn write)
    : depth_(depth == 0 ? 1 : depth),
      retry_interval_ms_(retry_interval_ms),
      write_(std::move(write)) {
  if (threads == 0) threads = 1;
  for (uint32_t i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
}

WriteBackQueue::~WriteBackQueue() { (void)Stop(); }

bool WriteBackQueue::Enqueue(const BlockMeta& meta, const SharedBytes& payload,
                             bool force) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = queued_.find(meta.key); it != queued_.end()) {
    it->second = Item{meta, payload};  // newer version; keeps its place
    return true;
  }
  if (!force && queued_.size() >= depth_) return false;
  queued_.emplace(meta.key, Item{meta, payload});
  order_.push_back(meta.key);
  work_cv_.notify_one();
  return true;
}

std::optional<SharedBytes> WriteBackQueue::Find(const BlockKey& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = queued_.find(key); it != queued_.end()) return it->second.payload;
  if (auto it = in_flight_.find(key); it != in_flight_.end()) return it->second.payload;
  return std::nullopt;
}

std::optional<BlockMeta> WriteBackQueue::FindMeta(const BlockKey& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = queued_.find(key); it != queued_.end()) return it->second.meta;
  if (auto it = in_flight_.find(key); it != in_flight_.end()) return it->second.meta;
  return std::nullopt;
}

bool WriteBackQueue::Cancel(const BlockKey& key) {
  std::unique_lock<std::mutex> lock(mu_);
  bool found = false;
  while (in_flight_.count(key) > 0) {
    found = true;
    done_cv_.wait(lock);
  }
  if (queued_.erase(key) > 0) {
    found = true;
    std::erase(order_, key);
    done_cv_.notify_all();
  }
  return found;
}

Status WriteBackQueue::Flush() {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t failures_at_start = failures_;
  paused_after_error_ = false;  // retry now rather than after the interval
  work_cv_.notify_all();
  done_cv_.wait(lock, [&] {
    return (queued_.empty() && in_flight_.empty()) || failures_ > failures_at_start;
  });
  if (queued_.empty() && in_flight_.empty()) return Status::OK();
  return last_error_;
}

Status WriteBackQueue::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Status::OK();
    stopping_ = true;
    work_cv_.notify_all();
  }
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  // One last attempt per block, in order, on the calling thread.
  Status first;
  std::unique_lock<std::mutex> lock(mu_);
  while (!order_.empty()) {
    BlockKey key = order_.front();
    order_.pop_front();
    Item item = std::move(queued_.at(key));
    queued_.erase(key);
    lock.unlock();
    Status s = write_(item.meta, item.payload);
    if (!s.ok() && first.ok()) first = s.WithContext("write-back at close");
    lock.lock();
  }
  done_cv_.notify_all();
  return first;
}

uint64_t WriteBackQueue::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queued_.size() + in_flight_.size();
}

bool WriteBackQueue::TakeNext(Item* item) {
  for (auto it = order_.begin(); it != order_.end(); ++it) {
    Item& candidate = queued_.at(*it);
    if (in_flight_.count(candidate.meta.parent) > 0) continue;  // parent first
    if (in_flight_.count(*it) > 0) continue;  // an older version is being written
    *item = std::move(candidate);
    queued_.erase(*it);
    order_.erase(it);
    return true;
  }
  return false;
}

void WriteBackQueue::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (paused_after_error_ && !stopping_) {
      work_cv_.wait_for(lock, std::chrono::milliseconds(retry_interval_ms_));
      paused_after_error_ = false;
    }
    Item item;
    if (stopping_) return;  // Stop() writes what is left
    if (!TakeNext(&item)) {
      work_cv_.wait(lock);
      continue;
    }
    in_flight_.emplace(item.meta.key, item);
    lock.unlock();
    Status s = write_(item.meta, item.payload);
    lock.lock();
    Finish(item, s);
  }
}

void WriteBackQueue::Finish(const Item& item, const Status& s) {
  in_flight_.erase(item.meta.key);
  if (!s.ok()) {
    ++failures_;
    last_error_ = s;
    paused_after_error_ = true;
    // Back at the front unless a newer version was queued meanwhile.
    if (queued_.emplace(item.meta.key, item).second) order_.push_front(item.meta.key);
  }
  done_cv_.notify_all();
  work_cv_.notify_all();
}

}  // namespace prefixkv::ssd
