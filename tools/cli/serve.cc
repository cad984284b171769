// `prefixkv serve`: the RESP server (docs/protocol.md) over a hot RAM tier
// with write-back to an SSD tier in --data-dir, until SIGINT or SIGTERM.
//
// Shutdown order is what makes every acknowledged write durable: stop the
// server (no command runs any more), evict every hot block through the SSD
// tier's write-back path (dirty blocks are written, clean ones already are),
// then close the SSD tier (flushes its queue and memtables).
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <memory>

#include "prefixkv/advanced/hot_tier.h"
#include "prefixkv/advanced/shared_hot_budget.h"
#include "prefixkv/advanced/ssd_tier.h"
#include "prefixkv/server.h"
#include "tools/cli/command.h"
#include "tools/cli/flags.h"

namespace prefixkv::cli {
namespace {

Flags ServeFlags() {
  return Flags(
      "prefixkv serve [--data-dir D] [--port P] [--bind ADDR] [--threads N] "
      "[--requirepass S] [--hot-capacity-bytes B] [--ssd-capacity-bytes B] "
      "[--max-request-bytes B] [--durability M] [--write-through]",
      {{"data-dir", "directory of the SSD tier (created if missing)", false,
        "./prefixkv-data"},
       {"port", "TCP port; 0 picks a free one (printed)", false, "6380"},
       {"bind", "address to listen on (loopback: the protocol is unencrypted)", false,
        "127.0.0.1"},
       {"threads", "I/O threads", false, "2"},
       {"requirepass", "password clients must AUTH with", false, ""},
       {"hot-capacity-bytes", "RAM tier budget (K/M/G suffixes)", false, "1G"},
       {"ssd-capacity-bytes", "SSD tier capacity (K/M/G/T suffixes)", false, "64G"},
       {"max-request-bytes", "largest accepted command (and value)", false, "512M"},
       {"max-clients", "connections beyond this are refused", false, "10000"},
       {"idle-timeout-ms", "close clients silent this long; 0 = never", false, "0"},
       {"durability", "SSD durability: flush, wal or sync", false, "wal"},
       {"write-through",
        "store every SET/PKV.PUT on SSD before +OK (survives kill -9 with wal/sync); "
        "default: write-back, RAM first",
        true, ""}});
}

struct ServeConfig {
  ServerOptions server;
  SsdTierOptions ssd;
  uint64_t hot_capacity_bytes = 0;
};

// Fills `config` from the flags; returns an error message or "".
std::string ParseServeConfig(const Flags& flags, ServeConfig* config) {
  std::string error;
  auto size = [&](const char* name, const char* def) -> uint64_t {
    if (!flags.Has(name)) return *ParseSize(def);
    std::optional<uint64_t> v = flags.GetSize(name, &error);
    return v.value_or(0);
  };
  uint64_t port = size("port", "6380");
  uint64_t threads = size("threads", "2");
  config->hot_capacity_bytes = size("hot-capacity-bytes", "1G");
  config->ssd.capacity_bytes = size("ssd-capacity-bytes", "64G");
  config->server.max_request_bytes = size("max-request-bytes", "512M");
  config->server.max_connections = size("max-clients", "10000");
  config->server.idle_timeout_ms = size("idle-timeout-ms", "0");
  if (!error.empty()) return error;
  if (port > 65535) return "--port must be in [0, 65535]";
  if (threads < 1 || threads > 256) return "--threads must be in [1, 256]";
  if (config->hot_capacity_bytes == 0) return "--hot-capacity-bytes must be > 0";
  if (config->server.max_request_bytes == 0) return "--max-request-bytes must be > 0";
  StatusOr<SsdDurability> durability =
      ParseSsdDurability(flags.GetString("durability", "wal"));
  if (!durability.ok()) return "--durability must be flush, wal or sync";
  config->ssd.durability = *durability;
  config->ssd.path = flags.GetString("data-dir", "./prefixkv-data");
  config->server.port = static_cast<uint16_t>(port);
  config->server.io_threads = static_cast<int>(threads);
  config->server.bind_address = flags.GetString("bind", "127.0.0.1");
  config->server.requirepass = flags.GetString("requirepass", "");
  config->server.write_through = flags.GetBool("write-through");
  return "";
}

// Blocks SIGINT and SIGTERM in this thread and every thread it starts later,
// so that WaitForStopSignal() is the only place they are delivered.
sigset_t BlockStopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

int WaitForStopSignal(const sigset_t& set) {
  int sig = 0;
  while (sigwait(&set, &sig) != 0) {
  }
  return sig;
}

// Evicts every hot block through the write-back listener, then closes SSD.
Status PersistAndClose(HotTier& hot, SsdTier& ssd) {
  // A quota of one byte evicts every unpinned block of the owner; the dirty
  // ones reach SsdTier::OnEvict, the clean ones are already stored.
  Status evicted = hot.budget().SetOwnerQuota(hot.owner(), 1);
  Status closed = ssd.Close();
  return evicted.ok() ? closed : evicted;
}

int RunServe(const std::vector<std::string>& args) {
  Flags flags = ServeFlags();
  std::string error;
  if (!flags.Parse(args, &error)) return UsageError(flags, error);
  if (flags.help_requested()) {
    std::printf("%s", flags.HelpText().c_str());
    return 0;
  }
  if (!flags.positional().empty()) return UsageError(flags, "unexpected argument");
  ServeConfig config;
  error = ParseServeConfig(flags, &config);
  if (!error.empty()) return UsageError(flags, error);

  sigset_t stop_signals = BlockStopSignals();
  StatusOr<std::unique_ptr<SsdTier>> ssd = SsdTier::Open(config.ssd);
  if (!ssd.ok()) {
    std::fprintf(stderr, "prefixkv serve: %s\n", ssd.status().ToString().c_str());
    return 1;
  }
  StatusOr<std::unique_ptr<HotTier>> hot = HotTier::Create(
      SharedHotBudgetOptions{.capacity_bytes = config.hot_capacity_bytes});
  if (!hot.ok()) {
    std::fprintf(stderr, "prefixkv serve: %s\n", hot.status().ToString().c_str());
    return 1;
  }
  (*hot)->SetEvictionListener(ssd->get());
  Server server(config.server, hot->get(), ssd->get());
  if (Status s = server.Start(); !s.ok()) {
    std::fprintf(stderr, "prefixkv serve: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("listening on %s:%u\n", config.server.bind_address.c_str(), server.port());
  std::fflush(stdout);

  int sig = WaitForStopSignal(stop_signals);
  std::fprintf(stderr, "prefixkv serve: %s, shutting down\n",
               sig == SIGINT ? "SIGINT" : "SIGTERM");
  server.Stop();
  Status s = PersistAndClose(**hot, **ssd);
  if (!s.ok()) {
    std::fprintf(stderr, "prefixkv serve: shutdown: %s\n", s.ToString().c_str());
    return 1;
  }
  std::fprintf(stderr, "prefixkv serve: stopped cleanly\n");
  return 0;
}

}  // namespace

PKV_REGISTER_COMMAND("serve",
                     "the RESP (Redis protocol) server over the hot and SSD tiers",
                     RunServe);

}  // namespace prefixkv::cli
