// `prefixkv bench remote`: the remote tier (docs/remote.md) on a Redis Cluster,
// a local 3-master one (tools/redis/local_redis_cluster.h) unless --remote
// names one.
//
// remote_restore_ratio_vs_redis_get: node A (an Engine, hot RAM only,
// remote_write always) stores a 32-block chain and flushes its write queue;
// node B (a second Engine, on_spill, warm connections, its hot tier full)
// times Match + Restore of that chain, every block fetched from the cluster
// (a new chain each round, so B never has it locally). Model: 8 KVCache layers, 4 KV
// heads x 128 dims, float16, 16-token blocks: 256 KiB of keys and values per block, 8 MiB
// per chain. The limit, measured in the same round on the same cluster: redis-benchmark
// GET of values of the block's payload size (3 clients, one per master as redis-benchmark
// --cluster spreads them, pipeline 11: ~32 values in flight like B's one batch), bytes/s
// = requests/s x value size. 32,000 GETs (8.4 GB, about 2.5 s): in cluster mode
// redis-benchmark ends its runs on a 250 ms timer tick (its figures are requests / k x
// 0.25 s), so a run of a few ticks would overstate its time by up to a tick. --quick runs
// 3,200, about one tick: its limit is understated (a ratio too high).
//
// CPU per chain (local cluster only): the CPU time this process (node B's
// Match + Restore; getrusage) and the masters (/proc/PID/task/*/schedstat)
// spend per restored chain, and that redis-benchmark (RUSAGE_CHILDREN) and
// the masters spend per chain's worth of GETs. From the masters' figures the
// CPU they spend idle (cron, cluster bus; measured for a second before the
// rounds) over the same time is taken off, so a window of 10 ms and one of
// 2.5 s are compared on the work done in them. Their minor page faults
// (/proc/PID/stat) are counted in the same windows: a fault is a fresh page
// of reply buffer, about a microsecond each. redis_cpu_ratio is the
// masters' CPU per restored chain over theirs per chain's worth of
// redis-benchmark GETs (goal <= 1.3). The values redis-benchmark GETs are as
// large as the restore's (the envelope and its payload). cpu_bound_ratio is the ratio
// the restore would reach if its CPU time were spread perfectly over every
// core of the machine: bytes x cores / (restore CPU) over the limit's rate.
// Below the goal, no amount of overlap reaches it here; only less work per
// byte would.
//
// two_node_hit_ratio vs one_node_hit_ratio: the Mooncake trace replayed
// (tools/replay, 512-token blocks, hot RAM only) over two nodes with 3M hot
// tokens each and the remote tier (always), request i on node i % 2; over one
// node with 6M; and over two nodes without the remote tier (what sharing buys).
#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "prefixkv/advanced/engine_internals.h"
#include "prefixkv/advanced/remote_store.h"
#include "prefixkv/advanced/remote_tier.h"
#include "prefixkv/engine.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/redis_benchmark.h"
#include "tools/bench/suite.h"
#include "tools/cli/flags.h"
#include "tools/cli/json.h"
#include "tools/redis/local_redis_cluster.h"
#include "tools/replay/trace_replay.h"

