// Engine::Stats and Engine::Audit: the engine-wide view of every tier's
// counters (hot budget per owner, SSD tier, remote tier, dirty blocks, restore
// latency) and the audit that recomputes them. Stats only takes each tier's own
// snapshot, so it is cheap and safe to call at any time; Audit flushes first,
// then lets each tier recompute and compare its own counters, and prefixes
// every finding with its tier so one report covers the whole engine.
#include <algorithm>

#include "engine_impl.h"

namespace prefixkv {
namespace {

// A tier's capacity in blocks: its bytes over the models' mean charge per
// block (0 while the models have no block there).
uint64_t CapacityBlocks(uint64_t capacity_bytes, uint64_t bytes, uint64_t entries) {
  if (entries == 0 || bytes == 0) return 0;
  return capacity_bytes / std::max<uint64_t>(bytes / entries, 1);
}

// The advisor's estimates at the tiers' capacities in `s`, in blocks of the
// models' mean charge.
AdvisorReport AdvisorOf(const internal::EngineImpl& impl, const EngineStats& s) {
  uint64_t hot_bytes = 0, hot_entries = 0, ssd_bytes = 0, ssd_entries = 0;
  {
    MutexLock lock(&impl.mu_);
    for (const auto& m : impl.models_) {
      if (m->tiers.owner >= s.owners.size()) continue;
      const EngineOwnerStats& o = s.owners[m->tiers.owner];
      hot_bytes += o.hot.bytes;
      hot_entries += o.hot.entries;
      ssd_bytes += o.ssd.bytes;
      ssd_entries += o.ssd.entries;
    }
  }
  impl.advisor_->SetCapacities(
      s.hot_capacity_bytes, CapacityBlocks(s.hot_capacity_bytes, hot_bytes, hot_entries),
      s.has_ssd ? s.ssd_capacity_bytes : 0,
      s.has_ssd ? CapacityBlocks(s.ssd_capacity_bytes, ssd_bytes, ssd_entries) : 0);
  return impl.advisor_->Report();
}

}  // namespace

EngineStats Engine::Stats() const {
  EngineStats s;
  const internal::EngineImpl& impl = *impl_;
  s.events = EventLogStats();
  if (impl.CheckOpen().ok() && impl.budget_ != nullptr) {
    const SharedHotBudget& budget = *impl.budget_;
    s.hot_capacity_bytes = budget.capacity_bytes();
    // One moment of the budget: the owners add up to the totals.
    std::vector<TierCounters> owners;
    s.hot = budget.Totals(&owners);
    for (OwnerId o = 0; o < owners.size(); ++o) {
      EngineOwnerStats owner;
      owner.name = budget.OwnerName(o).value();
      owner.hot = owners[o];
      owner.hot_quota_bytes = budget.OwnerQuota(o).value();
      s.owners.push_back(std::move(owner));
    }
  }
  if (impl.CheckOpen().ok() && impl.ssd_ != nullptr) {
    s.has_ssd = true;
    s.ssd_capacity_bytes = impl.options_.ssd_capacity_bytes;
    // One moment of the SSD tier: its owners never add up to more than the
    // totals (blocks leaving between the reads of an owner and of the totals).
    std::vector<TierCounters> owners;
    s.ssd = impl.ssd_->Totals(s.owners.size(), &owners);
    for (OwnerId o = 0; o < s.owners.size(); ++o) s.owners[o].ssd = owners[o];
    const SsdWriteBackState wb = impl.ssd_->WriteBackState();
    s.ssd_queued_blocks = wb.queued_blocks;
    s.ssd_write_back_failed_blocks = wb.failed_blocks;
    s.ssd_write_back_failures = wb.failed_attempts;
    const SsdReadAheadStats ahead = impl.ssd_->ReadAheadStats();
    s.ssd_read_ahead_reads = ahead.started;
    s.ssd_read_ahead_served = ahead.served;
    s.ssd_read_ahead_stale = ahead.stale;
    s.ssd_read_ahead_unused = ahead.unused;
    s.ssd_read_ahead_bytes = ahead.bytes_read;
    s.ssd_bytes_written = impl.ssd_->SpaceUsage().bytes_written;
    s.ssd_write_bytes_per_day =
        impl.wear_->Observe(impl.clock_->NowNanos(), s.ssd_bytes_written);
    s.ssd_endurance_bytes = impl.endurance_bytes_;
    s.ssd_projected_lifetime_days =
        internal::ProjectedLifetimeDays(s.ssd_endurance_bytes, s.ssd_write_bytes_per_day);
    s.ssd_admission = impl.admission_->kind();
    s.ssd_write_budget_bytes_per_day = impl.admission_->options().budget_bytes_per_day;
    s.ssd_admission_counters = impl.admission_->Counters();
  }
  if (impl.CheckOpen().ok() && impl.remote_ != nullptr) {
    s.has_remote = true;
    s.remote_describe = impl.remote_->Describe();
    s.remote = impl.remote_->Counters();
  }
  if (impl.CheckOpen().ok()) {
    MutexLock lock(&impl.mu_);
    for (const auto& m : impl.models_) {
      if (m->tiers.owner < s.owners.size()) {
        s.owners[m->tiers.owner].restore_latency = m->restore_latency.Snapshot();
        PrefixTokenCounters tokens = m->prefix_tokens.Snapshot();
        // Counted by the prefix cache, where stores and restores refuse them.
        if (StatusOr<PrefixTokenCounters> refused = impl.cache_->ShapeRefusals(m->ns);
            refused.ok()) {
          tokens.shape_refused_stores = refused->shape_refused_stores;
          tokens.shape_refused_tokens = refused->shape_refused_tokens;
        }
        s.owners[m->tiers.owner].prefix_tokens = tokens;
      }
    }
    s.dirty_blocks = impl.stack_->dirty_blocks();
  }
  if (impl.memory_ != nullptr) {
    for (const MemoryRegion& r : impl.memory_->Regions()) {
      s.memory_mapped_bytes += r.bytes;
      ++s.memory_regions;
    }
  }
  if (impl.CheckOpen().ok() && impl.advisor_ != nullptr) s.advisor = AdvisorOf(impl, s);
  return s;
}

AdvisorReport Engine::AdvisorStats() const { return Stats().advisor; }

StatusOr<EngineAudit> Engine::Audit() {
  PKV_RETURN_IF_ERROR(Flush());
  EngineAudit audit;
  auto collect = [&audit](std::string_view tier, std::vector<AuditFinding>& found) {
    for (AuditFinding& f : found) {
      audit.findings.push_back({std::string(tier) + " " + f.what, std::move(f.detail)});
    }
  };
  if (impl_->budget_ != nullptr) {
    std::vector<AuditFinding> found;
    PKV_RETURN_IF_ERROR(impl_->budget_->Audit(&found));
    collect("hot", found);
  }
  if (impl_->ssd_ != nullptr) {
    std::vector<AuditFinding> found;
    PKV_RETURN_IF_ERROR(impl_->ssd_->Audit(&found));
    collect("ssd", found);
    audit.orphans = impl_->ssd_->FindOrphans();
  }
  return audit;
}

}  // namespace prefixkv
