// `prefixkv demo`: the end-to-end demo (issue 7). A multi-turn conversation on
// the reference model with sliding-window layers, served from a PrefixCache
// over a small hot tier that spills to SSD, then a restart from the data
// directory, a token parity check against stateless decode and an audit.
// With --nodes 2 the conversation alternates between two node processes
// sharing a remote tier (issue 13, demo_nodes.h).
// The work itself is in demo_conversation.cc and demo_nodes.cc; this file is
// flags and output.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "tools/cli/command.h"
#include "tools/cli/demo_conversation.h"
#include "tools/cli/demo_nodes.h"
#include "tools/cli/flags.h"
#include "tools/cli/json.h"
#include "tools/cli/remote_flags.h"
#include "tools/redis/local_redis_cluster.h"

namespace prefixkv::cli {
namespace {

constexpr const char* kAbout =
    "Runs an N-turn conversation on a small reference Llama (8 layers, 6 with a\n"
    "32-token sliding window) whose KV caches are stored in and restored from\n"
    "the prefix cache (a 96 KiB hot tier spilling to an SSD tier in\n"
    "<data-dir>/demo). Each turn restores the longest cached prefix of its\n"
    "prompt, computes only the rest, decodes 12 tokens greedily and stores the\n"
    "whole conversation (full blocks plus the partial tail, which carries the\n"
    "sliding-window state). Then it closes the tiers, reopens them (a restart),\n"
    "runs one more turn restored from SSD, checks every reply against the\n"
    "model's stateless greedy decode and audits the tiers.\n"
    "<data-dir>/demo is WIPED at start, so reruns are reproducible.\n"
    "Exit 0 only when parity and the audit hold. Parity: every reply token and\n"
    "the logits it was picked from equal the stateless runner's, bit for bit.\n\n"
    "--model hybrid runs the same on a hybrid model of all three layer kinds\n"
    "(WRWGWRWG: W a 32-token window, R a recurrent layer with a fixed-size\n"
    "state, G full attention); windows and recurrent states are kept only at\n"
    "each stored tip (docs/session.md, \"Hybrid models\").\n\n"
    "--nodes 2 serves the same conversation (either model) from two prefixkv\n"
    "nodes that share a remote tier on a Redis Cluster (docs/remote.md, \"Two\n"
    "nodes\"): turns\n"
    "1, 3, 5... run on node A, turns 2, 4, 6... on node B. The nodes are\n"
    "separate processes with separate data directories (<data-dir>/demo/node-a\n"
    "and node-b, wiped at start); each turn is a fresh process of its node, so\n"
    "its hot tier starts empty: a node restores its own earlier turns from its\n"
    "SSD and the other node's from the remote tier (from-remote: tokens of\n"
    "blocks another node computed). Every block stored is written to the\n"
    "remote tier (remote_write always). There is no restart turn and no audit\n"
    "in this mode. Without --remote, a local 3-master Redis Cluster is started\n"
    "on 127.0.0.1 (needs redis-server and redis-cli) and stopped at the end; a\n"
    "cluster given with --remote keeps the blocks (reruns find them there).\n"
    "Exit 0 only when every reply has parity, every turn after the first\n"
    "restored tokens, and node B's first turn restored some from the remote\n"
    "tier.\n\n";

// The remote tier's request bound in the demo: 5 ms (the serving default) is
// tight on a busy machine, and a dropped write would make node B recompute.
constexpr uint32_t kDemoRemoteTimeoutMs = 100;

// `node` 0: the one-node demo (no node and no remote field).
void WriteTurn(JsonWriter& w, const DemoTurn& t, char node = 0) {
  w.BeginObject();
  if (node != 0) w.Field("node", std::string(1, node));
  w.Field("prompt_tokens", t.prompt_tokens)
      .Field("restored_hot_tokens", t.restored_hot_tokens)
      .Field("restored_ssd_tokens", t.restored_ssd_tokens);
  if (node != 0) w.Field("restored_remote_tokens", t.restored_remote_tokens);
  w.Field("computed_tokens", t.computed_tokens)
      .Field("new_tokens", t.new_tokens)
      .Field("seconds", t.seconds);
  if (node == 0) w.Field("logit_parity", t.logit_parity);
  w.Field("parity", t.parity).EndObject();
}

void PrintJson(const DemoReport& r) {
  JsonWriter w;
  w.BeginObject().Field("model", r.model).Field("layer_kinds", r.layer_kinds);
  w.Field("block_tokens", static_cast<uint64_t>(r.block_tokens));
  w.Field("hot_capacity_bytes", r.hot_capacity_bytes)
      .Field("hot_evictions", r.hot_evictions);
  w.Key("turns").BeginArray();
  for (const DemoTurn& t : r.turns) WriteTurn(w, t);
  w.EndArray();
  w.Key("restart");
  WriteTurn(w, r.restart);
  w.Field("hit_ratio", r.hit_ratio);
  w.Field("parity", r.parity).Field("audit_ok", r.audit_ok);
  w.Key("audit_findings").BeginArray();
  for (const std::string& f : r.audit_findings) w.String(f);
  w.EndArray().EndObject();
  std::printf("%s\n", w.str().c_str());
}

// One table row. `node` 0: the one-node demo's row (no node and no remote
// column); otherwise the --nodes 2 row.
void PrintRow(const std::string& label, const DemoTurn& t, char node = 0) {
  auto u = [](uint64_t v) { return static_cast<unsigned long long>(v); };
  if (node == 0) {
    std::printf("%-8s ", label.c_str());
  } else {
    std::printf("%-5s %-4c ", label.c_str(), node);
  }
  std::printf("%7llu %5llu %9llu %9llu ", u(t.prompt_tokens), u(t.new_tokens),
              u(t.restored_hot_tokens), u(t.restored_ssd_tokens));
  if (node != 0) std::printf("%12llu ", u(t.restored_remote_tokens));
  const bool ok = t.parity && (node != 0 || t.logit_parity);
  std::printf("%9llu %9.3f  %s\n", u(t.computed_tokens), t.seconds,
              ok ? "ok" : (t.parity ? "LOGITS DIFFER" : "MISMATCH"));
}

void PrintTable(const DemoReport& r, const std::string& dir) {
  std::printf("model %s, layers %s (G full attention, W 32-token window, R recurrent)\n",
              r.model.c_str(), r.layer_kinds.c_str());
  std::printf(
      "data directory %s (wiped at start); blocks of %u tokens; hot tier %llu KiB\n\n",
      dir.c_str(), r.block_tokens,
      static_cast<unsigned long long>(r.hot_capacity_bytes / 1024));
  std::printf("%-8s %7s %5s %9s %9s %9s %9s  %s\n", "turn", "prompt", "new", "from-hot",
              "from-ssd", "computed", "seconds", "parity");
  for (size_t i = 0; i < r.turns.size(); ++i) PrintRow(std::to_string(i + 1), r.turns[i]);
  std::printf(
      "-- flushed, closed, reopened: %llu blocks on SSD (hot tier had spilled %llu) --\n",
      static_cast<unsigned long long>(r.ssd_blocks_after_restart),
      static_cast<unsigned long long>(r.hot_evictions));
  PrintRow("restart", r.restart);
  std::printf("\nhit ratio (restored / prompt tokens, every turn): %.3f\n", r.hit_ratio);
  std::printf("token and logit parity with stateless greedy decode: %s\n",
              r.parity ? "yes, every turn" : "NO");
  std::printf("audit (hot budget, SSD tier, orphans): %s\n",
              r.audit_ok ? "clean" : "FINDINGS");
  for (const std::string& f : r.audit_findings) std::printf("  %s\n", f.c_str());
  std::printf("verdict: %s\n", r.parity && r.audit_ok ? "PASS" : "FAIL");
}

// --- --nodes 2 ---

void WriteRemoteCounters(JsonWriter& w, const RemoteCounters& c) {
  w.BeginObject()
      .Field("hits", c.hits)
      .Field("misses", c.misses)
      .Field("writes", c.writes)
      .Field("bytes_read", c.bytes_read)
      .Field("bytes_written", c.bytes_written)
      .Field("errors", c.errors)
      .Field("corruptions", c.corruptions)
      .Field("dropped", c.dropped)
      .Field("write_failures", c.write_failures)
      .EndObject();
}

void PrintNodesJson(const DemoNodesReport& r, const std::string& remote, bool started) {
  JsonWriter w;
  w.BeginObject()
      .Field("nodes", 2)
      .Field("model", r.model)
      .Field("layer_kinds", r.layer_kinds)
      .Field("remote", remote)
      .Field("cluster_started", started);
  w.Field("block_tokens", static_cast<uint64_t>(r.block_tokens))
      .Field("hot_capacity_bytes", r.hot_capacity_bytes);
  w.Key("turns").BeginArray();
  for (const DemoNodesTurn& t : r.turns) WriteTurn(w, t.turn, t.node);
  w.EndArray();
  w.Key("remote_counters");
  WriteRemoteCounters(w, r.remote);
  w.Field("parity", r.parity)
      .Field("later_turns_restored", r.later_turns_restored)
      .Field("node_b_restored_remote", r.node_b_restored_remote)
      .Field("verdict", r.pass() ? "PASS" : "FAIL")
      .EndObject();
  std::printf("%s\n", w.str().c_str());
}

void PrintNodesTable(const DemoNodesReport& r, const std::string& dir,
                     const std::string& remote) {
  std::printf(
      "nodes A and B: one process per turn over %s/node-a and node-b (wiped at start)\n"
      "model %s (layers %s); remote tier %s (remote_write always); blocks of %u "
      "tokens; hot tier %llu KiB per node\n\n",
      dir.c_str(), r.model.c_str(), r.layer_kinds.c_str(), remote.c_str(), r.block_tokens,
      static_cast<unsigned long long>(r.hot_capacity_bytes / 1024));
  std::printf("%-5s %-4s %7s %5s %9s %9s %12s %9s %9s  %s\n", "turn", "node", "prompt",
              "new", "from-hot", "from-ssd", "from-remote", "computed", "seconds",
              "parity");
  for (size_t i = 0; i < r.turns.size(); ++i) {
    PrintRow(std::to_string(i + 1), r.turns[i].turn, r.turns[i].node);
  }
  const RemoteCounters& c = r.remote;
  std::printf(
      "\nremote tier, both nodes: %llu hits, %llu misses, %llu writes, %llu KiB written, "
      "%llu KiB read, %llu errors, %llu corrupt, %llu dropped, %llu failed writes\n",
      static_cast<unsigned long long>(c.hits), static_cast<unsigned long long>(c.misses),
      static_cast<unsigned long long>(c.writes),
      static_cast<unsigned long long>(c.bytes_written / 1024),
      static_cast<unsigned long long>(c.bytes_read / 1024),
      static_cast<unsigned long long>(c.errors),
      static_cast<unsigned long long>(c.corruptions),
      static_cast<unsigned long long>(c.dropped),
      static_cast<unsigned long long>(c.write_failures));
  std::printf("token parity with stateless greedy decode: %s\n",
              r.parity ? "yes, every turn" : "NO");
  std::printf("every turn after the first restored cached tokens: %s\n",
              r.later_turns_restored ? "yes" : "NO");
  std::printf("node B's first turn restored node A's blocks from the remote tier: %s\n",
              r.node_b_restored_remote ? "yes" : "NO");
  std::printf("verdict: %s\n", r.pass() ? "PASS" : "FAIL");
}

// --nodes 2: the remote tier of the flags, or a local cluster started here
// (from the main thread, before any fork) and stopped on every return.
int RunNodes(const Flags& flags, const DemoOptions& demo) {
  DemoNodesOptions options;
  options.dir = demo.dir;
  options.turns = demo.turns;
  options.model = demo.model;
  const std::string& dir = demo.dir;
  std::string error = ApplyRemoteFlags(flags, &options.remote);
  if (!error.empty()) return UsageError(flags, error);
  const std::optional<uint64_t> timeout_s =
      flags.Has("turn-timeout-s") ? flags.GetCount("turn-timeout-s", &error) : 60;
  if (!timeout_s || *timeout_s < 1 || *timeout_s > 3600) {
    return UsageError(
        flags, error.empty() ? NotInRange(flags, "turn-timeout-s", "1..3600") : error);
  }
  options.turn_timeout_ms = static_cast<uint32_t>(*timeout_s * 1000);
  if (!flags.Has("remote-timeout-ms"))
    options.remote.remote_timeout_ms = kDemoRemoteTimeoutMs;
  const bool json = flags.GetBool("json");
  std::unique_ptr<LocalRedisCluster> cluster;
  if (options.remote.remote.empty()) {
    if (!LocalRedisCluster::Available()) {
      return ReportError(
          json, "prefixkv demo",
          "--nodes 2 needs a Redis Cluster: pass --remote "
          "redis://host:port[,host:port...], or install redis-server and "
          "redis-cli (Debian: apt-get install redis-server redis-tools) so "
          "the demo can start a local one",
          kExitUsage);
    }
    StatusOr<std::unique_ptr<LocalRedisCluster>> started =
        LocalRedisCluster::Start(LocalRedisClusterOptions{});
    if (!started.ok()) {
      return Failure(
          flags, "demo",
          "cannot start a local Redis Cluster: " + started.status().ToString());
    }
    cluster = std::move(*started);
    options.remote.remote = cluster->uri();
    std::fprintf(json ? stderr : stdout,
                 "started a local Redis Cluster (3 masters) at %s; stopped at the end\n",
                 options.remote.remote.c_str());
  }
  StatusOr<DemoNodesReport> report = RunDemoNodes(options);
  if (cluster != nullptr) cluster->Stop();
  if (!report.ok()) return Failure(flags, "demo", report.status().ToString());
  if (json) {
    PrintNodesJson(*report, options.remote.remote, cluster != nullptr);
  } else {
    PrintNodesTable(*report, dir, options.remote.remote);
  }
  return report->pass() ? kExitOk : kExitProblem;
}

std::vector<FlagSpec> DemoFlagSpecs() {
  std::vector<FlagSpec> specs = {
      {"data-dir", "parent of the demo's directory <D>/demo (wiped at start)", false,
       "./prefixkv-data"},
      {"turns", "conversation turns before the restart (1..64; 2..64 with --nodes 2)",
       false, "8"},
      {"json", "print one JSON object instead of the table", true, ""},
      {"model",
       "sliding: 6 of 8 layers with a sliding window; hybrid: window, recurrent and "
       "full-attention layers",
       false, "sliding"},
      {"nodes",
       "1: one process with a restart; 2: turns alternate between two node processes "
       "sharing a remote tier (no restart)",
       false, "1"},
      {"turn-timeout-s",
       "with --nodes 2: bound of one turn's node process; past it the process is killed "
       "and the demo fails",
       false, "60"}};
  for (FlagSpec& spec : RemoteFlagSpecs()) {
    if (spec.name == "remote") {
      spec.help =
          "with --nodes 2: the Redis Cluster the nodes share, "
          "redis://host:port[,host:port...]; default: a local one the demo starts and "
          "stops";
    } else if (spec.name == "remote-timeout-ms") {
      spec.help += " (the demo's default is higher than serve's)";
      spec.default_text = std::to_string(kDemoRemoteTimeoutMs);
    } else if (spec.name == "remote-write") {
      continue;  // always: every block is shared
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

int RunDemo(const std::vector<std::string>& args) {
  Flags flags(
      "prefixkv demo [--data-dir D] [--turns N] [--json] [--model sliding|hybrid] "
      "[--nodes 1|2] "
      "[--remote URI] [--remote-ttl S] [--remote-max-bytes B] "
      "[--remote-timeout-ms MS] [--turn-timeout-s S]",
      DemoFlagSpecs());
  std::string error;
  if (!flags.Parse(args, &error)) return UsageError(flags, error);
  if (flags.help_requested()) {
    std::printf("%s%s", kAbout, flags.HelpText().c_str());
    return 0;
  }
  std::optional<uint64_t> turns =
      flags.Has("turns") ? flags.GetCount("turns", &error) : 8;
  if (!turns || *turns < 1 || *turns > 64) {
    return UsageError(flags, error.empty() ? NotInRange(flags, "turns", "1..64") : error);
  }
  const std::string nodes = flags.GetString("nodes", "1");
  if (nodes != "1" && nodes != "2")
    return UsageError(flags, NotInRange(flags, "nodes", "1 or 2"));
  const std::string data_dir = flags.GetString("data-dir", "./prefixkv-data");
  // <D>/demo is wiped at start: `--data-dir "$DIR"` with DIR unset wiped the
  // working directory's demo/, a directory the demo never made.
  if (data_dir.empty()) {
    return UsageError(flags,
                      "--data-dir must name a directory (its demo/ is wiped at start; "
                      "an empty one would wipe ./demo)");
  }
  DemoOptions options;
  options.dir = (std::filesystem::path(data_dir) / "demo").string();
  options.turns = static_cast<int>(*turns);
  options.model = flags.GetString("model", "sliding");
  if (!DemoLayerKinds(options.model).ok())
    return UsageError(flags, NotInRange(flags, "model", "sliding or hybrid"));
  if (nodes == "2") {
    if (*turns < 2) return UsageError(flags, "--nodes 2 needs --turns 2..64");
    return RunNodes(flags, options);
  }
  std::vector<FlagSpec> nodes_only = RemoteFlagSpecs();
  nodes_only.push_back({"turn-timeout-s", "", false, ""});
  for (const FlagSpec& spec : nodes_only) {
    if (flags.Has(spec.name)) {
      return UsageError(flags, "--" + spec.name + " needs --nodes 2");
    }
  }
  StatusOr<DemoReport> report = RunDemoConversation(options);
  if (!report.ok()) return Failure(flags, "demo", report.status().ToString());
  if (flags.GetBool("json")) {
    PrintJson(*report);
  } else {
    PrintTable(*report, options.dir);
  }
  return report->parity && report->audit_ok ? kExitOk : kExitProblem;
}

}  // namespace

PKV_REGISTER_COMMAND(
    "demo",
    "multi-turn conversation restored from hot RAM and SSD, with a restart; --nodes 2: "
    "two nodes sharing a remote tier",
    RunDemo);

}  // namespace prefixkv::cli
