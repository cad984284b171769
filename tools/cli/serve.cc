// `prefixkv serve`: the RESP server (docs/protocol.md) over an Engine opened
// on --data-dir (a hot RAM tier with write-back to the SSD tier), until SIGINT
// or SIGTERM.
//
// Shutdown order is what makes every acknowledged write durable: stop the
// server (no command runs any more), then close the engine, which writes
// every dirty hot block to the SSD tier and closes it (its write-back queue
// drained, its metadata flushed).
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "prefixkv/engine.h"
#include "prefixkv/server.h"
#include "tools/cli/command.h"
#include "tools/cli/flags.h"
#include "tools/cli/remote_flags.h"
#include "tools/cli/stop_signals.h"
#include "tools/cli/wear_flags.h"

namespace prefixkv::cli {
namespace {

Flags ServeFlags() {
  std::vector<FlagSpec> specs = {
      {"data-dir", "directory of the SSD tier (created if missing)", false,
       "./prefixkv-data"},
      {"port", "TCP port; 0 picks a free one (printed)", false, "6380"},
      {"bind", "address to listen on (loopback: the protocol is unencrypted)", false,
       "127.0.0.1"},
      {"threads", "I/O threads", false, "2"},
      {"requirepass-file",
       "file holding the password clients must AUTH with (one line); or set "
       "PREFIXKV_REQUIREPASS; default: no password",
       false, ""},
      {"requirepass",
       "the password itself (visible in ps: prefer --requirepass-file or the "
       "environment variable)",
       false, ""},
      {"admin-pass-file",
       "file holding the admin password (AUTH admin <pass>) that admin commands "
       "(PKV.AUDIT) need; or set PREFIXKV_ADMIN_PASS; default: admin commands off",
       false, ""},
      {"admin-pass", "the admin password itself (visible in ps)", false, ""},
      {"hot-capacity-bytes", "RAM tier budget (K/M/G suffixes)", false, "1G"},
      {"ssd-capacity-bytes", "SSD tier capacity (K/M/G/T suffixes)", false, "64G"},
      {"max-request-bytes", "largest accepted command (and value)", false, "512M"},
      {"max-clients", "connections beyond this are refused", false, "10000"},
      {"auth-failures-per-second",
       "failed AUTH allowed per second across all connections (bursts of 10); past it "
       "AUTH is refused without checking the password, counted (INFO stats "
       "auth_throttled) and logged; 0 = no server-wide limit; at most 1000000",
       false, "10"},
      {"idle-timeout-ms", "close clients silent this long; 0 = never", false, "0"},
      {"durability", "SSD durability: flush, wal or sync", false, "wal"},
      {"write-through",
       "store every SET/PKV.PUT on SSD before replying (survives kill -9 with "
       "wal/sync); default: write-back, RAM first",
       true, ""},
      {"policy", "hot eviction order: lru, leaf-lru or chain (docs/eviction.md)", false,
       "lru"},
      {"ssd-policy",
       "SSD eviction order among chain leaves: leaf-lru (lru is the same) or chain",
       false, "leaf-lru"},
      {"max-models", "models PKV.REGISTER may register", false, "256"},
      {"event-retention-bytes",
       "the KV event log (XREAD prefixkv:events, docs/events.md) keeps at most about "
       "this much (K/M/G suffixes; at least 8K)",
       false, "64M"},
      {"event-retention-ms", "and the events of at least this long", false, "86400000"},
      {"no-event-log", "keep no KV event log (the stream commands answer an error)", true,
       ""},
      {"metrics-port",
       "also serve Prometheus metrics over HTTP on this port (GET /metrics, on the "
       "--bind address; 0 picks a free one, printed; docs/metrics.md); default: off",
       false, ""}};
  for (FlagSpec& f : RemoteFlagSpecs()) specs.push_back(std::move(f));
  for (FlagSpec& f : WearFlagSpecs()) specs.push_back(std::move(f));
  for (FlagSpec& f : AdvisorFlagSpecs()) specs.push_back(std::move(f));
  return Flags(
      "prefixkv serve [--data-dir D] [--port P] [--bind ADDR] [--threads N] "
      "[--requirepass-file F | --requirepass S] [--admin-pass-file F | --admin-pass S] "
      "[--hot-capacity-bytes B] [--ssd-capacity-bytes B] [--max-request-bytes B] "
      "[--max-clients N] [--auth-failures-per-second N] [--idle-timeout-ms MS] "
      "[--durability M] [--write-through] "
      "[--policy P] [--ssd-policy P] [--max-models N] [--event-retention-bytes B] "
      "[--event-retention-ms MS] [--no-event-log] [--metrics-port P] "
      "[--advisor-max-keys N] [--advisor-half-life S] " +
          RemoteUsage() + WearUsage(),
      std::move(specs));
}

struct ServeConfig {
  ServerOptions server;
  EngineOptions engine;
};

// Why an empty password given for --NAME is refused rather than taken.
std::string EmptySecretMeans(const std::string& name) {
  return name == "requirepass"
             ? "it would serve every client without AUTH (leave it out for no password)"
             : "it would leave admin commands off (leave it out for that)";
}

// A password from --NAME-file (its first line), --NAME or the environment
// variable `env`, in that order of preference; "" when none is given. Returns
// an error message or "".
std::string ReadSecret(const Flags& flags, const std::string& name, const char* env,
                       std::string* secret) {
  const std::string file_flag = name + "-file";
  if (flags.Has(file_flag) && flags.Has(name)) {
    return "give only one of --" + file_flag + " and --" + name;
  }
  if (flags.Has(file_flag)) {
    const std::string path = flags.GetString(file_flag);
    std::FILE* f = std::fopen(path.c_str(), "r");
    if (f == nullptr) return "--" + file_flag + ": cannot read " + path;
    std::string text;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
    std::fclose(f);
    text = text.substr(0, text.find('\n'));
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.empty()) return "--" + file_flag + ": " + path + " holds no password";
    *secret = text;
  } else if (flags.Has(name)) {
    *secret = flags.GetString(name);
    // `--requirepass "$PASS"` with PASS unset served every client without
    // AUTH, as if no password had been asked for; an empty file is refused.
    if (secret->empty()) return "--" + name + " is empty: " + EmptySecretMeans(name);
    std::fprintf(stderr,
                 "prefixkv serve: warning: --%s is visible to every user in ps; use "
                 "--%s or %s\n",
                 name.c_str(), file_flag.c_str(), env);
  } else if (const char* value = std::getenv(env)) {
    *secret = value;
    if (secret->empty()) {
      return std::string(env) + " is set but empty: " + EmptySecretMeans(name);
    }
  }
  return "";
}

// The error for a --data-dir that names something other than a directory (a
// regular file, or a path through one), "" otherwise (a missing directory is
// created by the open). audit, repair and inspect refuse such a path as a
// usage error (exit 2); serve's open failed on it as an I/O error (exit 1).
std::string DataDirNotADirectory(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) {
    return S_ISDIR(st.st_mode) ? "" : "--data-dir " + dir + " is not a directory";
  }
  if (errno == ENOTDIR) {
    return "--data-dir " + dir + ": a part of the path is not a directory";
  }
  return "";
}

