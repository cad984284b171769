// `prefixkv replay --nodes N --router prefix|round-robin|random`: the routed
// replay (tools/replay/routed_replay.h) behind the replay command's flags.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tools/cli/flags.h"
#include "tools/replay/trace_replay.h"

namespace prefixkv::cli {

// --router, --load-bound, --ssd-block-weight, --event-delay-requests,
// --in-flight-per-node, --seed: to append to the replay command's flags.
std::vector<FlagSpec> RouterFlagSpecs();

// Replays `trace` over `nodes` engines configured as `node` (SSD tiers under
// `ssd_dir`), routed as the flags say; prints the report, drawing
// `progress` (if any) over both replays. An exit code.
int RunRoutedReplayCommand(const Flags& flags, const replay::ReplayConfig& node,
                           size_t nodes, const std::vector<replay::TraceRequest>& trace,
                           const std::string& ssd_dir,
                           std::function<void(size_t, size_t)> progress = nullptr);

}  // namespace prefixkv::cli
