// `prefixkv replay TRACE.jsonl`: replay a Mooncake-format trace over a real
// hot tier and SSD tier and print prefix hit ratios per tier (semantics in
// tools/replay/trace_replay.h and docs/prefix_cache.md).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <system_error>

#include "tools/cli/command.h"
#include "tools/cli/flags.h"
#include "tools/cli/json.h"
#include "tools/cli/remote_flags.h"
#include "tools/cli/replay_routed.h"
#include "tools/cli/wear_flags.h"
#include "tools/replay/policy_replay.h"
#include "tools/replay/trace_replay.h"

namespace prefixkv::cli {
namespace {

using replay::ReplayCapacity;
using replay::ReplayConfig;
using replay::ReplayReport;

Flags ReplayFlags() {
  std::vector<FlagSpec> specs = {
      {"trace-block-tokens", "tokens per hash id", false, "512"},
      {"bytes-per-token", "synthetic payload bytes per token", false, "16"},
      {"hot-capacity-tokens", "hot tier size in tokens (0: off)", false, "unlimited"},
      {"hot-capacity-bytes", "hot tier size in charged bytes (0: off)", false, ""},
      {"ssd-capacity-tokens", "SSD tier size in tokens (0: off)", false, "unlimited"},
      {"ssd-capacity-bytes", "SSD tier size in bytes (0: off)", false, ""},
      {"policy",
       "hot tier eviction policy: lru, leaf-lru, chain (docs/eviction.md), or min: "
       "Belady's offline optimum as a reference line (replay only; needs "
       "--ssd-capacity-tokens 0)",
       false, "lru"},
      {"ssd-policy",
       "SSD tier leaf order: leaf-lru (lru is the same: the SSD tier is always "
       "leaf-first) or chain (docs/eviction.md)",
       false, "leaf-lru"},
      {"hint-unlikely-after",
       "reuse hints (opt-in): a request whose answer (output_length) is longer "
       "than N tokens puts its blocks as unlikely to be reused, so they leave the "
       "hot tier first. Whether answer length predicts reuse depends on the "
       "traffic: 100 gains 8% over chain on the Mooncake synthetic trace and "
       "loses 12% on a real chat trace (docs/eviction.md, \"Reuse hints\")",
       false, "no hints"},
      {"no-promote", "do not copy SSD hits into the hot tier", true, ""},
      {"data-dir", "where the SSD tier's scratch directory is made", false,
       "./prefixkv-data"},
      {"keep-data", "keep the SSD tier's directory after the replay", true, ""},
      {"nodes",
       "replay over N nodes, each with the tiers above, request i on node i % N "
       "(share blocks between them with --remote)",
       false, "1"},
      {"json", "print one JSON object", true, ""}};
  for (FlagSpec& f : RouterFlagSpecs()) specs.push_back(std::move(f));
  for (FlagSpec& f : AdvisorFlagSpecs()) specs.push_back(std::move(f));
  for (FlagSpec& f : RemoteFlagSpecs()) {
    // A replay's blocks need not outlive it by a day (Configure).
    if (f.name == "remote-ttl") f.default_text = "3600";
    specs.push_back(std::move(f));
  }
  // Admission only: a replay projects no drive lifetime.
  for (FlagSpec& f : WearFlagSpecs()) {
    if (f.name == "ssd-admission" || f.name == "ssd-write-budget") {
      if (f.name == "ssd-write-budget")
        f.help += ", of trace time (timestamps, in milliseconds)";
      specs.push_back(std::move(f));
    }
  }
  return Flags("prefixkv replay TRACE.jsonl [flags]", std::move(specs),
               /*max_positional=*/1);
}

// Reads --NAME-capacity-tokens / -bytes; false on a usage error.
bool ReadCapacity(const Flags& flags, const std::string& tier, ReplayCapacity* c,
                  std::string* error) {
  c->tokens = flags.GetSize(tier + "-capacity-tokens", error);
  if (!error->empty()) return false;
  c->bytes = flags.GetSize(tier + "-capacity-bytes", error);
  if (!error->empty()) return false;
  if (c->tokens && c->bytes) {
    *error =
        "give --" + tier + "-capacity-tokens or --" + tier + "-capacity-bytes, not both";
    return false;
  }
  return true;
}

void DrawProgress(size_t done, size_t total) {
  constexpr int kWidth = 40;
  const int filled = static_cast<int>(kWidth * done / (total ? total : 1));
  std::fprintf(stderr, "\r[%s%s] %zu/%zu requests", std::string(filled, '#').c_str(),
               std::string(kWidth - filled, ' ').c_str(), done, total);
  if (done == total) std::fprintf(stderr, "\n");
}

void PrintJson(const ReplayReport& r, const ReplayConfig& c, const std::string& policy) {
  JsonWriter j;
  j.BeginObject()
      .Field("requests", r.requests)
      .Field("blocks", r.blocks)
      .Field("hit_blocks", r.hit_blocks)
      .Field("input_tokens", r.input_tokens)
      .Field("hit_tokens", r.hit_tokens)
      .Field("block_hit_ratio", r.block_hit_ratio())
      .Field("token_hit_ratio", r.token_hit_ratio())
      .Field("prefill_tokens_saved", r.prefill_tokens_saved())
      .Field("prefill_cost_saved_ratio", r.prefill_cost_saved_ratio())
      .Field("seconds", r.seconds)
      .Field("blocks_per_second", r.blocks_per_second())
      .Field("block_tokens", uint64_t{c.block_tokens})
      .Field("bytes_per_token", c.bytes_per_token)
      .Field("policy", policy)
      .Field("ssd_policy", std::string(EvictionPolicyName(c.ssd_policy)))
      .Field("ssd_admission", std::string(SsdAdmissionName(c.ssd_admission)))
      .Field("ssd_write_budget_bytes_per_day", c.ssd_write_budget_bytes_per_day)
      .Field("ssd_written_blocks", r.ssd_admission.written_blocks)
      .Field("ssd_written_bytes", r.ssd_admission.written_bytes)
      .Field("ssd_forced_blocks", r.ssd_admission.forced_blocks)
      .Field("ssd_skipped_blocks", r.ssd_admission.skipped_blocks)
      .Field("ssd_skipped_bytes", r.ssd_admission.skipped_bytes)
      .Field("ssd_segment_bytes_written", r.ssd_segment_bytes_written)
      .Field("ssd_bytes_written_per_hit", r.ssd_bytes_written_per_hit());
  if (c.unlikely_reuse_after_output_tokens) {
    j.Field("hint_unlikely_after", *c.unlikely_reuse_after_output_tokens)
        .Field("hinted_blocks", r.hinted_blocks);
  }
  j.Key("tiers").BeginObject();
  for (const auto& t : r.tiers) {
    j.Key(t.name).BeginObject();
    j.Field("block_hits", t.block_hits)
        .Field("bytes", t.bytes)
        .Field("entries", t.entries);
    j.Field("evictions", t.evictions).EndObject();
  }
  j.EndObject().EndObject();
  std::printf("%s\n", j.str().c_str());
}

void PrintHuman(const ReplayReport& r) {
  std::printf("requests %llu, blocks %llu\n", static_cast<unsigned long long>(r.requests),
              static_cast<unsigned long long>(r.blocks));
  std::printf("block hit ratio %.3f, token hit ratio %.3f\n", r.block_hit_ratio(),
              r.token_hit_ratio());
  std::printf("prefill tokens saved %llu, prefill cost saved %.3f\n",
              static_cast<unsigned long long>(r.prefill_tokens_saved()),
              r.prefill_cost_saved_ratio());
  if (r.hinted_blocks > 0) {
    std::printf("blocks put as unlikely to be reused %llu\n",
                static_cast<unsigned long long>(r.hinted_blocks));
  }
  if (r.ssd_admission.written_blocks + r.ssd_admission.skipped_blocks > 0) {
    std::printf(
        "ssd written %llu blocks (%llu bytes, %llu forced), skipped %llu (%llu bytes), "
        "%.0f bytes written per ssd hit\n",
        static_cast<unsigned long long>(r.ssd_admission.written_blocks),
        static_cast<unsigned long long>(r.ssd_admission.written_bytes),
        static_cast<unsigned long long>(r.ssd_admission.forced_blocks),
        static_cast<unsigned long long>(r.ssd_admission.skipped_blocks),
        static_cast<unsigned long long>(r.ssd_admission.skipped_bytes),
        r.ssd_bytes_written_per_hit());
  }
  std::printf("%-5s %12s %16s %10s %10s\n", "tier", "block_hits", "bytes", "entries",
              "evictions");
  for (const auto& t : r.tiers) {
    std::printf("%-5s %12llu %16llu %10llu %10llu\n", t.name.c_str(),
                static_cast<unsigned long long>(t.block_hits),
                static_cast<unsigned long long>(t.bytes),
                static_cast<unsigned long long>(t.entries),
                static_cast<unsigned long long>(t.evictions));
  }
  std::printf("replayed in %.3f s: %.0f blocks per second\n", r.seconds,
              r.blocks_per_second());
}

// Parses flags into `c`; returns an error text for a usage error.
std::string Configure(const Flags& flags, ReplayConfig* c, std::string* policy_name) {
  std::string error;
  std::optional<uint64_t> block = flags.GetSize("trace-block-tokens", &error);
  if (block) c->block_tokens = static_cast<uint32_t>(*block);
  if (block && (*block == 0 || *block > (1u << 22)))
    return NotInRange(flags, "trace-block-tokens", "1..4194304");
  std::optional<uint64_t> bpt = flags.GetSize("bytes-per-token", &error);
  if (bpt) c->bytes_per_token = *bpt;
  if (!error.empty()) return error;
  // Each block's synthetic payload is allocated: 100M per token used to abort
  // on std::bad_alloc, and 2^55 overflowed to empty payloads.
  constexpr uint64_t kMaxBlockPayload = uint64_t{64} << 20;
  if (c->bytes_per_token == 0 ||
      c->bytes_per_token > kMaxBlockPayload / std::max<uint64_t>(c->block_tokens, 1)) {
    return "--bytes-per-token must be at least 1, and a block's payload (" +
           std::to_string(c->block_tokens) +
           " tokens × bytes per token) at most 64M: at most " +
           std::to_string(kMaxBlockPayload / std::max<uint64_t>(c->block_tokens, 1));
  }
  if (!ReadCapacity(flags, "hot", &c->hot, &error)) return error;
  if (!ReadCapacity(flags, "ssd", &c->ssd, &error)) return error;
  // A size in tokens below one block holds none, as 0 does: with both tiers
  // so, the replay failed after reading the trace ('InvalidArgument: both
  // tiers are off', exit 1) as if the input were valid.
  const auto holds_no_block = [&](const ReplayCapacity& t) {
    return t.off() || (t.tokens && *t.tokens < c->block_tokens);
  };
  if (holds_no_block(c->hot) && holds_no_block(c->ssd)) {
    return "both tiers hold no block: give --hot-capacity-tokens or "
           "--ssd-capacity-tokens of at least one block (" +
           std::to_string(c->block_tokens) + " tokens)";
  }
  *policy_name = flags.GetString("policy", "lru");
  if (*policy_name == "min") {
    if (!c->ssd.off()) return "--policy min needs --ssd-capacity-tokens 0";
  } else {
    StatusOr<EvictionPolicyKind> policy = ParseEvictionPolicy(*policy_name);
    if (!policy.ok())
      return "--policy: unknown policy '" + *policy_name +
             "' (expected lru, leaf-lru, chain or min)";
    c->policy = *policy;
  }
  StatusOr<EvictionPolicyKind> ssd_policy =
      ParseEvictionPolicy(flags.GetString("ssd-policy", "leaf-lru"));
  if (!ssd_policy.ok())
    return "--ssd-policy: unknown policy '" + flags.GetString("ssd-policy") +
           "' (expected lru, leaf-lru or chain)";
  c->ssd_policy = *ssd_policy;
  c->unlikely_reuse_after_output_tokens = flags.GetSize("hint-unlikely-after", &error);
  if (!error.empty()) return error;
  if (c->unlikely_reuse_after_output_tokens && *policy_name == "min")
    return "--policy min takes no --hint-unlikely-after (it knows the future)";
  c->promote_on_ssd_hit = !flags.GetBool("no-promote");
  EngineOptions wear;
  if (std::string e = ApplyWearFlags(flags, &wear); !e.empty()) return e;
  c->ssd_admission = wear.ssd_admission;
  c->ssd_write_budget_bytes_per_day = wear.ssd_write_budget_bytes_per_day;
  if (c->ssd_admission != SsdAdmissionKind::kAll && *policy_name == "min")
    return "--policy min has no SSD tier to admit to";
  EngineOptions advisor;
  if (std::string e = ApplyAdvisorFlags(flags, &advisor); !e.empty()) return e;
  c->advisor_max_keys = advisor.advisor_max_keys;
  c->advisor_half_life_seconds = advisor.advisor_half_life_seconds;
  if (flags.positional().size() != 1) return "expected exactly one TRACE.jsonl";
  EngineOptions remote;
  if (std::string e = ApplyRemoteFlags(flags, &remote); !e.empty()) return e;
  // A replay's blocks need not outlive it by a day.
  if (!flags.Has("remote-ttl")) remote.remote_limits.ttl_seconds = 3600;
  c->remote = remote.remote;
  c->remote_write = remote.remote_write;
  c->remote_timeout_ms = remote.remote_timeout_ms;
  c->remote_ttl_seconds = remote.remote_limits.ttl_seconds;
  c->remote_max_bytes = remote.remote_limits.max_bytes;
  // One run's blocks are its own: runs sharing a cluster must not hit each
  // other's (the nodes of this run share the prefix).
  c->remote_key_prefix = "prefixkv:replay:" + std::to_string(::getpid()) + "-" +
                         std::to_string(std::time(nullptr)) + ":";
  if (!c->remote.empty() && *policy_name == "min") return "--policy min has no --remote";
  return "";
}

int RunReplay(const std::vector<std::string>& args) {
  Flags flags = ReplayFlags();
  std::string error;
  if (!flags.Parse(args, &error)) return UsageError(flags, error);
  if (flags.help_requested()) {
    std::printf("%s", flags.HelpText().c_str());
    return 0;
  }
  ReplayConfig config;
  std::string policy;
  error = Configure(flags, &config, &policy);
  if (!error.empty()) return UsageError(flags, error);
  StatusOr<std::vector<replay::TraceRequest>> trace =
      replay::ReadTrace(flags.positional()[0]);
  // A trace that cannot be opened is a usage error; one that is malformed
  // (InvalidArgument naming the line) a problem found.
  if (!trace.ok()) return OpenError(flags, "replay", trace.status());
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir = fs::path(flags.GetString("data-dir", "./prefixkv-data")) /
                       ("replay-" + std::to_string(::getpid()));
  std::optional<uint64_t> nodes =
      flags.Has("nodes") ? flags.GetCount("nodes", &error) : std::optional<uint64_t>(1);
  if (!error.empty() || !nodes || *nodes < 1 || *nodes > 64) {
    return UsageError(flags, error.empty() ? NotInRange(flags, "nodes", "1..64") : error);
  }
  // Checked before the min replay, which returned first: --policy min with
  // --nodes 2 (or --nodes abc, --router prefix) replayed one node and printed
  // its figures as the ones asked for.
  if (policy == "min" && (*nodes > 1 || flags.Has("router")))
    return UsageError(flags, "--policy min has one node (no --nodes or --router)");
  for (const FlagSpec& f : RouterFlagSpecs()) {
    if (f.name != "router" && flags.Has(f.name) && !flags.Has("router"))
      return UsageError(flags, "--" + f.name + " needs --router");
  }
  if (policy == "min") {
    StatusOr<ReplayReport> r = replay::ReplayWithPolicy(*trace, config, policy);
    if (!r.ok()) return Failure(flags, "replay", r.status().ToString());
    flags.GetBool("json") ? PrintJson(*r, config, policy) : PrintHuman(*r);
    return kExitOk;
  }
  const bool tty = ::isatty(STDERR_FILENO) == 1;
  if (flags.Has("router")) {
    // The progress bar too: a routed replay replays the trace twice (the N
    // nodes, then one node with N times the capacity) and drew nothing.
    const int routed = RunRoutedReplayCommand(flags, config, *nodes, *trace, dir.string(),
                                              tty ? DrawProgress : nullptr);
    if (!flags.GetBool("keep-data") && !config.ssd.off()) fs::remove_all(dir, ec);
    return routed;
  }
  int rc = kExitProblem;
  {
    std::vector<std::unique_ptr<replay::ReplayTiers>> opened;
    std::vector<replay::ReplayTiers*> tiers;
    Status open_status;
    for (uint64_t i = 0; i < *nodes && open_status.ok(); ++i) {
      ReplayConfig node = config;
      if (!config.ssd.off()) {
        node.ssd_path =
            (*nodes == 1 ? dir : dir / ("node-" + std::to_string(i))).string();
      }
      StatusOr<std::unique_ptr<replay::ReplayTiers>> t = replay::ReplayTiers::Open(node);
      open_status = t.status();
      if (t.ok()) {
        tiers.push_back(t->get());
        opened.push_back(std::move(t).value());
      }
    }
    if (!open_status.ok()) {
      Failure(flags, "replay", open_status.ToString());
    } else {
      replay::TraceReplayer replayer(tiers, config.block_tokens);
      Status s = replayer.ReplayAll(*trace, tty ? DrawProgress : nullptr);
      if (!s.ok()) {
        Failure(flags, "replay", s.ToString());
      } else {
        flags.GetBool("json") ? PrintJson(replayer.Report(), config, policy)
                              : PrintHuman(replayer.Report());
        rc = kExitOk;
      }
    }
  }
  if (!flags.GetBool("keep-data") && !config.ssd.off()) fs::remove_all(dir, ec);
  return rc;
}

}  // namespace

PKV_REGISTER_COMMAND("replay",
                     "replay a Mooncake-format trace and report prefix hit ratios",
                     RunReplay);

}  // namespace prefixkv::cli
