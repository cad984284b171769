// Helpers shared by the tiers' Audit(): summing TierCounters and reporting
// each counter that disagrees with its recomputed value as one AuditFinding.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "prefixkv/advanced/tier.h"

namespace prefixkv::audit {

// Adds every counter of `c` to `*into`.
void Sum(TierCounters* into, const TierCounters& c);

// One finding "<what>" / "counter X, recomputed Y" when the values differ.
void Compare(const std::string& what, uint64_t counter, uint64_t recomputed,
             std::vector<AuditFinding>* findings);

// Compare() for every field, named "<prefix> <field>".
void CompareAll(const std::string& prefix, const TierCounters& counter,
                const TierCounters& recomputed, std::vector<AuditFinding>* findings);

}  // namespace prefixkv::audit
