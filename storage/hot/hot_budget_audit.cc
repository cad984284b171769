// BudgetState::Audit: recomputes what can be recomputed from the entries and
// reports every disagreement. State counters (entries, bytes, pinned_bytes,
// external_bytes: from the entries and each owner's external charges), each
// entry's charge, child counts and order membership are recomputed;
// event counters (hits, evictions, ...) are checked for total == sum of owners.
#include <string>

#include "counter_audit.h"
#include "hot_budget_state.h"

namespace prefixkv::hot_internal {
namespace {

using ChildCounts = ChildCountMap;

template <typename Entries>
ChildCounts RecountChildren(const Entries& entries) {
  ChildCounts counts;
  for (const auto& [key, e] : entries) {
    if (!e.meta.parent.IsZero() && e.meta.parent != key) ++counts[e.meta.parent];
  }
  return counts;
}

uint32_t CountOf(const ChildCounts& counts, const BlockKey& key) {
  auto it = counts.find(key);
  return it == counts.end() ? 0 : it->second;
}

}  // namespace

void BudgetState::AuditOwner(OwnerId id, const ChildCountMap& children,
                             TierCounters* recomputed, size_t* linked_count,
                             std::vector<AuditFinding>* findings) const {
  const OwnerState& owner = Owner(id);
  const std::string prefix = "owner " + std::to_string(id) + " (" + owner.name + ")";
  for (const auto& [key, e] : entries_) {
    if (e.facts.owner != id) continue;
    // Names are built only for findings: Audit runs after every operation of
    // the model-based stress test.
    auto block = [&, k = key](const char* what) {  // clang 14: no binding capture
      return prefix + " block " + k.ToHex() + " " + what;
    };
    if (e.meta.key != key || e.meta.owner != id || e.facts.owner != id) {
      findings->push_back(
          {block("identity"), "key or owner disagrees with its map slot"});
    }
    const uint64_t charge = HotEntryCharge(e.payload.size());
    if (e.facts.charge_bytes != charge) {
      audit::Compare(block("charge"), e.facts.charge_bytes, charge, findings);
    }
    const uint32_t child_count = CountOf(children, key);
    if (e.facts.resident_children != child_count) {
      audit::Compare(block("resident_children"), e.facts.resident_children, child_count,
                     findings);
    }
    const bool linked = e.global_hook.is_linked();
    const bool in_owner_order = linked && owner.quota_bytes.has_value();
    if (e.in_flight || linked != Linkable(e) ||
        in_owner_order != e.owner_hook.is_linked()) {
      findings->push_back({block("eviction order"), linked
                                                        ? "linked but must not be"
                                                        : "a candidate but not linked"});
    }
    if (linked && e.rank != policy_->Rank(e.facts)) {
      findings->push_back({block("rank"), "stale policy rank"});
    }
    ++recomputed->entries;
    recomputed->bytes += e.facts.charge_bytes;
    if (e.facts.pins > 0) recomputed->pinned_bytes += e.facts.charge_bytes;
    *linked_count += linked ? 1 : 0;
  }
  // External charges are not blocks: their content is the owner's charge.
  recomputed->bytes += owner.charged_bytes;
  recomputed->external_bytes = owner.charged_bytes;
  audit::Compare(prefix + " owner order size", owner.order.size(),
                 owner.quota_bytes ? *linked_count : 0, findings);
}

void BudgetState::Audit(std::vector<AuditFinding>* findings) const {
  MutexLock lock(&mu_);
  TierCounters sum;
  sum.misses = unattributed_misses_;  // budget-wide lookups of nobody's block
  size_t linked_total = 0;
  const ChildCounts children = RecountChildren(entries_);
  if (children != child_counts_) {
    findings->push_back(
        {"child counts", std::to_string(child_counts_.size()) + " parents counted, " +
                             std::to_string(children.size()) + " recomputed"});
  }
  for (const auto& [key, e] : entries_) {
    if (e.facts.owner >= owners_.size()) {
      findings->push_back(
          {"block " + key.ToHex() + " owner",
           "owner " + std::to_string(e.facts.owner) + " is not registered"});
    }
  }
  for (OwnerId id = 0; id < owners_.size(); ++id) {
    const TierCounters& c = Owner(id).counters;
    TierCounters recomputed;
    size_t linked = 0;
    AuditOwner(id, children, &recomputed, &linked, findings);
    const std::string prefix = "owner " + std::to_string(id);
    audit::Compare(prefix + " entries", c.entries, recomputed.entries, findings);
    audit::Compare(prefix + " bytes", c.bytes, recomputed.bytes, findings);
    audit::Compare(prefix + " pinned_bytes", c.pinned_bytes, recomputed.pinned_bytes,
                   findings);
    audit::Compare(prefix + " external_bytes", c.external_bytes,
                   recomputed.external_bytes, findings);
    audit::Sum(&sum, c);
    linked_total += linked;
  }
  audit::CompareAll("budget total vs sum of owners:", total_, sum, findings);
  audit::Compare("global eviction order size", order_.size(), linked_total, findings);
  if (total_.bytes > capacity_bytes_) {
    findings->push_back({"budget bytes", std::to_string(total_.bytes) +
                                             " exceed capacity " +
                                             std::to_string(capacity_bytes_)});
  }
}

}  // namespace prefixkv::hot_internal
