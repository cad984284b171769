// SsdAdmission: the write budget's token bucket and the admission counters
// (see ssd_admission.h). Integer arithmetic throughout, so that a test on a
// FakeClock can state exactly which write fits.
#include "prefixkv/advanced/ssd_admission.h"

#include <algorithm>

namespace prefixkv {
namespace {

constexpr SsdAdmissionUnits kNanosPerDay = SsdAdmissionUnits{86400} * 1'000'000'000;

// A key's ghost hash, never 0 (an empty slot).
uint64_t GhostHash(const BlockKey& key) {
  return (key.lo ^ (key.hi * 0x9E3779B97F4A7C15ull)) | 1;
}

}  // namespace

StatusOr<std::unique_ptr<SsdAdmission>> SsdAdmission::Create(
    const SsdAdmissionOptions& options) {
  const bool budget = options.kind == SsdAdmissionKind::kBudget;
  if (budget && options.budget_bytes_per_day == 0)
    return Status::InvalidArgument(
        "ssd admission 'budget' needs a write budget > 0 bytes per day");
  if (!budget && options.budget_bytes_per_day != 0)
    return Status::InvalidArgument("an ssd write budget needs ssd admission 'budget'");
  if (options.burst_seconds == 0)
    return Status::InvalidArgument("ssd admission burst must be > 0 seconds");
  if (options.kind == SsdAdmissionKind::kGhost && options.ghost_keys == 0)
    return Status::InvalidArgument("ssd admission 'ghost' needs ghost_keys > 0");
  return std::unique_ptr<SsdAdmission>(new SsdAdmission(options));
}

SsdAdmission::SsdAdmission(const SsdAdmissionOptions& options)
    : options_(options),
      clock_(options.clock != nullptr ? options.clock : Clock::System()),
      capacity_units_(SsdAdmissionUnits{options.budget_bytes_per_day} *
                      options.burst_seconds * 1'000'000'000),
      units_(capacity_units_),
      refilled_at_nanos_(clock_->NowNanos()) {
  if (options.kind == SsdAdmissionKind::kGhost) {
    MutexLock lock(&mu_);
    ghost_.assign(options.ghost_keys, 0);
  }
}

void SsdAdmission::Refill() {
  const uint64_t now = clock_->NowNanos();
  if (now <= refilled_at_nanos_) return;
  const SsdAdmissionUnits add =
      SsdAdmissionUnits{now - refilled_at_nanos_} * options_.budget_bytes_per_day;
  units_ = std::min(capacity_units_, units_ + add);
  refilled_at_nanos_ = now;
}

bool SsdAdmission::Allows(uint64_t bytes) {
  if (options_.kind == SsdAdmissionKind::kAll) return true;
  MutexLock lock(&mu_);
  Refill();
  return units_ >= SsdAdmissionUnits{bytes} * kNanosPerDay;
}

bool SsdAdmission::Allows(const BlockKey& key, uint64_t bytes) {
  if (options_.kind != SsdAdmissionKind::kGhost) return Allows(bytes);
  const uint64_t h = GhostHash(key);
  MutexLock lock(&mu_);
  uint64_t& slot = ghost_[h % ghost_.size()];
  if (slot != h) return false;
  slot = 0;
  return true;
}

void SsdAdmission::RecordSkipped(const BlockKey& key, uint64_t bytes) {
  if (options_.kind == SsdAdmissionKind::kGhost) {
    const uint64_t h = GhostHash(key);
    MutexLock lock(&mu_);
    ghost_[h % ghost_.size()] = h;
  }
  RecordSkipped(bytes);
}

void SsdAdmission::RecordWritten(uint64_t bytes, bool forced) {
  MutexLock lock(&mu_);
  if (options_.kind == SsdAdmissionKind::kBudget) {
    Refill();
    units_ -= SsdAdmissionUnits{bytes} * kNanosPerDay;
  }
  counters_.written_blocks += 1;
  counters_.written_bytes += bytes;
  counters_.forced_blocks += forced ? 1 : 0;
}

void SsdAdmission::RecordSkipped(uint64_t bytes) {
  MutexLock lock(&mu_);
  counters_.skipped_blocks += 1;
  counters_.skipped_bytes += bytes;
}

SsdAdmissionCounters SsdAdmission::Counters() const {
  MutexLock lock(&mu_);
  return counters_;
}

}  // namespace prefixkv
