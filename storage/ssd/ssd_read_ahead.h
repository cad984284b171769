// ssd::ReadAhead: reads of blocks a restore will ask for next, made on a few
// background threads while the restoring thread checks and copies the blocks
// before them (docs/ssd.md "Read-ahead"). A restore of a chain reads its
// blocks in order; without this the disk idles while each block is hashed and
// the CPU idles while the next one is read.
//
// A read made ahead is a plain read of the block's extent at its index entry
// as it was when the read was queued, checked against that entry's XXH3-64;
// it counts nothing and changes nothing (no hit, no access order, no drop of
// a damaged block). Get takes it only when the block's entry is still the
// same extent with the same checksum, so the bytes are exactly what a read
// now would return; otherwise (the block was rewritten, moved or removed
// meanwhile, or the read ahead failed) Get reads the block itself and counts
// and handles everything as it always does. A read made ahead never needs a
// lock of the tier: segments are append-only and an extent's bytes never
// change while a file handle to its segment is open.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "prefixkv/advanced/mutex.h"
#include "prefixkv/advanced/ssd_tier.h"
#include "ssd_index.h"

namespace prefixkv::ssd {

// Thread-safe.
class ReadAhead {
 public:
  // Reads and verifies the extent of an entry (no counting, no dropping).
  using Reader = std::function<StatusOr<SharedBytes>(const IndexEntry&)>;

  // `threads` readers (started with the first Start); at most `max_bytes` of
  // payload queued, being read or read and not yet taken (one read of any size
  // always fits when none is). threads == 0 or max_bytes == 0: off.
  ReadAhead(uint32_t threads, uint64_t max_bytes, Reader read);
  ~ReadAhead();  // Stop()
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;

  bool enabled() const { return threads_ > 0 && max_bytes_ > 0; }

  // Queues a read of `key`'s extent at `entry`. kFull when the bytes bound is
  // taken; kNone when off, stopped, or the key has one already.
  ReadAheadResult Start(const BlockKey& key, const IndexEntry& entry) EXCLUDES(mu_);
  // Takes `key`'s read out of the set: its bytes when the read succeeded and
  // was made at `current`'s extent and checksum (waiting for it when it is
  // running), else nullopt and the caller reads the block itself (a read
  // still queued is cancelled: reading it here is as fast).
  std::optional<SharedBytes> Take(const BlockKey& key, const IndexEntry& current)
      EXCLUDES(mu_);
  // Forgets `key`'s read, if any (its bytes go when it finishes).
  void Drop(const BlockKey& key) EXCLUDES(mu_);
  // Waits for running reads, forgets every other; later Starts return false.
  void Stop() EXCLUDES(mu_);

  SsdReadAheadStats Stats() const EXCLUDES(mu_);

 private:
  enum class State : uint8_t { kQueued, kReading, kDone };
  struct Slot {
    BlockKey key;
    IndexEntry entry;
    State state = State::kQueued;
    // Dropped (or taken while queued): its reader, if it runs, gives its
    // bytes back to the bound; a slot Take waits on is not forgotten (Take
    // gives them back).
    bool forgotten = false;
    StatusOr<SharedBytes> result = Status::Unavailable("not read yet");
  };

  void Run() EXCLUDES(mu_);
  // Takes `slot` out of slots_ for good and, unless it is being read (its
  // reader does it then), its bytes out of the bound.
  void Forget(std::shared_ptr<Slot> slot) REQUIRES(mu_);

  const uint32_t threads_;
  const uint64_t max_bytes_;
  const Reader read_;

  mutable Mutex mu_;
  CondVar work_;  // a slot was queued, or Stop
  CondVar done_;  // a read finished
  bool stopped_ GUARDED_BY(mu_) = false;
  std::unordered_map<BlockKey, std::shared_ptr<Slot>, BlockKeyHash> slots_
      GUARDED_BY(mu_);
  // slots_.size(), written under mu_: Take reads it without the lock. A Take
  // racing a Start on another thread may miss the new slot; the Get then
  // reads the block itself and the slot's starter forgets it.
  std::atomic<size_t> slot_count_{0};
  std::deque<std::shared_ptr<Slot>> queue_ GUARDED_BY(mu_);
  uint64_t bytes_ GUARDED_BY(mu_) = 0;  // payload bytes against max_bytes_
  SsdReadAheadStats stats_ GUARDED_BY(mu_);
  std::vector<std::thread> readers_ GUARDED_BY(mu_);
};

}  // namespace prefixkv::ssd