// Fills `config` from the flags; returns an error message or "".
std::string ParseServeConfig(const Flags& flags, ServeConfig* config) {
  std::string error;
  auto size = [&](const char* name, const char* def) -> uint64_t {
    if (!flags.Has(name)) return *ParseSize(def);
    std::optional<uint64_t> v = flags.GetSize(name, &error);
    return v.value_or(0);
  };
  // Ports, counts and times take digits only ("20K" is no port).
  auto count = [&](const char* name, uint64_t def) -> uint64_t {
    if (!flags.Has(name)) return def;
    std::optional<uint64_t> v = flags.GetCount(name, &error);
    return v.value_or(0);
  };
  uint64_t port = count("port", 6380);
  uint64_t threads = count("threads", 2);
  config->engine.hot_capacity_bytes = size("hot-capacity-bytes", "1G");
  config->engine.ssd_capacity_bytes = size("ssd-capacity-bytes", "64G");
  config->server.max_models = count("max-models", 256);
  config->server.max_request_bytes = size("max-request-bytes", "512M");
  config->server.max_connections = count("max-clients", 10000);
  config->server.idle_timeout_ms = count("idle-timeout-ms", 0);
  config->server.auth_failures_per_second = count("auth-failures-per-second", 10);
  uint64_t metrics_port = count("metrics-port", 0);
  config->engine.event_retention_bytes = size("event-retention-bytes", "64M");
  config->engine.event_retention_ms = count("event-retention-ms", 86'400'000);
  config->engine.event_log = !flags.GetBool("no-event-log");
  if (!error.empty()) return error;
  if (config->engine.event_retention_bytes < 8192)
    return NotInRange(flags, "event-retention-bytes", "at least 8K");
  if (config->engine.event_retention_ms == 0)
    return NotInRange(flags, "event-retention-ms", "> 0");
  if (config->server.max_connections == 0) {
    return NotInRange(flags, "max-clients", "> 0 (0 would refuse every client)");
  }
  if (port > 65535) return NotInRange(flags, "port", "in [0, 65535]");
  if (config->server.auth_failures_per_second > 1'000'000) {
    return NotInRange(flags, "auth-failures-per-second", "in [0, 1000000]");
  }
  if (metrics_port > 65535) return NotInRange(flags, "metrics-port", "in [0, 65535]");
  if (flags.Has("metrics-port")) {
    config->server.metrics_port = static_cast<uint16_t>(metrics_port);
  }
  if (threads < 1 || threads > 256) return NotInRange(flags, "threads", "in [1, 256]");
  if (config->engine.hot_capacity_bytes == 0)
    return NotInRange(flags, "hot-capacity-bytes", "> 0");
  // The engine refused it only after the flags passed: 'ssd tier: zero
  // capacity', exit 1 for a bad value.
  if (config->engine.ssd_capacity_bytes == 0)
    return NotInRange(flags, "ssd-capacity-bytes", "> 0");
  if (config->server.max_models == 0) return NotInRange(flags, "max-models", "> 0");
  if (config->server.max_request_bytes == 0)
    return NotInRange(flags, "max-request-bytes", "> 0");
  StatusOr<SsdDurability> durability =
      ParseSsdDurability(flags.GetString("durability", "wal"));
  if (!durability.ok()) return NotInRange(flags, "durability", "flush, wal or sync");
  config->engine.durability = *durability;
  StatusOr<EvictionPolicyKind> policy =
      ParseEvictionPolicy(flags.GetString("policy", "lru"));
  if (!policy.ok()) return NotInRange(flags, "policy", "lru, leaf-lru or chain");
  config->engine.hot_policy = *policy;
  StatusOr<EvictionPolicyKind> ssd_policy =
      ParseEvictionPolicy(flags.GetString("ssd-policy", "leaf-lru"));
  if (!ssd_policy.ok()) return NotInRange(flags, "ssd-policy", "lru, leaf-lru or chain");
  config->engine.ssd_policy = *ssd_policy;
  config->engine.data_dir = flags.GetString("data-dir", "./prefixkv-data");
  // An engine without a data_dir is RAM only: `--data-dir "$DIR"` with DIR
  // unset would serve, acknowledge every SET and lose them all at shutdown.
  if (config->engine.data_dir.empty()) {
    return "--data-dir must name a directory (the SSD tier, where every value is "
           "kept across a restart)";
  }
  if (std::string e = DataDirNotADirectory(config->engine.data_dir); !e.empty()) return e;
  config->engine.write_through = flags.GetBool("write-through");
  if (std::string e = ApplyRemoteFlags(flags, &config->engine); !e.empty()) return e;
  if (std::string e = ApplyWearFlags(flags, &config->engine); !e.empty()) return e;
  if (std::string e = ApplyAdvisorFlags(flags, &config->engine); !e.empty()) return e;
  config->server.port = static_cast<uint16_t>(port);
  config->server.io_threads = static_cast<int>(threads);
  if (std::string e = BindAddressError(flags, /*ipv6=*/true); !e.empty()) return e;
  config->server.bind_address = flags.GetString("bind", "127.0.0.1");
  if (std::string e = ReadSecret(flags, "requirepass", "PREFIXKV_REQUIREPASS",
                                 &config->server.requirepass);
      !e.empty()) {
    return e;
  }
  return ReadSecret(flags, "admin-pass", "PREFIXKV_ADMIN_PASS",
                    &config->server.admin_pass);
}

