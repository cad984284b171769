// One replay under a policy named on the command line: a hot-tier policy
// ("lru", "leaf-lru", "chain") over a real Engine, or Belady's offline "min"
// (min_replay.h), which is replay-only. Shared by `prefixkv replay` and
// `prefixkv bench policy`.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "trace_reader.h"
#include "trace_replay.h"

namespace prefixkv::replay {

// The policy names ReplayWithPolicy accepts, in the order benches print them.
std::vector<std::string> ReplayPolicyNames();

// Replays `requests` from the start with `config` under `policy` (which
// overrides config.policy). "min" needs no SSD tier (InvalidArgument
// otherwise); its hot capacity counts blocks as the real tier does.
StatusOr<ReplayReport> ReplayWithPolicy(const std::vector<TraceRequest>& requests,
                                        ReplayConfig config, std::string_view policy);

}  // namespace prefixkv::replay
