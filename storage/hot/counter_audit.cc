// Counter arithmetic and comparison shared by the hot tiers' Audit()
// (counter_audit.h): summing TierCounters and turning each counter that
// disagrees with its recomputed value into one AuditFinding, with both numbers
// in it. One helper, so every audit names a disagreement the same way and a
// test or an operator can read which counter drifted and by how much.
#include "counter_audit.h"

#include "prefixkv/tier_counter_fields.h"

namespace prefixkv::audit {

void Sum(TierCounters* into, const TierCounters& c) { AddTierCounters(into, c); }

void Compare(const std::string& what, uint64_t counter, uint64_t recomputed,
             std::vector<AuditFinding>* findings) {
  if (counter == recomputed) return;
  findings->push_back({what, "counter " + std::to_string(counter) + ", recomputed " +
                                 std::to_string(recomputed)});
}

void CompareAll(const std::string& prefix, const TierCounters& counter,
                const TierCounters& recomputed, std::vector<AuditFinding>* findings) {
  for (const TierCounterField& f : kTierCounterFields) {
    Compare(prefix + " " + f.name, counter.*f.field, recomputed.*f.field, findings);
  }
}

}  // namespace prefixkv::audit
