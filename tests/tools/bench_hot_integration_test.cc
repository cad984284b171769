// `prefixkv bench hot --json` end to end: the default figures and one entry
// per eviction policy, each measured in the same run and compared with lru.
// Also `bench restore`'s model options and RestoreInto figures (a tiny chain).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "tests/tools/cli_json.h"
#include "tests/tools/data_dir_builder.h"

namespace prefixkv {
namespace {

TEST(BenchHot, EveryPolicyIsMeasuredAndComparedWithLru) {
  const testing::CliRun run = testing::RunCli("bench hot --json --repeats 1");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::string json = run.output.substr(run.output.find("{\"suite\":\"hot\""));
  EXPECT_GT(std::stod(testing::Value(json, "hit_ns_per_block")), 0);
  const std::vector<std::string> policies =
      testing::Objects(testing::Value(json, "policies"));
  ASSERT_EQ(policies.size(), 3u) << json;
  const char* names[] = {"\"lru\"", "\"leaf-lru\"", "\"chain\""};
  for (size_t i = 0; i < policies.size(); ++i) {
    const std::string& p = policies[i];
    EXPECT_EQ(testing::Value(p, "policy"), names[i]) << p;
    EXPECT_GT(std::stod(testing::Value(p, "hit_ns_per_block")), 0) << p;
    EXPECT_GT(std::stod(testing::Value(p, "get_ns_per_block")), 0) << p;
    EXPECT_GT(std::stod(testing::Value(p, "insert_evict_ops_per_s")), 0)
        << "not in steady state: " << p;
    EXPECT_GT(std::stod(testing::Value(p, "hit_ns_ratio_vs_lru")), 0) << p;
  }
  EXPECT_EQ(std::stod(testing::Value(policies[0], "hit_ns_ratio_vs_lru")), 1.0);
}

// `bench values`: each operation is timed (median within its range) and the
// GET hit is compared with the locked map's floor measured in the same run.
TEST(BenchValues, EveryOperationIsMeasuredAgainstTheFloor) {
  const testing::CliRun run = testing::RunCli("bench values --json --repeats 1");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::string json = run.output.substr(run.output.find("{\"suite\":\"values\""));
  for (const char* op : {"get_hit_ns", "get_miss_ns", "set_ns", "exists_ns", "limit_ns"}) {
    const double median = std::stod(testing::Value(json, op));
    EXPECT_GT(median, 0) << op << ": " << json;
    EXPECT_LE(std::stod(testing::Value(json, std::string(op) + "_min")), median) << op;
    EXPECT_GE(std::stod(testing::Value(json, std::string(op) + "_max")), median) << op;
  }
  EXPECT_NEAR(std::stod(testing::Value(json, "get_hit_ratio_vs_limit")),
              std::stod(testing::Value(json, "limit_ns")) /
                  std::stod(testing::Value(json, "get_hit_ns")),
              1e-3)
      << json;
}

TEST(BenchRestore, TheLlamaShapeRunsAndReportsRestoreIntoWithTimeToFirstLayer) {
  const testing::CliRun run =
      testing::RunCli("bench restore --json --repeats 1 --model llama3-8b --tokens 32");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::string json = run.output.substr(run.output.find("{\"suite\":\"restore\""));
  EXPECT_EQ(testing::Value(json, "model"), "\"llama3-8b\"");
  EXPECT_EQ(testing::Value(json, "layers"), "32");
  EXPECT_EQ(testing::Value(json, "blocks"), "2");
  EXPECT_EQ(testing::Value(json, "byte_identical"), "true");
  const double first = std::stod(testing::Value(json, "restore_into_first_layer_ms"));
  EXPECT_GT(first, 0);
  EXPECT_LE(first, std::stod(testing::Value(json, "restore_into_ms")));
  EXPECT_GT(std::stod(testing::Value(json, "restore_into_ratio_vs_memcpy_fresh_pages")),
            0);
  EXPECT_GT(std::stod(testing::Value(json, "ssd_restore_into_first_layer_ms")), 0);
  // The hybrid layout: windows and recurrent states restored from the tip,
  // byte for byte (Restore, SSD and RestoreInto).
  const testing::CliRun hybrid =
      testing::RunCli("bench restore --json --repeats 1 --model hybrid --tokens 512");
  ASSERT_EQ(hybrid.exit_code, 0) << hybrid.output;
  const std::string h =
      hybrid.output.substr(hybrid.output.find("{\"suite\":\"restore\""));
  EXPECT_EQ(testing::Value(h, "model"), "\"hybrid\"");
  EXPECT_EQ(testing::Value(h, "blocks"), "2");
  EXPECT_EQ(testing::Value(h, "byte_identical"), "true");
  for (const char* bad :
       {"--model gpt", "--tokens 100", "--model llama3-8b --tokens 0"}) {
    const testing::CliRun usage =
        testing::RunCli(std::string("bench restore --json ") + bad);
    EXPECT_EQ(usage.exit_code, 2) << bad << ": " << usage.output;
  }
}

// `bench scale` at a tiny size: every part runs, restores byte for byte,
// reports its figures against the limit of the same run and draws the
// index's SVG; bad sizes are usage errors.
TEST(BenchScale, EveryPartRunsSmallAndReportsItsFiguresAndGoals) {
  testing::TempDir dir;
  const std::string svg = (dir.path() / "index.svg").string();
  const testing::CliRun run = testing::RunCli(
      "bench scale --json --repeats 1 --tokens 64 --block-tokens 16,32 --index-blocks "
      "2500 --index-block-bytes 4000 --samples 50 --seconds 0.2 --conc-bytes 8M --dir " +
      dir.path().string() + " --svg " + svg);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::string json = run.output.substr(run.output.find("{\"suite\":\"scale\""));
  EXPECT_EQ(testing::Value(json, "byte_identical", json.rfind("\"byte_identical\"")),
            "true");
  const std::vector<std::string> llama = testing::Objects(testing::Value(json, "llama"));
  ASSERT_EQ(llama.size(), 2u) << json;
  for (const std::string& l : llama) {
    EXPECT_EQ(testing::Value(l, "byte_identical"), "true") << l;
    EXPECT_EQ(testing::Count(l, "bytes"), 64u * 128 * 1024) << l;
    EXPECT_GT(std::stod(testing::Value(l, "hot_ratio_vs_memcpy")), 0) << l;
    for (const std::string kind : {"fresh_engine", "warm_arena", "no_promotion"}) {
      const std::string cold = "cold_" + kind;
      EXPECT_GT(std::stod(testing::Value(l, cold + "_ratio_vs_raw_read")), 0) << l;
      EXPECT_LE(std::stod(testing::Value(l, cold + "_first_layer_ms")),
                std::stod(testing::Value(l, cold + "_ms")))
          << l;
    }
    EXPECT_GE(testing::Count(l, "segment_bytes"), 64u * 128 * 1024) << l;
  }
  EXPECT_EQ(testing::Value(llama[1], "blocks"), "2");
  const std::string index = testing::Value(json, "index");
  const std::vector<std::string> steps = testing::Objects(testing::Value(index, "steps"));
  ASSERT_EQ(steps.size(), 2u) << index;
  EXPECT_EQ(testing::Count(steps[0], "blocks"), 1000u);
  EXPECT_EQ(testing::Count(steps[1], "blocks"), 2500u);
  for (const std::string& s : steps) {
    EXPECT_GT(testing::Count(s, "heap_bytes"), 0u) << s;
    EXPECT_GT(testing::Count(s, "metadata_disk_bytes"), 0u) << s;
    EXPECT_GE(testing::Count(s, "segment_disk_bytes"),
              4096u * testing::Count(s, "blocks"));
    EXPECT_LE(std::stod(testing::Value(s, "get_p50_us")),
              std::stod(testing::Value(s, "get_p99_us")))
        << s;
    EXPECT_GT(std::stod(testing::Value(s, "store_blocks_per_s")), 0) << s;
  }
  EXPECT_EQ(testing::Value(index, "goal_open_met"), "false");  // not 1M blocks
  const std::string conc = testing::Value(json, "concurrency");
  EXPECT_GT(testing::Count(conc, "restores"), 0u) << conc;
  EXPECT_GT(std::stod(testing::Value(conc, "write_mb_per_s")), 0) << conc;
  EXPECT_GT(std::stod(testing::Value(conc, "raw_write_mb_per_s")), 0) << conc;
  EXPECT_LE(std::stod(testing::Value(conc, "p50_ms")),
            std::stod(testing::Value(conc, "p99_ms")));
  std::ifstream in(svg);
  const std::string plot((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(plot.find("<svg"), std::string::npos);
  EXPECT_NE(plot.find("restore read p99"), std::string::npos);
  for (const char* bad : {"--parts disk", "--tokens 64 --block-tokens 7", "--seconds 0",
                          "--index-block-bytes 4"}) {
    const testing::CliRun usage =
        testing::RunCli(std::string("bench scale --json ") + bad);
    EXPECT_EQ(usage.exit_code, 2) << bad << ": " << usage.output;
  }
  // The scratch directory (run-PID under --dir) is gone; only the plot is left.
  for (const auto& e : std::filesystem::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().filename(), "index.svg");
}

// `prefixkv bench` runs the prefixkv-bench binary beside it; a `prefixkv`
// copied alone says so (exit 1, the JSON error line with --json), it does not
// crash or run anything else.
TEST(BenchCli, WithoutPrefixkvBenchBesideItIsAClearError) {
  testing::TempDir dir;
  const std::filesystem::path alone = dir.path() / "prefixkv";
  std::filesystem::copy_file(PREFIXKV_CLI, alone);
  const testing::CliRun run =
      testing::RunCliWith("bench hot --json --repeats 1", "2>&1", alone.string());
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("{\"ok\":false"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("prefixkv bench: prefixkv-bench not found next to this "
                            "binary (" +
                            (dir.path() / "prefixkv-bench").string()),
            std::string::npos)
      << run.output;
}

// ... and with it, the suite's own exit codes and output come through.
TEST(BenchCli, RunsTheSiblingWithTheSameArguments) {
  const testing::CliRun help = testing::RunCli("bench --help");
  EXPECT_EQ(help.exit_code, 0) << help.output;
  EXPECT_NE(help.output.find("usage: prefixkv-bench SUITE"), std::string::npos)
      << help.output;
  EXPECT_NE(help.output.find("  hot "), std::string::npos) << help.output;
  EXPECT_EQ(testing::RunCli("bench").exit_code, 2);
}

}  // namespace
}  // namespace prefixkv