namespace prefixkv::cli {
namespace {

const BenchModel kModel{.name = "bench-remote-8l", .kv_heads = 4, .block_tokens = 16};
// redis-benchmark: one client per master (its pipeline: --redis-pipeline,
// default 11, ~32 values in flight in all like B's whole batch).
constexpr int kRedisClients = 3;
// Node B's hot tier holds about 4 chains, so after the warm-up rounds it is
// full, as on a serving node: every fetched chain replaces an older one, and
// its blocks land in the pages of evicted ones (SharedBytes' recycler).
constexpr uint64_t kNodeBHotBytes = 36ull << 20;
constexpr int kWarmupRounds = 5;

constexpr uint32_t kTraceBlockTokens = 512;
constexpr uint64_t kNodeHotTokens = 3000000;
constexpr size_t kQuickRequests = 2000;

void Progress(const std::string& line) {
  std::fprintf(stderr, "bench remote: %s\n", line.c_str());
}

// The cluster the bench runs against: started here unless --remote is given.
struct Cluster {
  std::string uri;
  std::string host;  // a master, for redis-benchmark --cluster
  int port = 0;
  std::unique_ptr<LocalRedisCluster> local;
};

StatusOr<Cluster> OpenCluster(const std::string& remote) {
  Cluster c;
  if (remote.empty()) {
    LocalRedisClusterOptions options;
    options.log = [](std::string_view line) { Progress(std::string(line)); };
    PKV_ASSIGN_OR_RETURN(c.local, LocalRedisCluster::Start(options));
    c.uri = c.local->uri();
  } else {
    c.uri = remote;
  }
  PKV_ASSIGN_OR_RETURN(std::vector<std::string> seeds, ParseRedisSeeds(c.uri));
  const std::string& first = seeds.front();
  c.host = first.substr(0, first.rfind(':'));
  c.port = std::atoi(first.substr(first.rfind(':') + 1).c_str());
  return c;
}

// Keys of this run start with it, so runs sharing a cluster never see each
// other's blocks.
std::string RunKeyPrefix(const std::string& what) {
  return "prefixkv:bench:" + what + ":" + std::to_string(::getpid()) + "-" +
         std::to_string(Clock::System()->NowNanos()) + ":";
}

// ---- CPU time

uint64_t RusageNanos(int who) {
  rusage u{};
  getrusage(who, &u);
  return uint64_t(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1'000'000'000ull +
         uint64_t(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1000ull;
}
// This process's CPU time (every thread, user + system), in ns.
uint64_t SelfCpuNanos() { return RusageNanos(RUSAGE_SELF); }
// CPU time of the children waited for (redis-benchmark), in ns.
uint64_t ChildrenCpuNanos() { return RusageNanos(RUSAGE_CHILDREN); }

// CPU time of every thread of `pid` (the first field of each
// /proc/PID/task/TID/schedstat: ns on a CPU); 0 when unreadable.
uint64_t ProcessCpuNanos(pid_t pid) {
  const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  DIR* dir = opendir(tasks.c_str());
  if (dir == nullptr) return 0;
  uint64_t total = 0;
  while (dirent* d = readdir(dir)) {
    if (d->d_name[0] == '.') continue;
    const std::string path = tasks + "/" + d->d_name + "/schedstat";
    if (FILE* f = std::fopen(path.c_str(), "r")) {
      unsigned long long ns = 0;
      if (std::fscanf(f, "%llu", &ns) == 1) total += ns;
      std::fclose(f);
    }
  }
  closedir(dir);
  return total;
}

// Minor page faults of `pid` so far (field 10 of /proc/PID/stat); 0 when
// unreadable.
uint64_t ProcessMinorFaults(pid_t pid) {
  FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
  if (f == nullptr) return 0;
  char line[1024];
  const size_t n = std::fread(line, 1, sizeof(line) - 1, f);
  std::fclose(f);
  line[n] = '\0';
  // After "pid (comm) ": state, ppid, pgrp, session, tty, tpgid, flags, minflt.
  const char* after_comm = std::strrchr(line, ')');
  unsigned long long minflt = 0;
  if (after_comm == nullptr ||
      std::sscanf(after_comm + 1, " %*c %*d %*d %*d %*d %*d %*u %llu", &minflt) != 1) {
    return 0;
  }
  return minflt;
}

// What the masters have used so far: CPU time (ns) and minor page faults.
struct ClusterUsage {
  uint64_t cpu_ns = 0, faults = 0;
  ClusterUsage operator-(const ClusterUsage& o) const {
    return {cpu_ns - o.cpu_ns, faults - o.faults};
  }
};

// The masters' usage, or zeros for a cluster this bench did not start.
ClusterUsage MastersUsage(const LocalRedisCluster* local) {
  ClusterUsage u;
  if (local == nullptr) return u;
  for (size_t i = 0; i < local->ports().size(); ++i) {
    const pid_t pid = local->pid(static_cast<int>(i));
    u.cpu_ns += ProcessCpuNanos(pid);
    u.faults += ProcessMinorFaults(pid);
  }
  return u;
}

// The masters' CPU time per second while nobody talks to them (serverCron,
// the cluster bus), measured over `millis`.
double MastersIdleNanosPerSecond(const LocalRedisCluster* local, int millis) {
  if (local == nullptr) return 0;
  const uint64_t start = Clock::System()->NowNanos();
  const ClusterUsage before = MastersUsage(local);
  usleep(static_cast<useconds_t>(millis) * 1000);
  const ClusterUsage used = MastersUsage(local) - before;
  const double seconds = double(Clock::System()->NowNanos() - start) * 1e-9;
  return double(used.cpu_ns) / seconds;
}

// `used` without what the masters spend idle over `seconds` (never below 0).
double BusyNanos(const ClusterUsage& used, double idle_ns_per_s, double seconds) {
  return std::max(0.0, double(used.cpu_ns) - idle_ns_per_s * seconds);
}

// ---- remote restore vs redis-benchmark GET

struct RestoreFigures {
  Range restore_mb_s, redis_get_mb_s, ratio;
  Range match_ms, restore_ms;  // the timed operation's two steps
  // CPU ms per chain (sums over the timed rounds, divided by chains): node B
  // and the masters while restoring; redis-benchmark and the masters while
  // GETting a chain's worth of bytes. Only for a local cluster (cpu_measured).
  bool cpu_measured = false;
  double restore_cpu_ms = 0, restore_redis_cpu_ms = 0;
  double limit_cpu_ms = 0, limit_redis_cpu_ms = 0;
  double redis_cpu_ratio = 0;  // restore_redis_cpu_ms / limit_redis_cpu_ms
  double restore_redis_faults = 0, limit_redis_faults = 0;  // per chain
  double redis_idle_ms_per_s = 0;  // the masters' idle CPU, taken off the above
  int redis_pipeline = 0;
  double cpu_bound_ratio = 0;
  long cores = 0;
  uint64_t block_bytes = 0;  // payload (encoded record) bytes per block
  uint64_t value_bytes = 0;  // the value GET returns: envelope and payload
  bool identical = false;
  // Node B at the end: its hot tier's evictions (it was full) and the victims
  // it did not write back to the cluster (they came from it).
  uint64_t b_hot_evictions = 0, b_remote_writes = 0, b_rewrites_skipped = 0;
};

EngineOptions RemoteNode(const std::string& uri, RemoteWriteMode mode) {
  EngineOptions o;
  o.hot_capacity_bytes = uint64_t{1} << 30;
  o.remote = uri;
  o.remote_write = mode;
  // This measures throughput, not the bound: on a loaded 2-core machine a
  // master can stay silent past the default 5 ms (a miss, and nothing to
  // time), so the bench allows a second.
  o.remote_timeout_ms = 1000;
  return o;
}

// One node: an engine with the bench model registered.
struct Node {
  std::unique_ptr<Engine> engine;
  Namespace ns;
};

// The nodes' blocks live under `key_prefix` in the cluster.
StatusOr<Node> OpenNode(const EngineOptions& options, const std::string& key_prefix) {
  Node n;
  EngineHooks hooks;
  hooks.configure_remote = [key_prefix](RemoteTierOptions& r) {
    r.key_prefix = key_prefix;
  };
  PKV_ASSIGN_OR_RETURN(n.engine, OpenEngine(options, std::move(hooks)));
  const NamespaceSpec spec = kModel.Spec();
  PKV_ASSIGN_OR_RETURN(n.ns, n.engine->RegisterModel(spec));
  return n;
}

// A stores a fresh chain and waits until every block is in the cluster.
Status StoreRemotely(Node& a, std::mt19937_64& rng, const std::vector<LayerState>& layers,
                     std::vector<int32_t>* tokens) {
  tokens->resize(kModel.chain_tokens());
  for (int32_t& t : *tokens) t = static_cast<int32_t>(rng() % 128000);
  PKV_ASSIGN_OR_RETURN(StoreResult stored, a.engine->Store(a.ns, *tokens, layers));
  if (stored.blocks_written != static_cast<size_t>(kModel.blocks))
    return Status::Internal("node A stored " + std::to_string(stored.blocks_written) +
                            " blocks, not " + std::to_string(kModel.blocks));
  EngineRemoteTier(*a.engine)->Flush();
  const RemoteCounters c = EngineRemoteTier(*a.engine)->Counters();
  if (c.dropped > 0 || c.write_failures > 0 || c.errors > 0)
    return Status::Unavailable("node A's remote writes failed (" +
                               std::to_string(c.dropped) + " dropped, " +
                               std::to_string(c.write_failures) + " failed, " +
                               std::to_string(c.errors) + " errors)");
  return Status::OK();
}

// Seconds of B's Match (which fetches the blocks from the cluster) and of
// its Restore; every block must come remotely.
struct RestoreSeconds {
  double match = 0, restore = 0;
  double total() const { return match + restore; }
};

StatusOr<RestoreSeconds> RestoreRemotely(Node& b, const std::vector<int32_t>& tokens,
                                         RestoreResult* out) {
  const uint64_t start = Clock::System()->NowNanos();
  PKV_ASSIGN_OR_RETURN(MatchResult m, b.engine->Match(b.ns, tokens));
  const uint64_t matched = Clock::System()->NowNanos();
  PKV_ASSIGN_OR_RETURN(*out, b.engine->Restore(m));
  const uint64_t end = Clock::System()->NowNanos();
  if (out->restored_tokens != static_cast<uint64_t>(kModel.chain_tokens()) ||
      out->blocks_from_remote != static_cast<size_t>(kModel.blocks)) {
    return Status::Unavailable("node B restored " + std::to_string(out->restored_tokens) +
                               " tokens, " + std::to_string(out->blocks_from_remote) +
                               " blocks from remote (" + out->reason + ")");
  }
  return RestoreSeconds{static_cast<double>(matched - start) * 1e-9,
                        static_cast<double>(end - matched) * 1e-9};
}

StatusOr<RestoreFigures> MeasureRestore(const Cluster& cluster, int repeats, bool quick,
                                        int redis_pipeline) {
  const LocalRedisCluster* local = cluster.local.get();
  uint64_t restore_self_ns = 0, limit_child_ns = 0;
  double restore_redis_ns = 0, limit_redis_ns = 0;
  uint64_t restore_faults = 0, limit_faults = 0;
  double limit_chains = 0;
  const std::string prefix = RunKeyPrefix("restore");
  PKV_ASSIGN_OR_RETURN(
      Node a, OpenNode(RemoteNode(cluster.uri, RemoteWriteMode::kAlways), prefix));
  EngineOptions b_options = RemoteNode(cluster.uri, RemoteWriteMode::kOnSpill);
  b_options.hot_capacity_bytes = kNodeBHotBytes;
  PKV_ASSIGN_OR_RETURN(Node b, OpenNode(b_options, prefix));
  std::mt19937_64 rng(13);
  const std::vector<LayerState> layers = kModel.RandomChain(rng);
  std::vector<double> restore_mb_s, redis_mb_s, ratio, match_ms, restore_ms;
  RestoreFigures f;
  f.redis_pipeline = redis_pipeline;
  const double idle_ns_per_s = MastersIdleNanosPerSecond(local, 1000);
  f.redis_idle_ms_per_s = idle_ns_per_s / 1e6;
  // The warm-up rounds fill B's hot tier and warm its connections; the first
  // checks the bytes. They are not counted.
  for (int round = 1 - kWarmupRounds; round <= repeats; ++round) {
    std::vector<int32_t> tokens;
    PKV_RETURN_IF_ERROR(StoreRemotely(a, rng, layers, &tokens));
    const uint64_t read_before = EngineRemoteTier(*b.engine)->Counters().bytes_read;
    RestoreResult restored;
    const uint64_t self0 = SelfCpuNanos();
    const ClusterUsage redis0 = MastersUsage(local);
    PKV_ASSIGN_OR_RETURN(RestoreSeconds seconds, RestoreRemotely(b, tokens, &restored));
    const uint64_t self1 = SelfCpuNanos();
    const ClusterUsage restore_used = MastersUsage(local) - redis0;
    const uint64_t bytes =
        EngineRemoteTier(*b.engine)->Counters().bytes_read - read_before;
    if (round == 1 - kWarmupRounds) {
      f.identical = restored.layers == layers;
      f.block_bytes = bytes / kModel.blocks;
      f.value_bytes =
          RemoteTier::EncodeEnvelope(BlockMeta{}, std::string(f.block_bytes, '\0'))
              .size();
    }
    if (round <= 0) continue;
    restore_self_ns += self1 - self0;
    restore_redis_ns += BusyNanos(restore_used, idle_ns_per_s, seconds.total());
    restore_faults += restore_used.faults;
    // The first run also SETs the values the later ones GET (its CPU is not
    // counted).
    const uint64_t child0 = ChildrenCpuNanos(), limit_start = Clock::System()->NowNanos();
    const ClusterUsage limit_redis0 = MastersUsage(local);
    const RedisBenchmarkOps ops =
        RunRedisBenchmark({.host = cluster.host,
                           .port = cluster.port,
                           .cluster = true,
                           .tests = round == 1 ? "set,get" : "get",
                           .value_bytes = static_cast<int>(f.value_bytes),
                           .clients = kRedisClients,
                           .pipeline = redis_pipeline,
                           .requests = kModel.blocks * (quick ? 100 : 1000),
                           .keyspace = kModel.blocks});
    if (ops.get_ops <= 0) return Status::Unavailable("redis-benchmark GET failed");
    if (round > 1) {
      const ClusterUsage limit_used = MastersUsage(local) - limit_redis0;
      const double limit_seconds =
          double(Clock::System()->NowNanos() - limit_start) * 1e-9;
      limit_child_ns += ChildrenCpuNanos() - child0;
      limit_redis_ns += BusyNanos(limit_used, idle_ns_per_s, limit_seconds);
      limit_faults += limit_used.faults;
      limit_chains += quick ? 100 : 1000;  // chains' worth of GETs in the run
    }
    restore_mb_s.push_back(static_cast<double>(bytes) / seconds.total() / 1e6);
    match_ms.push_back(seconds.match * 1e3);
    restore_ms.push_back(seconds.restore * 1e3);
    redis_mb_s.push_back(ops.get_ops * static_cast<double>(f.value_bytes) / 1e6);
    ratio.push_back(restore_mb_s.back() / redis_mb_s.back());
    Progress("round " + std::to_string(round) + "/" + std::to_string(repeats) +
             ": restore " + std::to_string(restore_mb_s.back()) + " MB/s, redis GET " +
             std::to_string(redis_mb_s.back()) + " MB/s");
  }
  f.restore_mb_s = Summarize(restore_mb_s);
  f.redis_get_mb_s = Summarize(redis_mb_s);
  f.ratio = Summarize(ratio);
  f.match_ms = Summarize(match_ms);
  f.restore_ms = Summarize(restore_ms);
  f.cores = sysconf(_SC_NPROCESSORS_ONLN);
  f.cpu_measured = local != nullptr;
  f.restore_cpu_ms = double(restore_self_ns) / 1e6 / repeats;
  f.restore_redis_cpu_ms = restore_redis_ns / 1e6 / repeats;
  f.restore_redis_faults = double(restore_faults) / repeats;
  if (limit_chains > 0) {
    f.limit_cpu_ms = double(limit_child_ns) / 1e6 / limit_chains;
    f.limit_redis_cpu_ms = limit_redis_ns / 1e6 / limit_chains;
    f.limit_redis_faults = double(limit_faults) / limit_chains;
  }
  if (f.limit_redis_cpu_ms > 0)
    f.redis_cpu_ratio = f.restore_redis_cpu_ms / f.limit_redis_cpu_ms;
  const double chain_cpu_s = (f.restore_cpu_ms + f.restore_redis_cpu_ms) / 1e3;
  if (f.cpu_measured && chain_cpu_s > 0 && f.redis_get_mb_s.median > 0) {
    const double chain_mb = double(f.block_bytes) * kModel.blocks / 1e6;
    f.cpu_bound_ratio =
        chain_mb * double(f.cores) / chain_cpu_s / f.redis_get_mb_s.median;
  }
  EngineRemoteTier(*b.engine)->Flush();
  const EngineStats b_stats = b.engine->Stats();
  f.b_hot_evictions = b_stats.hot.evictions;
  f.b_remote_writes = b_stats.remote.writes;
  f.b_rewrites_skipped = b_stats.remote.rewrites_skipped;
  return f;
}

// ---- hit ratios of the trace over one and two nodes

struct HitRatios {
  double one_node = 0, two_node = 0, two_node_no_remote = 0;
  uint64_t requests = 0;
  uint64_t remote_block_hits = 0;  // of the two-node run with the remote tier
};

StatusOr<replay::ReplayReport> ReplayNodes(const std::vector<replay::TraceRequest>& trace,
                                           int nodes, uint64_t hot_tokens_each,
                                           const std::string& remote) {
  replay::ReplayConfig config{.block_tokens = kTraceBlockTokens};
  config.hot.tokens = hot_tokens_each;
  config.remote = remote;
  config.remote_write = RemoteWriteMode::kAlways;
  config.remote_key_prefix = RunKeyPrefix("replay");
  std::vector<std::unique_ptr<replay::ReplayTiers>> opened;
  std::vector<replay::ReplayTiers*> tiers;
  for (int i = 0; i < nodes; ++i) {
    PKV_ASSIGN_OR_RETURN(opened.emplace_back(), replay::ReplayTiers::Open(config));
    tiers.push_back(opened.back().get());
  }
  const std::string label =
      std::to_string(nodes) + " node(s)" + (remote.empty() ? "" : " + remote");
  replay::TraceReplayer replayer(tiers, kTraceBlockTokens);
  PKV_RETURN_IF_ERROR(replayer.ReplayAll(trace, [&](size_t done, size_t total) {
    if (done % 1000 == 0) {
      Progress("replay " + label + ": " + std::to_string(done) + "/" +
               std::to_string(total) + " requests");
    }
  }));
  return replayer.Report();
}

StatusOr<HitRatios> MeasureHitRatios(const Cluster& cluster, const std::string& path,
                                     bool quick) {
  PKV_ASSIGN_OR_RETURN(std::vector<replay::TraceRequest> trace, replay::ReadTrace(path));
  if (quick && trace.size() > kQuickRequests) trace.resize(kQuickRequests);
  HitRatios h;
  h.requests = trace.size();
  PKV_ASSIGN_OR_RETURN(replay::ReplayReport one,
                       ReplayNodes(trace, 1, 2 * kNodeHotTokens, ""));
  PKV_ASSIGN_OR_RETURN(replay::ReplayReport two,
                       ReplayNodes(trace, 2, kNodeHotTokens, cluster.uri));
  PKV_ASSIGN_OR_RETURN(replay::ReplayReport alone,
                       ReplayNodes(trace, 2, kNodeHotTokens, ""));
  h.one_node = one.token_hit_ratio();
  h.two_node = two.token_hit_ratio();
  h.two_node_no_remote = alone.token_hit_ratio();
  for (const replay::ReplayTierReport& t : two.tiers) {
    if (t.name == "remote") h.remote_block_hits = t.block_hits;
  }
  return h;
}

// ---- output

void RangeFields(JsonWriter& j, const std::string& key, const Range& r) {
  j.Field(key, r.median).Field(key + "_min", r.min).Field(key + "_max", r.max);
}

void PrintJson(const std::string& cluster, int repeats, const RestoreFigures& f,
               const HitRatios& h) {
  SuiteJson out("remote");
  JsonWriter& j = out.j();
  j.Field("cluster", cluster).Field("repeats", repeats);
  j.Field("blocks", kModel.blocks)
      .Field("block_tokens", kModel.block_tokens)
      .Field("block_bytes", f.block_bytes)
      .Field("value_bytes", f.value_bytes);
  RangeFields(j, "remote_restore_ratio_vs_redis_get", f.ratio);
  RangeFields(j, "remote_restore_mb_per_s", f.restore_mb_s);
  RangeFields(j, "redis_get_mb_per_s", f.redis_get_mb_s);
  RangeFields(j, "remote_match_ms", f.match_ms);
  RangeFields(j, "remote_restore_step_ms", f.restore_ms);
  if (f.cpu_measured) {
    j.Field("cores", int64_t{f.cores})
        .Field("restore_cpu_ms_per_chain", f.restore_cpu_ms)
        .Field("restore_redis_cpu_ms_per_chain", f.restore_redis_cpu_ms)
        .Field("limit_cpu_ms_per_chain", f.limit_cpu_ms)
        .Field("limit_redis_cpu_ms_per_chain", f.limit_redis_cpu_ms)
        .Field("redis_cpu_ratio", f.redis_cpu_ratio)
        .Field("restore_redis_faults_per_chain", f.restore_redis_faults)
        .Field("limit_redis_faults_per_chain", f.limit_redis_faults)
        .Field("redis_idle_cpu_ms_per_s", f.redis_idle_ms_per_s)
        .Field("redis_pipeline", int64_t{f.redis_pipeline})
        .Field("cpu_bound_ratio", f.cpu_bound_ratio);
  }
  j.Field("node_b_hot_evictions", f.b_hot_evictions)
      .Field("node_b_remote_writes", f.b_remote_writes)
      .Field("node_b_rewrites_skipped", f.b_rewrites_skipped);
  j.Field("byte_identical", f.identical)
      .Field("trace_requests", h.requests)
      .Field("one_node_hit_ratio", h.one_node)
      .Field("two_node_hit_ratio", h.two_node)
      .Field("two_node_no_remote_hit_ratio", h.two_node_no_remote)
      .Field("two_node_minus_one_node", h.two_node - h.one_node)
      .Field("two_node_remote_block_hits", h.remote_block_hits);
  out.Print();
}

void PrintRange(const char* key, const Range& r, const char* unit, const char* note) {
  std::printf("  %-36s %9.2f %-4s [%.2f .. %.2f]  %s\n", key, r.median, unit, r.min,
              r.max, note);
}

void PrintTable(const std::string& cluster, int repeats, const RestoreFigures& f,
                const HitRatios& h) {
  std::printf("remote benchmark on %s\n", cluster.c_str());
  std::printf(
      "restore of a %d-block chain from the remote tier (%d tokens/block, %d layers, "
      "%llu bytes/block), median [min .. max] of %d rounds%s\n",
      kModel.blocks, kModel.block_tokens, kModel.layers,
      static_cast<unsigned long long>(f.value_bytes), repeats,
      f.identical ? "" : " (NOT byte-identical)");
  PrintRange("remote_restore_ratio_vs_redis_get", f.ratio, "x", "goal >= 0.8");
  PrintRange("remote_restore_mb_per_s", f.restore_mb_s, "MB/s", "node B Match+Restore");
  PrintRange("redis_get_mb_per_s", f.redis_get_mb_s, "MB/s", "redis-benchmark GET");
  PrintRange("remote_match_ms", f.match_ms, "ms", "of which Match (remote fetch)");
  PrintRange("remote_restore_step_ms", f.restore_ms, "ms", "and Restore (local)");
  if (f.cpu_measured) {
    std::printf(
        "  CPU per chain: restore %.2f ms (node B) + %.2f ms (masters); limit %.2f ms "
        "(redis-benchmark) + %.2f ms (masters)\n",
        f.restore_cpu_ms, f.restore_redis_cpu_ms, f.limit_cpu_ms, f.limit_redis_cpu_ms);
    std::printf(
        "  %-36s %9.2f x     masters' CPU per chain, restore / redis-benchmark "
        "-P %d (goal <= 1.3)\n",
        "redis_cpu_ratio", f.redis_cpu_ratio, f.redis_pipeline);
    std::printf(
        "  masters' page faults per chain: restore %.0f, redis-benchmark %.0f; their "
        "idle "
        "CPU, taken off both: %.2f ms/s\n",
        f.restore_redis_faults, f.limit_redis_faults, f.redis_idle_ms_per_s);
    std::printf("  %-36s %9.2f x     the restore's CPU spread over all %ld cores\n",
                "cpu_bound_ratio", f.cpu_bound_ratio, f.cores);
  }
  std::printf(
      "  node B's full hot tier evicted %llu blocks; %llu written back to the cluster, "
      "%llu skipped (the cluster holds them)\n",
      static_cast<unsigned long long>(f.b_hot_evictions),
      static_cast<unsigned long long>(f.b_remote_writes),
      static_cast<unsigned long long>(f.b_rewrites_skipped));
  std::printf(
      "token hit ratios of the trace (%llu requests, %u-token blocks, hot RAM only)\n",
      static_cast<unsigned long long>(h.requests), kTraceBlockTokens);
  std::printf("  %-36s %9.4f       6M hot tokens\n", "one_node_hit_ratio", h.one_node);
  std::printf("  %-36s %9.4f       3M each + remote (%llu remote block hits)\n",
              "two_node_hit_ratio", h.two_node,
              static_cast<unsigned long long>(h.remote_block_hits));
  std::printf("  %-36s %9.4f       3M each, nothing shared\n",
              "two_node_no_remote_hit_ratio", h.two_node_no_remote);
  std::printf("  %-36s %+9.4f       goal >= -0.01\n", "two_node_minus_one_node",
              h.two_node - h.one_node);
}

int RunRemoteBench(const std::vector<std::string>& args) {
  const std::string trace_default = "tests/data/mooncake_synthetic_trace.jsonl";
  Flags flags(
      "prefixkv bench remote [--json] [--repeats N] [--remote URI] [--quick] [--trace "
      "F] [--redis-pipeline N]\n\n"
      "Node B restores a 32-block chain (256 KiB blocks) that node A stored in the\n"
      "remote tier, timed against redis-benchmark GET of as many bytes on the same\n"
      "cluster (remote_restore_ratio_vs_redis_get, goal >= 0.8); then the trace is\n"
      "replayed over one node (6M hot tokens), two nodes with 3M each sharing the\n"
      "remote tier, and two nodes without it (token hit ratios). Needs redis-server,\n"
      "redis-cli and redis-benchmark (Debian: redis-server, redis-tools).",
      {{"json", "print one JSON object", true, ""},
       {"repeats", "rounds of the restore figures (median, min and max)", false, "5"},
       {"remote",
        "redis://host:port[,...] of a Redis Cluster to use (default: start a local "
        "3-master cluster with redis-server and stop it at the end)",
        false, ""},
       {"quick", "a short run: the trace's first 2000 requests, fewer redis GETs", true,
        ""},
       {"trace", "Mooncake-format trace for the hit ratios", false, trace_default},
       {"redis-pipeline",
        "redis-benchmark's -P, per client (one client per master) for the limit", false,
        "11"}});
  if (std::optional<int> done = ParseSuiteFlags(flags, args)) return *done;
  std::optional<uint64_t> repeats = ParseCount(flags, "repeats", "5", 1000);
  if (!repeats) return UsageError(flags, NotInRange(flags, "repeats", "1..1000"));
  std::optional<uint64_t> pipeline = ParseCount(flags, "redis-pipeline", "11", 1000);
  if (!pipeline) return UsageError(flags, NotInRange(flags, "redis-pipeline", "1..1000"));
  if (std::system("command -v redis-benchmark >/dev/null") != 0) {
    return Failure(flags, "bench remote",
                   "needs redis-benchmark (Debian package redis-tools)");
  }
  StatusOr<Cluster> cluster = OpenCluster(flags.GetString("remote"));
  if (!cluster.ok()) return Failure(flags, "bench remote", cluster.status().ToString());
  const bool quick = flags.GetBool("quick");
  const int rounds = static_cast<int>(*repeats);
  StatusOr<RestoreFigures> restore =
      MeasureRestore(*cluster, rounds, quick, static_cast<int>(*pipeline));
  StatusOr<HitRatios> hits =
      restore.ok()
          ? MeasureHitRatios(*cluster, flags.GetString("trace", trace_default), quick)
          : restore.status();
  if (cluster->local != nullptr) cluster->local->Stop();
  if (!hits.ok()) return Failure(flags, "bench remote", hits.status().ToString());
  const std::string where =
      cluster->local ? "a local 3-master Redis Cluster" : cluster->uri;
  if (flags.GetBool("json")) {
    PrintJson(where, rounds, *restore, *hits);
  } else {
    PrintTable(where, rounds, *restore, *hits);
  }
  return restore->identical ? 0 : 1;
}

}  // namespace

PKV_REGISTER_BENCH("remote",
                   "remote-tier restore vs redis-benchmark GET; 2-node hit ratio",
                   RunRemoteBench);

}  // namespace prefixkv::cli