// Raises the soft open file limit (often 1024) toward the hard one, as Redis
// does for maxclients: every client holds a descriptor and the engine needs
// its own (segments, tables). The server accepts only the clients that fit
// in what is left (Server::Start says so); a failure leaves the limit as is.
void RaiseOpenFileLimit(size_t max_clients) {
  constexpr rlim_t kEngineFds = 4096;  // a large SSD tier's segments, tables, logs
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  const rlim_t wanted = static_cast<rlim_t>(max_clients) + kEngineFds;
  if (limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur >= wanted) return;
  limit.rlim_cur =
      limit.rlim_max == RLIM_INFINITY ? wanted : std::min(wanted, limit.rlim_max);
  setrlimit(RLIMIT_NOFILE, &limit);
}

int RunServe(const std::vector<std::string>& args) {
  Flags flags = ServeFlags();
  std::string error;
  if (!flags.Parse(args, &error)) return UsageError(flags, error);
  if (flags.help_requested()) {
    std::printf("%s", flags.HelpText().c_str());
    return 0;
  }
  ServeConfig config;
  error = ParseServeConfig(flags, &config);
  if (!error.empty()) return UsageError(flags, error);

  IgnoreBrokenPipes();
  IgnoreHangups();
  RaiseOpenFileLimit(config.server.max_connections);
  sigset_t stop_signals = BlockStopSignals();
  StatusOr<std::unique_ptr<Engine>> engine = Engine::Open(config.engine);
  if (!engine.ok()) return Failure(flags, "serve", engine.status().ToString());
  Server server(config.server, engine->get());
  if (Status s = server.Start(); !s.ok()) return Failure(flags, "serve", s.ToString());
  std::printf("listening on %s:%u\n", config.server.bind_address.c_str(), server.port());
  if (config.server.metrics_port) {
    std::printf("metrics on http://%s:%u/metrics\n", config.server.bind_address.c_str(),
                server.metrics_port());
  }
  if (const EngineStats st = (*engine)->Stats(); st.has_remote) {
    std::printf("%s (%s)\n", st.remote_describe.c_str(),
                st.remote.available ? "available" : "unavailable: its blocks are misses");
  }
  std::fflush(stdout);

  int sig = WaitForStopSignal(stop_signals);
  std::fprintf(stderr, "prefixkv serve: %s, shutting down\n",
               sig == SIGINT ? "SIGINT" : "SIGTERM");
  server.Stop();
  Status s = (*engine)->Close();
  if (!s.ok()) return Failure(flags, "serve", "shutdown: " + s.ToString());
  std::fprintf(stderr, "prefixkv serve: stopped cleanly\n");
  return kExitOk;
}

}  // namespace

PKV_REGISTER_COMMAND("serve",
                     "the RESP (Redis protocol) server over an engine: hot and SSD tiers",
                     RunServe);

}  // namespace prefixkv::cli
