// `prefixkv bench session`: what the hot KV manager and the boundary adapter cost
// per decode step, as a share of the whole step on the reference model (hidden 256,
// 8 layers, GQA 8/4 heads, 1,024 cached tokens), plus that model's decode rate.
//
// Each step is timed inside KvBoundaryAdapter::Decode (StepTimings): "compute" is
// embed + layers + final norm + LM head; everything else in the call (resolve,
// session lock, append into the layer caches, byte accounting) is manager
// overhead. After every step the session is truncated back to the context length
// (untimed), so every step sees exactly the same number of cached tokens.
#include <algorithm>
#include <cstdio>
#include <variant>

#include "prefixkv/boundary_adapter.h"
#include "prefixkv/reference_model.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/suite.h"
#include "tools/cli/flags.h"
#include "tools/cli/json.h"

namespace prefixkv::cli {
namespace {

struct SessionBenchResult {
  int64_t context_tokens = 0;
  int steps = 0;
  double prefill_tokens_per_s = 0;
  double decode_tokens_per_s = 0;
  double step_us = 0;      // median whole decode step
  double overhead_us = 0;  // median manager + adapter share of a step
  double manager_overhead_ratio = 0;
};

ModelConfig BenchModel() {
  ModelConfig c;
  c.vocab_size = 1024;
  c.hidden_size = 256;
  c.n_layers = 8;
  c.n_heads = 8;
  c.n_kv_heads = 4;
  c.intermediate_size = 688;
  return c;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Status RunSessionBench(int64_t context, int steps, SessionBenchResult* r) {
  PKV_ASSIGN_OR_RETURN(auto model, ReferenceModel::Create(BenchModel()));
  PKV_ASSIGN_OR_RETURN(auto shard, ReferenceShard::Create(model, 0, 7));
  PKV_ASSIGN_OR_RETURN(KvCacheRecipe recipe, KvRecipeFor(*shard));
  SessionManagerOptions config;
  config.budget_bytes = 0;  // unbounded: this measures bookkeeping, not eviction
  SessionManager manager(recipe, config);
  KvBoundaryAdapter adapter(shard.get(), &manager);
  StepInput prompt;
  for (int64_t i = 0; i < context; ++i)
    prompt.token_ids.push_back(static_cast<int32_t>(i * 7 % 1024));
  uint64_t start = Clock::System()->NowNanos();
  PKV_ASSIGN_OR_RETURN(StepOutput out, adapter.Prefill("bench", 0, prompt));
  double prefill_s = static_cast<double>(Clock::System()->NowNanos() - start) * 1e-9;
  int32_t token = std::get<TailOutput>(out).token_id;
  std::vector<double> totals, overheads;
  for (int i = 0; i < steps; ++i) {
    StepInput step;
    step.token_ids = {token};
    StepTimings t;
    PKV_ASSIGN_OR_RETURN(out, adapter.Decode("bench", 0, step, &t));
    if (!std::holds_alternative<TailOutput>(out))
      return Status::Internal("decode missed");
    token = std::get<TailOutput>(out).token_id;
    totals.push_back(static_cast<double>(t.total_nanos) * 1e-3);
    overheads.push_back(static_cast<double>(t.total_nanos - t.compute_nanos) * 1e-3);
    PKV_ASSIGN_OR_RETURN(SessionOrMiss back, manager.Truncate("bench", 0, context));
    DoNotOptimize(back);
  }
  r->context_tokens = context;
  r->steps = steps;
  r->prefill_tokens_per_s = static_cast<double>(context) / prefill_s;
  r->step_us = Median(totals);
  r->overhead_us = Median(overheads);
  r->decode_tokens_per_s = 1e6 / r->step_us;
  r->manager_overhead_ratio = r->overhead_us / r->step_us;
  return Status::OK();
}

void Print(const SessionBenchResult& r, bool json) {
  if (json) {
    SuiteJson out("session");
    JsonWriter& j = out.j();
    j.Field("context_tokens", r.context_tokens)
        .Field("decode_steps", r.steps)
        .Field("manager_overhead_ratio", r.manager_overhead_ratio)
        .Field("manager_overhead_us", r.overhead_us)
        .Field("decode_step_us", r.step_us)
        .Field("decode_tokens_per_s", r.decode_tokens_per_s)
        .Field("prefill_tokens_per_s", r.prefill_tokens_per_s);
    out.Print();
    return;
  }
  std::printf(
      "session benchmark: reference Llama, hidden 256, 8 layers, %lld cached tokens\n",
      static_cast<long long>(r.context_tokens));
  std::printf(
      "  manager + adapter share of a decode step  %.4f  (%.1f us of %.0f us, goal <= "
      "0.05)\n",
      r.manager_overhead_ratio, r.overhead_us, r.step_us);
  std::printf(
      "  decode                                    %.1f tokens/s (median of %d steps)\n",
      r.decode_tokens_per_s, r.steps);
  std::printf("  prefill                                   %.1f tokens/s\n",
              r.prefill_tokens_per_s);
}

int RunSessionBenchCommand(const std::vector<std::string>& args) {
  Flags flags("prefixkv bench session [--json] [--context N] [--steps N]",
              {{"json", "print one JSON object", true, ""},
               {"context", "cached tokens before each decode step", false, "1024"},
               {"steps", "decode steps measured (median taken)", false, "32"}});
  if (std::optional<int> done = ParseSuiteFlags(flags, args)) return *done;
  std::optional<uint64_t> context = ParseCount(flags, "context", "1024", 65536);
  std::optional<uint64_t> steps = ParseCount(flags, "steps", "32", 10000);
  if (!context) return UsageError(flags, NotInRange(flags, "context", "1..65536"));
  if (!steps) return UsageError(flags, NotInRange(flags, "steps", "1..10000"));
  SessionBenchResult r;
  Status s =
      RunSessionBench(static_cast<int64_t>(*context), static_cast<int>(*steps), &r);
  if (!s.ok()) return Failure(flags, "bench session", s.ToString());
  Print(r, flags.GetBool("json"));
  return kExitOk;
}

}  // namespace

PKV_REGISTER_BENCH("session",
                   "hot KV manager overhead per decode step vs the step itself",
                   RunSessionBenchCommand);

}  // namespace prefixkv::cli
