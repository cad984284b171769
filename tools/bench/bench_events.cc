// `prefixkv bench events`: the cost of the KV event log (docs/events.md).
// Store and restore throughput of an engine with the event log on and off,
// alternating in the same run, on small blocks (where a per-event cost shows
// most): 2 KVCache layers of 2 KV heads x 64 dims, float16, 16-token blocks
// (16 KiB each), 64 chains of 64 blocks stored into two fresh engines side
// by side (data directories in $TMPDIR, write-back, a hot tier that holds
// everything), chain by chain alternating which goes first, then each chain
// matched and restored from the hot tier the same way. Ratios are per round
// (median, min, max), of the calling thread's CPU time. Also the log's bytes
// per event and the events appended per CPU second of store.
#include <time.h>

#include <filesystem>
#include <random>

#include "prefixkv/engine.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/suite.h"
#include "tools/cli/flags.h"
#include "tools/cli/json.h"

namespace prefixkv::cli {
namespace {

const BenchModel kModel{.name = "bench-events",
                        .layers = 2,
                        .kv_heads = 2,
                        .head_dim = 64,
                        .block_tokens = 16,
                        .blocks = 64};
constexpr int kChains = 64;

struct Chain {
  std::vector<int32_t> tokens;
  std::vector<LayerState> layers;
};

// One engine of a round: the log on or off, in its own data directory.
struct Side {
  std::string dir;
  std::unique_ptr<Engine> engine;
  Namespace ns;
  double store_s = 0, restore_s = 0;
};

StatusOr<Side> OpenSide(bool events) {
  Side side;
  side.dir = (std::filesystem::temp_directory_path() /
              (events ? "prefixkv-bench-events-on" : "prefixkv-bench-events-off"))
                 .string();
  std::filesystem::remove_all(side.dir);
  EngineOptions o;
  o.data_dir = side.dir;
  o.hot_capacity_bytes = uint64_t{256} << 20;
  o.event_log = events;
  o.log = [](std::string_view) {};
  PKV_ASSIGN_OR_RETURN(side.engine, Engine::Open(o));
  PKV_ASSIGN_OR_RETURN(side.ns, side.engine->RegisterModel(kModel.Spec()));
  return side;
}

// The calling thread's CPU time: a store or restore of the hot tier runs
// entirely on it, and other processes' load on a shared machine moves it far
// less than the wall time.
uint64_t ThreadCpuNanos() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000 +
         static_cast<uint64_t>(ts.tv_nsec);
}

double Seconds(uint64_t start) {
  return static_cast<double>(ThreadCpuNanos() - start) * 1e-9;
}

Status StoreChain(Side& side, const Chain& c) {
  const uint64_t start = ThreadCpuNanos();
  PKV_RETURN_IF_ERROR(side.engine->Store(side.ns, c.tokens, c.layers).status());
  side.store_s += Seconds(start);
  return Status::OK();
}

Status RestoreChain(Side& side, const Chain& c) {
  const uint64_t start = ThreadCpuNanos();
  PKV_ASSIGN_OR_RETURN(MatchResult m, side.engine->Match(side.ns, c.tokens));
  PKV_ASSIGN_OR_RETURN(RestoreResult restored, side.engine->Restore(m));
  side.restore_s += Seconds(start);
  if (restored.restored_tokens != c.tokens.size()) {
    return Status::Internal("bench events: a chain did not restore whole");
  }
  DoNotOptimize(restored);
  return Status::OK();
}

// One round: both engines open side by side, each chain stored (then
// restored) in one and then the other, the order alternating chain by chain,
// so that the machine's load falls on both alike.
struct Round {
  double store_on_s = 0, store_off_s = 0, restore_on_s = 0, restore_off_s = 0;
  uint64_t events = 0, event_bytes = 0;
};

// Runs `step` on every chain in both sides, `a` first for even chains and
// `b` first for odd ones.
Status Alternate(Side& a, Side& b, const std::vector<Chain>& chains,
                 Status (*step)(Side&, const Chain&)) {
  for (size_t i = 0; i < chains.size(); ++i) {
    PKV_RETURN_IF_ERROR(step(i % 2 == 0 ? a : b, chains[i]));
    PKV_RETURN_IF_ERROR(step(i % 2 == 0 ? b : a, chains[i]));
  }
  return Status::OK();
}

StatusOr<Round> RunRound(const std::vector<Chain>& chains) {
  PKV_ASSIGN_OR_RETURN(Side on, OpenSide(true));
  PKV_ASSIGN_OR_RETURN(Side off, OpenSide(false));
  const KvEventLogStats before = on.engine->EventLogStats();
  PKV_RETURN_IF_ERROR(Alternate(on, off, chains, StoreChain));
  const KvEventLogStats after = on.engine->EventLogStats();
  PKV_RETURN_IF_ERROR(Alternate(off, on, chains, RestoreChain));
  Round r{.store_on_s = on.store_s,
          .store_off_s = off.store_s,
          .restore_on_s = on.restore_s,
          .restore_off_s = off.restore_s,
          .events = after.appended - before.appended,
          .event_bytes = after.bytes - before.bytes};
  for (Side* side : {&on, &off}) {
    PKV_RETURN_IF_ERROR(side->engine->Close());
    side->engine.reset();
    std::filesystem::remove_all(side->dir);
  }
  return r;
}

int RunEventsBench(const std::vector<std::string>& args) {
  BenchArgs bench;
  if (std::optional<int> done = ParseBenchArgs("events", 7, args, &bench)) return *done;
  std::mt19937_64 rng(7);
  std::vector<Chain> chains(kChains);
  for (int i = 0; i < kChains; ++i) {
    chains[i].tokens.resize(static_cast<size_t>(kModel.chain_tokens()));
    for (size_t t = 0; t < chains[i].tokens.size(); ++t) {
      chains[i].tokens[t] = static_cast<int32_t>(i * 100000 + t);
    }
    chains[i].layers = kModel.RandomChain(rng);
  }
  std::vector<double> store_on, store_off, restore_on, restore_off, store_ratio,
      restore_ratio;
  uint64_t events = 0, event_bytes = 0;
  double events_store_s = 0;
  for (int round = 0; round < bench.repeats + 1; ++round) {
    StatusOr<Round> r = RunRound(chains);
    if (!r.ok()) {
      return ReportError(bench.json, "prefixkv bench events", r.status().ToString(),
                         kExitProblem);
    }
    if (round == 0) continue;  // warm-up
    store_on.push_back(r->store_on_s);
    store_off.push_back(r->store_off_s);
    restore_on.push_back(r->restore_on_s);
    restore_off.push_back(r->restore_off_s);
    store_ratio.push_back(r->store_off_s / r->store_on_s);
    restore_ratio.push_back(r->restore_off_s / r->restore_on_s);
    events += r->events;
    event_bytes += r->event_bytes;
    events_store_s += r->store_on_s;
  }
  const double blocks = double(kChains) * kModel.blocks;
  const Range s_on = Summarize(store_on), s_off = Summarize(store_off);
  const Range r_on = Summarize(restore_on), r_off = Summarize(restore_off);
  const Range s_ratio = Summarize(store_ratio), r_ratio = Summarize(restore_ratio);
  const double bytes_per_event = events ? double(event_bytes) / double(events) : 0;
  const double events_per_s = events_store_s > 0 ? double(events) / events_store_s : 0;
  if (bench.json) {
    SuiteJson out("events");
    out.j()
        .Field("store_blocks_per_second_events_on", blocks / s_on.median)
        .Field("store_blocks_per_second_events_off", blocks / s_off.median)
        .Field("store_ratio_on_vs_off", s_ratio.median)
        .Field("store_ratio_min", s_ratio.min)
        .Field("store_ratio_max", s_ratio.max)
        .Field("restore_blocks_per_second_events_on", blocks / r_on.median)
        .Field("restore_blocks_per_second_events_off", blocks / r_off.median)
        .Field("restore_ratio_on_vs_off", r_ratio.median)
        .Field("restore_ratio_min", r_ratio.min)
        .Field("restore_ratio_max", r_ratio.max)
        .Field("event_log_bytes_per_event", bytes_per_event)
        .Field("events_per_store_second", events_per_s)
        .Field("events_per_block", double(events) / blocks / bench.repeats)
        .Field("blocks", static_cast<uint64_t>(blocks))
        .Field("block_bytes",
               static_cast<uint64_t>(kModel.layers * 2 * kModel.kv_heads *
                                     kModel.block_tokens * kModel.head_dim * 2));
    out.Print();
  } else {
    std::printf("store:   %.0f blocks/s with events, %.0f without (%.3fx, %.3f-%.3f)\n",
                blocks / s_on.median, blocks / s_off.median, s_ratio.median, s_ratio.min,
                s_ratio.max);
    std::printf("restore: %.0f blocks/s with events, %.0f without (%.3fx, %.3f-%.3f)\n",
                blocks / r_on.median, blocks / r_off.median, r_ratio.median, r_ratio.min,
                r_ratio.max);
    std::printf("event log: %.1f bytes per event, %.0f events per second of store\n",
                bytes_per_event, events_per_s);
  }
  return 0;
}

}  // namespace

PKV_REGISTER_BENCH("events",
                   "store and restore throughput with the KV event log on vs off",
                   RunEventsBench);

}  // namespace prefixkv::cli
