// SSD wear and admission flags (see wear_flags.h): parsed into EngineOptions,
// which checks their combination again when the engine opens.
#include "tools/cli/wear_flags.h"

#include <cmath>
#include <cstdlib>

namespace prefixkv::cli {

std::vector<FlagSpec> WearFlagSpecs() {
  return {
      {"ssd-admission",
       "which blocks the hot tier evicts are written to SSD: all, or budget (prefix "
       "blocks without a child beyond --ssd-write-budget are skipped and counted; raw "
       "values always written; docs/eviction.md)",
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
  return " [--ssd-admission all|budget] [--ssd-write-budget B] [--ssd-endurance-bytes B "
         "| --ssd-drive-writes-per-day N [--ssd-drive-capacity-bytes B]]";
}

std::string ApplyWearFlags(const Flags& flags, EngineOptions* options) {
  StatusOr<SsdAdmissionKind> kind =
      ParseSsdAdmission(flags.GetString("ssd-admission", "all"));
  if (!kind.ok()) return "--ssd-admission must be all or budget";
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
      return "--ssd-drive-writes-per-day must be a number in (0, 1000000]";
    if (flags.Has("ssd-endurance-bytes"))
      return "give --ssd-endurance-bytes or --ssd-drive-writes-per-day, not both";
    options->ssd_drive_writes_per_day = dwpd;
  }
  return "";
}

}  // namespace prefixkv::cli
