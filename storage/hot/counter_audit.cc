// Counter arithmetic and comparison shared by the hot tiers' Audit()
// (counter_audit.h): summing TierCounters and turning each counter that
// disagrees with its recomputed value into one AuditFinding, with both numbers
// in it. One helper, so every audit names a disagreement the same way and a
// test or an operator can read which counter drifted and by how much.
#include "counter_audit.h"

namespace prefixkv::audit {

void Sum(TierCounters* into, const TierCounters& c) {
  into->entries += c.entries;
  into->bytes += c.bytes;
  into->pinned_bytes += c.pinned_bytes;
  into->hits += c.hits;
  into->misses += c.misses;
  into->inserts += c.inserts;
  into->removes += c.removes;
  into->evictions += c.evictions;
  into->spills += c.spills;
  into->corruptions += c.corruptions;
  into->io_errors += c.io_errors;
  into->external_bytes += c.external_bytes;
}

void Compare(const std::string& what, uint64_t counter, uint64_t recomputed,
             std::vector<AuditFinding>* findings) {
  if (counter == recomputed) return;
  findings->push_back({what, "counter " + std::to_string(counter) + ", recomputed " +
                                 std::to_string(recomputed)});
}

void CompareAll(const std::string& prefix, const TierCounters& counter,
                const TierCounters& recomputed, std::vector<AuditFinding>* findings) {
  Compare(prefix + " entries", counter.entries, recomputed.entries, findings);
  Compare(prefix + " bytes", counter.bytes, recomputed.bytes, findings);
  Compare(prefix + " pinned_bytes", counter.pinned_bytes, recomputed.pinned_bytes,
          findings);
  Compare(prefix + " hits", counter.hits, recomputed.hits, findings);
  Compare(prefix + " misses", counter.misses, recomputed.misses, findings);
  Compare(prefix + " inserts", counter.inserts, recomputed.inserts, findings);
  Compare(prefix + " removes", counter.removes, recomputed.removes, findings);
  Compare(prefix + " evictions", counter.evictions, recomputed.evictions, findings);
  Compare(prefix + " spills", counter.spills, recomputed.spills, findings);
  Compare(prefix + " corruptions", counter.corruptions, recomputed.corruptions, findings);
  Compare(prefix + " io_errors", counter.io_errors, recomputed.io_errors, findings);
  Compare(prefix + " external_bytes", counter.external_bytes, recomputed.external_bytes,
          findings);
}

}  // namespace prefixkv::audit
