// `prefixkv bench SUITE ...`: the benchmark suites are the prefixkv-bench
// binary (tools/bench/), kept out of the product binary as RocksDB keeps
// db_bench beside ldb; this command runs the prefixkv-bench next to this
// binary with the same arguments, so its output and exit code are the suite's.
// Without it: a clear error and exit code 1.
#include "tools/cli/command.h"
#include "tools/cli/sibling_binary.h"

namespace prefixkv::cli {
namespace {

int RunBench(const std::vector<std::string>& args) {
  return ExecSibling("prefixkv bench", "prefixkv-bench", args);
}

}  // namespace

PKV_REGISTER_COMMAND("bench",
                     "benchmark suites with ratios against same-run limits (runs "
                     "prefixkv-bench)",
                     RunBench);

}  // namespace prefixkv::cli
