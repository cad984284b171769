// KV events: what a node's tiers hold, as a stream of changes (docs/events.md).
//
// Every change of where a block lives emits one KvEvent: a block stored in a
// tier, removed from one (and why), or moved from one tier to another. A
// consumer that applies the events in order to a set of (tier, key) pairs
// holds exactly the blocks the node's local tiers hold; a prefix-aware router
// does this for every node it routes to.
//
// Ordering: the events of one key arrive in the order of its changes (the
// tier emitting an event does so under the lock that makes the change).
// Events of different keys may interleave in any order.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "prefixkv/block.h"
#include "prefixkv/tier_types.h"

namespace prefixkv {

enum class KvEventKind : uint8_t {
  // The block is now in `tier` (new, replaced, promoted, fetched from the
  // remote tier, or written below by a Flush).
  kStored = 1,
  // The block left `tier`; `reason` says why and `copy_remains` whether
  // another local tier still holds it.
  kRemoved = 2,
  // The block is now in `tier`, taken from `from` (a dirty hot block handed to
  // the SSD tier's write-back when evicted; its removal from `from` is
  // reported before, as kRemoved with reason kEvicted).
  kMoved = 3,
  // Every block of `tier` is gone at once, with no per-block event: the hot
  // tier at open (RAM does not survive a restart). The key fields are zero.
  kCleared = 4,
};

enum class KvRemoveReason : uint8_t {
  kNone = 0,        // not a removal
  kEvicted = 1,     // for capacity (LRU or the policy's choice)
  kRemoved = 2,     // an explicit Remove (a raw key deleted, a value replaced)
  kStripped = 3,    // a superseded tip's window/recurrent state stripped
  kSuperseded = 4,  // replaced by a newer copy of the same key
  kCorrupt = 5,     // a checksum or decode failure dropped it
  kExpired = 6,     // its TTL ran out
  // A correction the event log emits at open (kStored or kRemoved): the SSD
  // tier holds (or no longer holds) a block the log's own replay says it does
  // not (or does), because a kill -9 fell between a change and its event
  // (docs/events.md, "Reconciliation").
  kReconciled = 7,
};

// "stored", "removed", "moved", "cleared".
std::string_view KvEventKindName(KvEventKind kind);
// "none", "evicted", "removed", "stripped", "superseded", "corrupt",
// "expired", "reconciled".
std::string_view KvRemoveReasonName(KvRemoveReason reason);

struct KvEvent {
  // Position in the engine's event log, from 1, monotonic across restarts;
  // 0 when no log numbers the events.
  uint64_t seq = 0;
  KvEventKind kind = KvEventKind::kStored;
  // kRemoved: why. kStored of a block the tier already held (a replacement):
  // kStripped for a tip's state stripped in place, else kNone.
  KvRemoveReason reason = KvRemoveReason::kNone;
  // Stored in, removed from, moved to, cleared.
  TierLevel tier = TierLevel::kNone;
  // kMoved: the tier the block left. Otherwise kNone.
  TierLevel from = TierLevel::kNone;
  // kRemoved: another local tier (hot or SSD) held the block when the event
  // was emitted. For the hot tier: the block was clean (written below) and
  // the engine has an SSD tier; an SSD eviction of it is reported on its own.
  bool copy_remains = false;
  // The budget owner charged for the block (a model, or the key-value space).
  OwnerId owner = 0;
  // The chain root (zero for raw values), the block and its parent (the
  // chain root for a chain's first block; zero for raw values).
  BlockKey namespace_id;
  BlockKey key;
  BlockKey parent;
  // The payload's size in bytes (0 for kCleared).
  uint64_t bytes = 0;
  // When the event was emitted: milliseconds since the Unix epoch on the
  // engine's clock.
  int64_t unix_ms = 0;

  bool operator==(const KvEvent&) const = default;
};

// Receives events synchronously, possibly under a tier's lock: it must be
// quick, must not block on other engine calls and must not call back into the
// engine or its tiers.
using KvEventCallback = std::function<void(const KvEvent&)>;

// Engine::Events' value: the events from the asked sequence number on.
struct KvEventPage {
  std::vector<KvEvent>
      events;  // ascending seq; consecutive unless a gap was proved empty
  // The from_seq of the next call (the last event's seq + 1, or the asked one
  // when no event is newer yet).
  uint64_t next_seq = 0;
};

// One block a local tier holds, as the event log knows it.
struct KvSnapshotBlock {
  BlockKey namespace_id;
  BlockKey key;
  BlockKey parent;
  OwnerId owner = 0;
  uint64_t bytes = 0;

  bool operator==(const KvSnapshotBlock&) const = default;
};

// Engine::EventSnapshot's value: every block of the hot and SSD tiers after
// the event `seq` and before the next one. A consumer applies the events from
// seq + 1 on (Engine::Events(seq + 1)).
struct KvEventSnapshot {
  uint64_t seq = 0;  // the last event applied (0: none yet)
  std::vector<KvSnapshotBlock> hot;
  std::vector<KvSnapshotBlock> ssd;
  // Engine::EventSnapshotPage: where the next page starts (0: this was the
  // last one). 0 for EventSnapshot.
  uint64_t next_cursor = 0;
};

// The event log's state and counters (Engine::EventLogStats, INFO "events").
struct KvEventLogStats {
  bool enabled = false;     // EngineOptions::event_log
  bool persistent = false;  // kept in data_dir/events (else in RAM only)
  uint64_t head_seq = 0;    // the last event's seq (0: none yet)
  uint64_t first_seq = 0;   // the oldest retained event's seq (0: none)
  uint64_t events = 0;      // events retained
  uint64_t bytes = 0;       // their encoded bytes (the files' size when persistent)
  uint64_t retention_bytes = 0;
  uint64_t retention_ms = 0;
  uint64_t appended = 0;      // events appended since open
  uint64_t trimmed = 0;       // events dropped by retention since open
  uint64_t reconciled = 0;    // corrective events emitted at open (kReconciled)
  uint64_t write_errors = 0;  // appends the file system refused (kept in RAM only)
  // Appends that waited for the log's writer thread because its queue was
  // full (a file write stalled; docs/events.md, "Durability").
  uint64_t append_waits = 0;
  uint64_t keys_hot = 0;  // blocks the log's key set holds per tier
  uint64_t keys_ssd = 0;
};

}  // namespace prefixkv
