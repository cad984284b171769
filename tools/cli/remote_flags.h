// The remote-tier flags shared by serve, demo and replay (docs/remote.md):
//   --remote redis://host:port[,host:port...]   the Redis Cluster (default: none)
//   --remote-write on_spill|always              what reaches it (default on_spill)
//   --remote-ttl S, --remote-max-bytes B        per-namespace limits
//   --remote-timeout-ms MS                      bound of one batch to one node
#pragma once

#include <string>
#include <vector>

#include "prefixkv/engine.h"
#include "tools/cli/flags.h"

namespace prefixkv::cli {

// The FlagSpecs above, to append to a subcommand's own.
std::vector<FlagSpec> RemoteFlagSpecs();
// " [--remote URI] [--remote-write M] ..." for a usage line.
std::string RemoteUsage();
// Applies the flags to `options`; returns an error message or "".
std::string ApplyRemoteFlags(const Flags& flags, EngineOptions* options);

}  // namespace prefixkv::cli
