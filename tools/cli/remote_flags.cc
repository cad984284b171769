// The remote-tier flags (remote_flags.h) shared by serve, demo and replay:
// their specs, their usage text and how they fill EngineOptions. In one place
// so that the three commands spell and check them alike: a bad seed list, write
// mode, size or timeout, or a remote-tier flag without --remote, is a usage
// error naming the flag, never a silently ignored setting.
#include "tools/cli/remote_flags.h"

#include <cstdint>

#include "prefixkv/advanced/remote_store.h"

namespace prefixkv::cli {

std::vector<FlagSpec> RemoteFlagSpecs() {
  return {
      {"remote",
       "shared remote tier on a Redis Cluster, redis://host:port[,host:port...] (any "
       "reachable node; docs/remote.md); default: none",
       false, ""},
      {"remote-write",
       "what the remote tier receives: on_spill (blocks the lowest local tier evicts) "
       "or always (every stored block)",
       false, "on_spill"},
      {"remote-ttl", "seconds a remote block lives (0: no expiry)", false, "86400"},
      {"remote-max-bytes",
       "bytes each model may write to the cluster per TTL window (0: unlimited; needs "
       "a --remote-ttl above 0)",
       false, "0"},
      {"remote-timeout-ms",
       "bound of one request batch to one cluster node; a slower node is a miss", false,
       "5"},
  };
}

std::string RemoteUsage() {
  return "[--remote URI] [--remote-write M] [--remote-ttl S] [--remote-max-bytes B] "
         "[--remote-timeout-ms MS]";
}

std::string ApplyRemoteFlags(const Flags& flags, EngineOptions* options) {
  const bool any = flags.Has("remote-write") || flags.Has("remote-ttl") ||
                   flags.Has("remote-max-bytes") || flags.Has("remote-timeout-ms");
  if (!flags.Has("remote")) {
    return any ? "--remote-write, --remote-ttl, --remote-max-bytes and "
                 "--remote-timeout-ms need --remote"
               : "";
  }
  options->remote = flags.GetString("remote");
  if (StatusOr<std::vector<std::string>> seeds = ParseRedisSeeds(options->remote);
      !seeds.ok()) {
    return "--remote: " + seeds.status().message();
  }
  StatusOr<RemoteWriteMode> mode =
      ParseRemoteWriteMode(flags.GetString("remote-write", "on_spill"));
  if (!mode.ok()) return NotInRange(flags, "remote-write", "on_spill or always");
  options->remote_write = *mode;
  std::string error;
  auto size = [&](const char* name, uint64_t def) -> uint64_t {
    if (!flags.Has(name)) return def;
    return flags.GetSize(name, &error).value_or(0);
  };
  const uint64_t ttl = size("remote-ttl", 86400);
  const uint64_t max_bytes = size("remote-max-bytes", 0);
  const uint64_t timeout = size("remote-timeout-ms", 5);
  if (!error.empty()) return error;
  if (ttl > UINT32_MAX) return NotInRange(flags, "remote-ttl", "in [0, 4294967295]");
  // The quota's window is the TTL: with none its counter never expires, so
  // the limit bounded everything the namespace would ever write, and once
  // reached (cluster-wide, across restarts) it wrote nothing again.
  if (ttl == 0 && max_bytes != 0)
    return "--remote-max-bytes is per --remote-ttl window, and --remote-ttl 0 has none "
           "(the namespace would write nothing again once it reached the limit)";
  if (timeout < 1 || timeout > 60000)
    return NotInRange(flags, "remote-timeout-ms", "in [1, 60000]");
  options->remote_limits.ttl_seconds = static_cast<uint32_t>(ttl);
  options->remote_limits.max_bytes = max_bytes;
  options->remote_timeout_ms = static_cast<uint32_t>(timeout);
  return "";
}

}  // namespace prefixkv::cli
