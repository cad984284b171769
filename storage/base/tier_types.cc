// Names and parsers of the tier value types (tier_types.h): tier levels, SSD
// durability modes, eviction policies and remote write modes. The CLI's flags
// and every printed report go through these, so the spelling a user types is
// the one they read back; an unknown name is InvalidArgument listing the valid
// ones, never a silent default.
#include "prefixkv/tier_types.h"

namespace prefixkv {

std::string_view TierLevelName(TierLevel level) {
  switch (level) {
    case TierLevel::kNone:
      return "none";
    case TierLevel::kHot:
      return "hot";
    case TierLevel::kSsd:
      return "ssd";
    case TierLevel::kRemote:
      return "remote";
  }
  return "invalid";
}

std::string_view SsdDurabilityName(SsdDurability d) {
  switch (d) {
    case SsdDurability::kFlush:
      return "flush";
    case SsdDurability::kWal:
      return "wal";
    case SsdDurability::kSync:
      return "sync";
  }
  return "wal";
}

StatusOr<SsdDurability> ParseSsdDurability(std::string_view name) {
  for (SsdDurability d :
       {SsdDurability::kFlush, SsdDurability::kWal, SsdDurability::kSync}) {
    if (name == SsdDurabilityName(d)) return d;
  }
  return Status::InvalidArgument("durability must be flush, wal or sync");
}

StatusOr<EvictionPolicyKind> ParseEvictionPolicy(std::string_view name) {
  for (EvictionPolicyKind k : {EvictionPolicyKind::kLru, EvictionPolicyKind::kLeafLru,
                               EvictionPolicyKind::kChain}) {
    if (name == EvictionPolicyName(k)) return k;
  }
  return Status::InvalidArgument("unknown eviction policy '" + std::string(name) +
                                 "' (expected lru, leaf-lru or chain)");
}

std::string_view EvictionPolicyName(EvictionPolicyKind kind) {
  switch (kind) {
    case EvictionPolicyKind::kLru:
      return "lru";
    case EvictionPolicyKind::kLeafLru:
      return "leaf-lru";
    case EvictionPolicyKind::kChain:
      return "chain";
  }
  return "unknown";
}

StatusOr<RemoteWriteMode> ParseRemoteWriteMode(std::string_view name) {
  if (name == "on_spill" || name == "on-spill") return RemoteWriteMode::kOnSpill;
  if (name == "always") return RemoteWriteMode::kAlways;
  return Status::InvalidArgument("unknown remote write mode '" + std::string(name) +
                                 "' (on_spill or always)");
}

std::string_view SsdAdmissionName(SsdAdmissionKind kind) {
  switch (kind) {
    case SsdAdmissionKind::kBudget:
      return "budget";
    case SsdAdmissionKind::kGhost:
      return "ghost";
    case SsdAdmissionKind::kAll:
      break;
  }
  return "all";
}

StatusOr<SsdAdmissionKind> ParseSsdAdmission(std::string_view name) {
  if (name == "all") return SsdAdmissionKind::kAll;
  if (name == "budget") return SsdAdmissionKind::kBudget;
  if (name == "ghost") return SsdAdmissionKind::kGhost;
  return Status::InvalidArgument("unknown ssd admission '" + std::string(name) +
                                 "' (all, budget or ghost)");
}

}  // namespace prefixkv
