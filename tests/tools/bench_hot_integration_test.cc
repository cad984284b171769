// `prefixkv bench hot --json` end to end: the default figures and one entry
// per eviction policy, each measured in the same run and compared with lru.
// Also `bench restore`'s model options and RestoreInto figures (a tiny chain).
#include <gtest/gtest.h>

#include <filesystem>
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
