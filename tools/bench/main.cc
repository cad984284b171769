// prefixkv-bench: the benchmark suites, a binary of their own beside `prefixkv`
// (as RocksDB keeps db_bench beside ldb), so the product binary carries no
// benchmark code. `prefixkv bench ...` runs this binary (tools/cli/bench.cc).
// Each suite registers itself from its own file (PKV_REGISTER_BENCH in
// suite.h) and prints its figures as ratios to a limit measured in the same
// run on the same machine (memcpy, raw hashing, raw O_DIRECT I/O, Redis
// itself), because absolute numbers from a shared machine say little. Exit
// codes are the `prefixkv` table (tools/cli/flags.h).
#include <cstdio>
#include <string>
#include <vector>

#include "prefixkv/version.h"
#include "tools/bench/suite.h"
#include "tools/cli/flags.h"

namespace prefixkv::cli {

std::map<std::string, BenchSuiteInfo>& BenchSuites() {
  static auto* m = new std::map<std::string, BenchSuiteInfo>();
  return *m;
}

namespace {

void PrintHelp(std::FILE* out) {
  std::fprintf(
      out,
      "prefixkv-bench %s: the prefixkv benchmark suites\n\n"
      "usage: prefixkv-bench SUITE [--json] [SUITE OPTIONS]\n"
      "       (also run as: prefixkv bench SUITE ...)\n\n"
      "Each suite measures a prefixkv path against the limit measured in the\n"
      "same run (memcpy, raw hashing, raw O_DIRECT I/O, ...) and prints ratios.\n\n"
      "suites:\n",
      PREFIXKV_VERSION_STRING);
  for (const auto& [name, info] : BenchSuites()) {
    std::fprintf(out, "  %-10s %s\n", name.c_str(), info.summary.c_str());
  }
  std::fprintf(out, "\n%swith --json (a suite that takes it) %s", kExitCodeHelp,
               kJsonFailureHelp);
}

int Run(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    PrintHelp(args.empty() ? stderr : stdout);
    return args.empty() ? kExitUsage : kExitOk;
  }
  auto it = BenchSuites().find(args[0]);
  if (it == BenchSuites().end()) {
    return ReportError(HasJsonArg(args), "prefixkv-bench",
                       "unknown suite '" + args[0] + "' (see prefixkv-bench --help)",
                       kExitUsage);
  }
  return it->second.run(std::vector<std::string>(args.begin() + 1, args.end()));
}

}  // namespace
}  // namespace prefixkv::cli

int main(int argc, char** argv) {
  using namespace prefixkv::cli;
  // Figures cut short by a full disk are a failure, not a success.
  return FinishOutput("prefixkv-bench", Run(argc, argv));
}
