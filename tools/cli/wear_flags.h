// The SSD wear and admission flags shared by serve and replay (docs/ssd.md
// "Wear", docs/eviction.md "SSD admission"):
//   --ssd-admission all|budget          which evicted blocks reach SSD (all)
//   --ssd-write-budget B                bytes per day under budget (K/M/G/T)
//   --ssd-endurance-bytes B             the drive's rated TBW, in bytes
//   --ssd-drive-writes-per-day N        or its DWPD rating (with the drive's
//   --ssd-drive-capacity-bytes B        capacity; default the tier's)
// and the capacity advisor's (docs/eviction.md, "The capacity advisor"):
//   --advisor-max-keys N                sampled blocks remembered (0: off)
//   --advisor-half-life S               seconds after which traffic counts half
#pragma once

#include <string>
#include <vector>

#include "prefixkv/engine.h"
#include "tools/cli/flags.h"

namespace prefixkv::cli {

// The FlagSpecs above, to append to a subcommand's own.
std::vector<FlagSpec> WearFlagSpecs();
// " [--ssd-admission M] [--ssd-write-budget B] ..." for a usage line.
std::string WearUsage();
// Applies the flags to `options`; returns an error message or "".
std::string ApplyWearFlags(const Flags& flags, EngineOptions* options);

// The advisor's FlagSpecs, and applying them (an error message or "").
std::vector<FlagSpec> AdvisorFlagSpecs();
std::string ApplyAdvisorFlags(const Flags& flags, EngineOptions* options);

}  // namespace prefixkv::cli
