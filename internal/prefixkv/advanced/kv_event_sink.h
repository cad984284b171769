// Where the tiers report KV events (kv_events.h), and the reason the calling
// thread gives for the removals and replacements it makes.
//
// Each tier emits its own events under the lock that makes the change, so the
// events of one key reach the sink in the order of its changes:
//   hot budget  kStored on Put; kRemoved on Remove and for every victim of an
//               eviction (dirty ones too: their write-back is reported by
//               the SSD tier as kMoved hot -> ssd);
//   SSD tier    kStored when a direct Put commits; kMoved when it takes a hot
//               victim into its write-back queue (the block is readable from
//               the queue from then on); kRemoved on Remove, eviction and a
//               corrupt drop.
// The remote tier emits nothing: events describe a node's local tiers.
#pragma once

#include "prefixkv/advanced/tier.h"
#include "prefixkv/kv_events.h"

namespace prefixkv {

// Thread-safe. Emit is called synchronously, possibly under a tier's lock: it
// must be quick and must not call into the tiers' blocking paths.
class KvEventSink {
 public:
  virtual ~KvEventSink() = default;
  // `event` has every field but `seq` and `unix_ms` set; the sink may set them.
  virtual void Emit(KvEvent& event) = 0;
};

// An event about `meta`'s block in `tier`.
KvEvent MakeKvEvent(KvEventKind kind, TierLevel tier, const BlockMeta& meta,
                    uint64_t bytes, KvRemoveReason reason = KvRemoveReason::kNone);

// While alive, the removals and replacements the calling thread makes in a
// tier are reported with `reason` (the tier stack sets it for a strip, an
// expiry...). Without one, a Remove reports kRemoved and a replacing Put kNone.
class KvReasonScope {
 public:
  explicit KvReasonScope(KvRemoveReason reason);
  ~KvReasonScope();
  KvReasonScope(const KvReasonScope&) = delete;
  KvReasonScope& operator=(const KvReasonScope&) = delete;

 private:
  KvRemoveReason previous_;
};

// The reason of the innermost KvReasonScope on this thread; kNone without one.
KvRemoveReason CurrentKvReason();

}  // namespace prefixkv
