// WriteBackQueue: the SSD tier's bounded queue of dirty blocks handed over by
// the hot tier, drained by background writer threads.
//
// Guarantees: a queued block is findable (Find) until it is stored; it is never
// dropped (a failed write puts it back and is retried every retry interval of
// the given Clock's time, or at once on Flush); a block whose last write
// attempt failed counts as failing (Health) until it is written, whatever other
// blocks' writes do meanwhile;
// blocks are taken in FIFO order, except that a block whose parent is queued
// or being written waits for the parent's write, so a parent is never stored
// after its child (whichever was handed over first). A writer takes up to kMaxBatchBlocks
// blocks (and about kMaxBatchBytes) at a time and stores them as one atomic write, so one
// log append (and, in sync mode, one fsync) covers several blocks. Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "prefixkv/advanced/mutex.h"
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
  // the queue is full (the caller then writes inline).
  bool Enqueue(const BlockMeta& meta, const SharedBytes& payload) EXCLUDES(mu_);
  // Queues a block whose inline write (the queue was full) failed with
  // `error`, over the bound: a dirty block is never dropped. It counts as a
  // failed attempt, and write-back is failing (Health) until it is written.
  void EnqueueFailed(const BlockMeta& meta, const SharedBytes& payload,
                     const Status& error) EXCLUDES(mu_);
  // The payload/metadata of a queued or in-flight block.
  std::optional<SharedBytes> Find(const BlockKey& key) const EXCLUDES(mu_);
  std::optional<BlockMeta> FindMeta(const BlockKey& key) const EXCLUDES(mu_);
  // Every queued and in-flight block, with its payload's size. A block leaves
  // the queue only after its write committed it, so a walk of the index made
  // after this one sees each block either here or there.
  std::vector<std::pair<BlockMeta, uint64_t>> Contents() const EXCLUDES(mu_);
  // A queued or in-flight block's parent is `key` (a scan of the queue).
  bool HasChildOf(const BlockKey& key) const EXCLUDES(mu_);
  // For a direct Put or Remove of `key`: waits first if it is being
  // written, then keeps writers off its queued version, which stays
  // findable (Find, Contents) until Release. Returns the held version's
  // number (each version queued gets its own), or 0 when none was queued
  // (nothing held). Dropped before the Put's commit, the key was in neither
  // the queue nor the index meanwhile: a read missed it and a walk (DBSIZE,
  // KEYS) left it out (until 2026-12-07;
  // SsdFaultTest.AQueuedVersionStaysFindableWhileAPutSupersedesIt); dropped
  // before a Remove's commit, a read was served the stored version that
  // queued one had overwritten (until 2026-12-07;
  // SsdFaultTest.ARemoveNeverUncoversTheStoredOlderVersionWhileItCommits).
  uint64_t Hold(const BlockKey& key) EXCLUDES(mu_);
  // Ends the Hold that returned `held` (0: a no-op). `superseded` (the Put
  // or Remove committed) drops the held version at once if it is still the
  // one queued; a version queued after this Hold is newer than the call and
  // stays. Otherwise, once no other Put or Remove of the key holds it, it
  // is written as before, in its place.
  void Release(const BlockKey& key, uint64_t held, bool superseded) EXCLUDES(mu_);
  // Waits until everything queued before the call is written (or superseded
  // by a direct Put or Remove), or until an attempt made after the call
  // failed (its Status is returned). Blocks queued after the call are not
  // waited for: under a steady stream of evictions the queue is never empty.
  // Writers paused after a failure retry at once; so does an attempt under
  // way at the call that fails after it (it neither ends the Flush nor
  // pauses the writers again).
  Status Flush() EXCLUDES(mu_);
  // Writes what is left with one attempt per block, then joins the threads.
  // OK, or the first failure, saying how many blocks (and bytes) could not be
  // written: those are lost.
  Status Stop() EXCLUDES(mu_);
  uint64_t size() const EXCLUDES(mu_);
  // OK while no waiting block's last write attempt failed; else the latest
  // failure: write-back is failing, those blocks live in RAM only, and the
  // tier stack refuses new write-back Puts. A write of other blocks that
  // succeeds meanwhile (another writer's segment still takes writes) does
  // not clear it; only writing the failed blocks does.
  Status Health() const EXCLUDES(mu_);
  // Blocks whose last write attempt failed and that still wait.
  uint64_t failed_blocks() const EXCLUDES(mu_);
  // Failed write attempts so far (a writer's batch, or an inline write).
  uint64_t failed_attempts() const EXCLUDES(mu_);

 private:
  using Item = WriteBackItem;

  void Run() EXCLUDES(mu_);
  // Pops the next item whose parent is neither queued nor in flight in
  // another batch than `batch`, and marks it in flight.
  bool TakeNext(const std::vector<Item>& batch, Item* item) REQUIRES(mu_);
  // Up to the batch limits.
  std::vector<Item> TakeBatch() REQUIRES(mu_);
  // `attempt`: the batch's number (attempts_started_ when it was taken).
  void Finish(const std::vector<Item>& batch, const Status& s, uint64_t attempt)
      REQUIRES(mu_);
  void NoteFailure(const Status& s) REQUIRES(mu_);
  // `key`'s queued item is a version Hold has not seen: numbers it.
  void NumberNewVersion(const BlockKey& key) REQUIRES(mu_);
  // Whether a block queued or in flight was queued with a ticket <= `ticket`.
  bool Waiting(uint64_t ticket) const REQUIRES(mu_);

  const uint32_t depth_;
  const uint64_t retry_interval_ms_;
  Clock* const clock_;
  const WriteFn write_;

  // Never held while write_ runs, nor while taking another lock.
  mutable Mutex mu_;
  CondVar work_cv_;                             // writers wait for items (mu_)
  CondVar done_cv_;                             // Flush/Cancel wait for progress (mu_)
  std::deque<BlockKey> order_ GUARDED_BY(mu_);  // FIFO of queued keys
  std::unordered_map<BlockKey, Item> queued_ GUARDED_BY(mu_);
  std::unordered_map<BlockKey, Item> in_flight_ GUARDED_BY(mu_);
  // When each queued and in-flight block was queued: a ticket per block
  // handed over (a newer version replacing a queued one keeps its ticket,
  // a block put back after a failed write too), for Flush.
  std::unordered_map<BlockKey, uint64_t> queued_tickets_ GUARDED_BY(mu_);
  std::unordered_map<BlockKey, uint64_t> in_flight_tickets_ GUARDED_BY(mu_);
  uint64_t last_ticket_ GUARDED_BY(mu_) = 0;
  uint64_t failures_ GUARDED_BY(mu_) = 0;  // failed attempts so far
  Status last_error_ GUARDED_BY(mu_);
  // Writers' batches numbered as they are taken. A Flush ends on the failure
  // of an attempt begun after it, not of one under way when it was called:
  // that failure, counted after the Flush began, ended it with the earlier
  // attempt's error and paused the writers again, so the retry the Flush
  // asked for waited a whole retry interval (until 2026-12-07;
  // WriteBackQueueHealth.AFlushRetriesAnAttemptThatFailsAfterItBegan).
  uint64_t attempts_started_ GUARDED_BY(mu_) = 0;
  uint64_t last_failed_attempt_ GUARDED_BY(mu_) = 0;
  Status last_failed_attempt_error_ GUARDED_BY(mu_);
  // Attempts numbered up to this one began before the latest Flush, which
  // asked for a retry now: their failure does not pause the writers.
  uint64_t retry_now_through_ GUARDED_BY(mu_) = 0;
  // Keys queued or in flight whose last write attempt failed.
  std::unordered_set<BlockKey> failed_ GUARDED_BY(mu_);
  // Queued keys direct Puts and Removes hold (Hold), which writers do not
  // take, with their number of holders: one holder's Release must not let
  // writers take a version another's commit is about to supersede.
  std::unordered_map<BlockKey, uint32_t> held_ GUARDED_BY(mu_);
  // The number of each queued key's version, so that a Release supersedes
  // only the version its own Hold saw. (Until 2026-12-07 a key had one mark,
  // "newer queued since the first Hold", so a Put or Remove begun after a
  // newer version was queued left it queued as if it were newer than the
  // call: a removed key was served again and an acknowledged Put was
  // overwritten by it; and a call that held nothing counted another's hold
  // off in its Release.
  // SsdFaultTest.ARemoveBegunAfterANewerVersionWasQueuedSupersedesIt,
  // APutBegunAfterANewerVersionWasQueuedSupersedesIt.)
  std::unordered_map<BlockKey, uint64_t> versions_ GUARDED_BY(mu_);
  uint64_t last_version_ GUARDED_BY(mu_) = 0;
  // Writers wait retry_interval before retrying; Flush() clears it.
  bool paused_after_error_ GUARDED_BY(mu_) = false;
  bool stopping_ GUARDED_BY(mu_) = false;
  // Started by the constructor; joined by the Stop() call that set stopping_
  // (the only one that gets past it), without mu_: the threads need it.
  std::vector<std::thread> threads_;
};

}  // namespace prefixkv::ssd
