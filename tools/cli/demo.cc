// `prefixkv demo`: the end-to-end demo (issue 7). A multi-turn conversation on
// the reference model with sliding-window layers, served from a PrefixCache
// over a small hot tier that spills to SSD, then a restart from the data
// directory, a token parity check against stateless decode and an audit.
// The work itself is in demo_conversation.cc; this file is flags and output.
#include <cstdio>
#include <filesystem>
#include <string>

#include "tools/cli/command.h"
#include "tools/cli/demo_conversation.h"
#include "tools/cli/flags.h"
#include "tools/cli/json.h"

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
    "Exit 0 only when parity and the audit hold.\n\n";

void WriteTurn(JsonWriter& w, const DemoTurn& t) {
  w.BeginObject()
      .Field("prompt_tokens", t.prompt_tokens)
      .Field("restored_hot_tokens", t.restored_hot_tokens)
      .Field("restored_ssd_tokens", t.restored_ssd_tokens)
      .Field("computed_tokens", t.computed_tokens)
      .Field("new_tokens", t.new_tokens)
      .Field("seconds", t.seconds)
      .Field("parity", t.parity)
      .EndObject();
}

void PrintJson(const DemoReport& r) {
  JsonWriter w;
  w.BeginObject().Field("block_tokens", static_cast<uint64_t>(r.block_tokens));
  w.Field("hot_capacity_bytes", r.hot_capacity_bytes)
      .Field("hot_evictions", r.hot_evictions);
  w.Key("turns").BeginArray();
  for (const DemoTurn& t : r.turns) WriteTurn(w, t);
  w.EndArray();
  w.Key("restart");
  WriteTurn(w, r.restart);
  w.Field("parity", r.parity).Field("audit_ok", r.audit_ok);
  w.Key("audit_findings").BeginArray();
  for (const std::string& f : r.audit_findings) w.String(f);
  w.EndArray().EndObject();
  std::printf("%s\n", w.str().c_str());
}

void PrintRow(const std::string& label, const DemoTurn& t) {
  std::printf("%-8s %7llu %5llu %9llu %9llu %9llu %9.3f  %s\n", label.c_str(),
              static_cast<unsigned long long>(t.prompt_tokens),
              static_cast<unsigned long long>(t.new_tokens),
              static_cast<unsigned long long>(t.restored_hot_tokens),
              static_cast<unsigned long long>(t.restored_ssd_tokens),
              static_cast<unsigned long long>(t.computed_tokens), t.seconds,
              t.parity ? "ok" : "MISMATCH");
}

void PrintTable(const DemoReport& r, const std::string& dir) {
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
  std::printf("\ntoken parity with stateless greedy decode: %s\n",
              r.parity ? "yes, every turn" : "NO");
  std::printf("audit (hot budget, SSD tier, orphans): %s\n",
              r.audit_ok ? "clean" : "FINDINGS");
  for (const std::string& f : r.audit_findings) std::printf("  %s\n", f.c_str());
  std::printf("verdict: %s\n", r.parity && r.audit_ok ? "PASS" : "FAIL");
}

int RunDemo(const std::vector<std::string>& args) {
  Flags flags("prefixkv demo [--data-dir D] [--turns N] [--json]",
              {{"data-dir", "parent of the demo's directory <D>/demo (wiped at start)",
                false, "./prefixkv-data"},
               {"turns", "conversation turns before the restart (1..64)", false, "8"},
               {"json", "print one JSON object instead of the table", true, ""}});
  std::string error;
  if (!flags.Parse(args, &error)) return UsageError(flags, error);
  if (flags.help_requested()) {
    std::printf("%s%s", kAbout, flags.HelpText().c_str());
    return 0;
  }
  std::optional<uint64_t> turns = flags.Has("turns") ? flags.GetSize("turns", &error) : 8;
  if (!turns || *turns < 1 || *turns > 64) {
    return UsageError(flags, error.empty() ? "--turns must be 1..64" : error);
  }
  DemoOptions options;
  options.dir =
      (std::filesystem::path(flags.GetString("data-dir", "./prefixkv-data")) / "demo")
          .string();
  options.turns = static_cast<int>(*turns);
  StatusOr<DemoReport> report = RunDemoConversation(options);
  if (!report.ok()) {
    std::fprintf(stderr, "demo failed: %s\n", report.status().ToString().c_str());
    return 1;
  }
  if (flags.GetBool("json")) {
    PrintJson(*report);
  } else {
    PrintTable(*report, options.dir);
  }
  return report->parity && report->audit_ok ? 0 : 1;
}

}  // namespace

PKV_REGISTER_COMMAND(
    "demo", "multi-turn conversation restored from hot RAM and SSD, with a restart",
    RunDemo);

}  // namespace prefixkv::cli
