// `prefixkv bench events`: the cost of the KV event log (docs/events.md).
// Store and restore throughput of an engine with the event log on and off,
// alternating in the same run, on small blocks (where a per-event cost shows
// most): 2 KVCache layers of 2 KV heads x 64 dims, float16, 16-token blocks
// (16 KiB each), 64 chains of 64 blocks stored into a fresh engine (data
// directory in $TMPDIR, write-back, a hot tier that holds everything), then
// each chain matched and restored from the hot tier. Also the log's bytes per
// event and the events appended per second of store.
#include <filesystem>
#include <random>

#include "prefixkv/engine.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/suite.h"
#include "tools/cli/flags.h"
#include "tools/cli/json.h"

namespace prefixkv::cli {
namespace {

constexpr BenchModel kModel{.name = "bench-events",
                            .layers = 2,
                            .kv_heads = 2,
                            .head_dim = 64,
                            .block_tokens = 16,
                            .blocks = 64};
constexpr int kChains = 64;

struct Round {
  double store_s = 0, restore_s = 0;
  uint64_t events = 0, event_bytes = 0;
};

struct Chain {
  std::vector<int32_t> tokens;
  std::vector<LayerState> layers;
};

StatusOr<Round> RunOnce(const std::vector<Chain>& chains, bool events) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / "prefixkv-bench-events").string();
  std::filesystem::remove_all(dir);
  EngineOptions o;
  o.data_dir = dir;
  o.hot_capacity_bytes = uint64_t{256} << 20;
  o.event_log = events;
  o.log = [](std::string_view) {};
  PKV_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Open(o));
  PKV_ASSIGN_OR_RETURN(Namespace ns, engine->RegisterModel(kModel.Spec()));
  Round r;
  const KvEventLogStats before = engine->EventLogStats();
  uint64_t start = Clock::System()->NowNanos();
  for (const Chain& c : chains) {
    PKV_RETURN_IF_ERROR(engine->Store(ns, c.tokens, c.layers).status());
  }
  r.store_s = static_cast<double>(Clock::System()->NowNanos() - start) * 1e-9;
  const KvEventLogStats after = engine->EventLogStats();
  r.events = after.appended - before.appended;
  r.event_bytes = after.bytes - before.bytes;
  start = Clock::System()->NowNanos();
  for (const Chain& c : chains) {
    PKV_ASSIGN_OR_RETURN(MatchResult m, engine->Match(ns, c.tokens));
    PKV_ASSIGN_OR_RETURN(RestoreResult restored, engine->Restore(m));
    if (restored.restored_tokens != c.tokens.size()) {
      return Status::Internal("bench events: a chain did not restore whole");
    }
    DoNotOptimize(restored);
  }
  r.restore_s = static_cast<double>(Clock::System()->NowNanos() - start) * 1e-9;
  PKV_RETURN_IF_ERROR(engine->Close());
  engine.reset();
  std::filesystem::remove_all(dir);
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
  std::vector<double> store_on, store_off, restore_on, restore_off;
  uint64_t events = 0, event_bytes = 0;
  double events_store_s = 0;
  for (int round = 0; round < bench.repeats + 1; ++round) {
    for (int k = 0; k < 2; ++k) {
      const bool on = (round + k) % 2 == 0;  // alternate which goes first
      StatusOr<Round> r = RunOnce(chains, on);
      if (!r.ok()) {
        return ReportError(bench.json, "prefixkv bench events", r.status().ToString(),
                           kExitProblem);
      }
      if (round == 0) continue;  // warm-up
      (on ? store_on : store_off).push_back(r->store_s);
      (on ? restore_on : restore_off).push_back(r->restore_s);
      if (on) {
        events += r->events;
        event_bytes += r->event_bytes;
        events_store_s += r->store_s;
      }
    }
  }
  const double blocks = double(kChains) * kModel.blocks;
  const Range s_on = Summarize(store_on), s_off = Summarize(store_off);
  const Range r_on = Summarize(restore_on), r_off = Summarize(restore_off);
  const double store_ratio = s_off.median / s_on.median;
  const double restore_ratio = r_off.median / r_on.median;
  const double bytes_per_event = events ? double(event_bytes) / double(events) : 0;
  const double events_per_s = events_store_s > 0 ? double(events) / events_store_s : 0;
  if (bench.json) {
    SuiteJson out("events");
    out.j()
        .Field("store_blocks_per_second_events_on", blocks / s_on.median)
        .Field("store_blocks_per_second_events_off", blocks / s_off.median)
        .Field("store_ratio_on_vs_off", store_ratio)
        .Field("restore_blocks_per_second_events_on", blocks / r_on.median)
        .Field("restore_blocks_per_second_events_off", blocks / r_off.median)
        .Field("restore_ratio_on_vs_off", restore_ratio)
        .Field("event_log_bytes_per_event", bytes_per_event)
        .Field("events_per_store_second", events_per_s)
        .Field("events_per_block", events / blocks / bench.repeats)
        .Field("blocks", static_cast<uint64_t>(blocks))
        .Field("block_bytes",
               static_cast<uint64_t>(kModel.layers * 2 * kModel.kv_heads *
                                     kModel.block_tokens * kModel.head_dim * 2));
    out.Print();
  } else {
    std::printf("store:   %.0f blocks/s with events, %.0f without (%.3fx)\n",
                blocks / s_on.median, blocks / s_off.median, store_ratio);
    std::printf("restore: %.0f blocks/s with events, %.0f without (%.3fx)\n",
                blocks / r_on.median, blocks / r_off.median, restore_ratio);
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
