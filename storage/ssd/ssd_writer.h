// WriteBackQueue: the SSD tier's bounded queue of dirty blocks handed over by
// the hot tier, drained by background writer threads.
//
// Guarantees: a queued block is findable (Find) until it is stored; it is never
// dropped (a failed write puts it back and is retried every retry interval of
// the given Clock's time, or at once on Flush);
// blocks are taken in FIFO order, except that a block whose parent is queued
// or being written waits for the parent's write, so a parent is never stored
// after its child (whichever was handed over first). A writer takes up to kMaxBatchBlocks
// blocks (and about kMaxBatchBytes) at a time and stores them as one atomic write, so one
// log append (and, in sync mode, one fsync) covers several blocks. Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include "prefixkv/advanced/tier.h"
#include "prefixkv/clock.h"

namespace prefixkv::ssd {

struct WriteBackItem {
  BlockMeta meta;
  SharedBytes payload;
};

class WriteBackQueue {
 public:
  static constexpr size_t kMaxBatchBlocks = 16;
  static constexpr uint64_t kMaxBatchBytes = 16ull << 20;
  // Stores the blocks as one atomic write (all or none).
  using WriteFn = std::function<Status(const std::vector<WriteBackItem>&)>;

  // `write` stores one block; it is called without the queue's lock and counts
  // and logs its own failures. After a failed write the writers wait
  // `retry_interval_ms` of `clock` time (Clock::WaitFor) before the next
  // attempt. REQUIRES: `clock` outlives the queue.
  WriteBackQueue(uint32_t depth, uint32_t threads, uint64_t retry_interval_ms,
                 Clock* clock, WriteFn write);
  ~WriteBackQueue();  // Stop()

  // Queues a block or replaces the queued version of the same key. False when
  // the queue is full (the caller then writes inline), unless `force`.
  bool Enqueue(const BlockMeta& meta, const SharedBytes& payload, bool force);
  // The payload/metadata of a queued or in-flight block.
  std::optional<SharedBytes> Find(const BlockKey& key) const;
  std::optional<BlockMeta> FindMeta(const BlockKey& key) const;
  // Drops a queued block (a direct Put or Remove superseded it); waits first
  // if it is being written. True when something was queued or in flight.
  bool Cancel(const BlockKey& key);
  // Waits until everything queued before the call is written, or until an
  // attempt made after the call failed (its Status is returned).
  Status Flush();
  // Writes what is left with one attempt per block, then joins the threads.
  // Returns the first failure (those blocks are lost) or OK.
  Status Stop();
  uint64_t size() const;

 private:
  using Item = WriteBackItem;

  void Run();
  // Pops the next item whose parent is neither queued nor in flight in
  // another batch than `batch`, and marks it in flight. REQUIRES: mu_ held.
  bool TakeNext(const std::vector<Item>& batch, Item* item);
  // Up to the batch limits. REQUIRES: mu_ held.
  std::vector<Item> TakeBatch();
  void Finish(const std::vector<Item>& batch, const Status& s);

  const uint32_t depth_;
  const uint64_t retry_interval_ms_;
  Clock* const clock_;
  const WriteFn write_;

  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // writers wait for items
  std::condition_variable done_cv_;  // Flush/Cancel wait for progress
  std::deque<BlockKey> order_;       // FIFO of queued keys
  std::unordered_map<BlockKey, Item> queued_;
  std::unordered_map<BlockKey, Item> in_flight_;
  uint64_t failures_ = 0;  // failed attempts so far
  Status last_error_;
  // Writers wait retry_interval before retrying; Flush() clears it.
  bool paused_after_error_ = false;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace prefixkv::ssd
