// Names of the KV event kinds and removal reasons (kv_events.h): the spelling
// the event log's consumers read (RESP fields, JSON, INFO).
#include "prefixkv/kv_events.h"

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
    case KvRemoveReason::kNotAdmitted:
      return "not_admitted";
    case KvRemoveReason::kReconciled:
      return "reconciled";
  }
  return "invalid";
}

}  // namespace prefixkv
