// Names of the KV event kinds and removal reasons (kv_events.h): the spelling
// the event log's consumers read (RESP fields, JSON, INFO).
#include "prefixkv/kv_events.h"

#include "prefixkv/advanced/kv_event_sink.h"
#include "prefixkv/advanced/tier.h"

namespace prefixkv {

std::string_view KvEventKindName(KvEventKind kind) {
  switch (kind) {
    case KvEventKind::kStored:
      return "stored";
    case KvEventKind::kRemoved:
      return "removed";
    case KvEventKind::kMoved:
      return "moved";
    case KvEventKind::kCleared:
      return "cleared";
  }
  return "invalid";
}

std::string_view KvRemoveReasonName(KvRemoveReason reason) {
  switch (reason) {
    case KvRemoveReason::kNone:
      return "none";
    case KvRemoveReason::kEvicted:
      return "evicted";
    case KvRemoveReason::kRemoved:
      return "removed";
    case KvRemoveReason::kStripped:
      return "stripped";
    case KvRemoveReason::kSuperseded:
      return "superseded";
    case KvRemoveReason::kCorrupt:
      return "corrupt";
    case KvRemoveReason::kExpired:
      return "expired";
    case KvRemoveReason::kReconciled:
      return "reconciled";
  }
  return "invalid";
}

KvEvent MakeKvEvent(KvEventKind kind, TierLevel tier, const BlockMeta& meta,
                    uint64_t bytes, KvRemoveReason reason) {
  KvEvent e;
  e.kind = kind;
  e.reason = reason;
  e.tier = tier;
  e.owner = meta.owner;
  e.namespace_id = meta.namespace_id;
  e.key = meta.key;
  e.parent = meta.parent;
  e.bytes = bytes;
  return e;
}

namespace {
thread_local KvRemoveReason current_reason = KvRemoveReason::kNone;
}  // namespace

KvReasonScope::KvReasonScope(KvRemoveReason reason) : previous_(current_reason) {
  current_reason = reason;
}

KvReasonScope::~KvReasonScope() { current_reason = previous_; }

KvRemoveReason CurrentKvReason() { return current_reason; }

namespace {
thread_local OwnerId current_read_owner = kEveryOwner;
}  // namespace

ReadOwnerScope::ReadOwnerScope(OwnerId owner) : previous_(current_read_owner) {
  current_read_owner = owner;
}

ReadOwnerScope::~ReadOwnerScope() { current_read_owner = previous_; }

OwnerId CurrentReadOwner() { return current_read_owner; }

}  // namespace prefixkv
