// SSD wear and admission flags (see wear_flags.h): parsed into EngineOptions,
// which checks their combination again when the engine opens.
#include "tools/cli/wear_flags.h"

#include <cmath>
#include <cstdlib>

#include "prefixkv/advanced/capacity_advisor.h"

namespace prefixkv::cli {

std::vector<FlagSpec> WearFlagSpecs() {
  return {
      {"ssd-admission",
       "which blocks the hot tier evicts are written to SSD: all, budget (prefix "
       "blocks without a child beyond --ssd-write-budget are skipped and counted), or "
       "ghost (such a block is skipped at its first eviction and written when it is "
       "evicted again; best with --policy leaf-lru or chain). Raw values are always "
       "written; docs/eviction.md",
       false, "all"},
      {"ssd-write-budget",
       "with --ssd-admission budget: bytes of evicted blocks SSD may take per day "
       "(K/M/G/T suffixes)",
       false, ""},
      {"ssd-endurance-bytes",
       "the drive's rated endurance in bytes written (TBW x 10^12; K/M/G/T), for INFO "
       "wear's projected lifetime",
       false, ""},
      {"ssd-drive-writes-per-day",
       "or its rating in drive writes per day (over 5 years), of "
       "--ssd-drive-capacity-bytes (default: --ssd-capacity-bytes)",
       false, ""},
      {"ssd-drive-capacity-bytes", "the drive's capacity, for --ssd-drive-writes-per-day",
       false, ""}};
}

std::string WearUsage() {
  return " [--ssd-admission all|budget|ghost] [--ssd-write-budget B] "
         "[--ssd-endurance-bytes B "
         "| --ssd-drive-writes-per-day N [--ssd-drive-capacity-bytes B]]";
}

std::string ApplyWearFlags(const Flags& flags, EngineOptions* options) {
  StatusOr<SsdAdmissionKind> kind =
      ParseSsdAdmission(flags.GetString("ssd-admission", "all"));
  if (!kind.ok()) return NotInRange(flags, "ssd-admission", "all, budget or ghost");
  options->ssd_admission = *kind;
  std::string error;
  auto size = [&](const char* name) -> uint64_t {
    return flags.Has(name) ? flags.GetSize(name, &error).value_or(0) : 0;
  };
  options->ssd_write_budget_bytes_per_day = size("ssd-write-budget");
  options->ssd_endurance_bytes = size("ssd-endurance-bytes");
  options->ssd_drive_capacity_bytes = size("ssd-drive-capacity-bytes");
  if (!error.empty()) return error;
  if (*kind == SsdAdmissionKind::kBudget && options->ssd_write_budget_bytes_per_day == 0)
    return "--ssd-admission budget needs --ssd-write-budget > 0";
  if (*kind != SsdAdmissionKind::kBudget && flags.Has("ssd-write-budget"))
    return "--ssd-write-budget needs --ssd-admission budget";
  if (flags.Has("ssd-drive-writes-per-day")) {
    const std::string text = flags.GetString("ssd-drive-writes-per-day");
    char* end = nullptr;
    const double dwpd = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || !std::isfinite(dwpd) || dwpd <= 0 || dwpd > 1e6)
      return NotInRange(flags, "ssd-drive-writes-per-day", "a number in (0, 1000000]");
    if (flags.Has("ssd-endurance-bytes"))
      return "give --ssd-endurance-bytes or --ssd-drive-writes-per-day, not both";
    options->ssd_drive_writes_per_day = dwpd;
  } else if (flags.Has("ssd-drive-capacity-bytes")) {
    // Alone it was taken and did nothing (the lifetime needs a rating).
    return "--ssd-drive-capacity-bytes needs --ssd-drive-writes-per-day";
  }
  return "";
}

std::vector<FlagSpec> AdvisorFlagSpecs() {
  return {{"advisor-max-keys",
           "the capacity advisor: sampled blocks it remembers at most, about 100 bytes "
           "each (0: off; at most 16777216; docs/eviction.md)",
           false, "32768"},
          {"advisor-half-life",
           "the capacity advisor's decay: seconds after which the traffic seen so far "
           "counts half (0: cumulative)",
           false, "3600"}};
}

std::string ApplyAdvisorFlags(const Flags& flags, EngineOptions* options) {
  std::string error;
  if (flags.Has("advisor-max-keys")) {
    std::optional<uint64_t> keys = flags.GetCount("advisor-max-keys", &error);
    if (!keys || *keys > kMaxAdvisorKeys)
      return NotInRange(flags, "advisor-max-keys", "0..16777216");
    options->advisor_max_keys = static_cast<uint32_t>(*keys);
  }
  if (flags.Has("advisor-half-life")) {
    std::optional<uint64_t> s = flags.GetCount("advisor-half-life", &error);
    if (!s || *s > (uint64_t{1} << 32))
      return NotInRange(flags, "advisor-half-life", "0..4294967296 seconds");
    options->advisor_half_life_seconds = *s;
  }
  return "";
}

}  // namespace prefixkv::cli
