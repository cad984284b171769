// `prefixkv bench SUITE`: the dispatcher in front of the benchmark suites, each
// registered by its own file (PKV_REGISTER_BENCH in command.h), so a suite is
// added without touching this one. Every suite prints its figures as ratios to
// a limit measured in the same run on the same machine (memcpy, raw hashing,
// raw O_DIRECT I/O, Redis itself), because absolute numbers from a shared
// machine say little.
#include <cstdio>

#include "tools/cli/command.h"
#include "tools/cli/flags.h"

namespace prefixkv::cli {
namespace {

int RunBench(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::FILE* out = args.empty() ? stderr : stdout;
    std::fprintf(
        out,
        "usage: prefixkv bench SUITE [--json] [SUITE OPTIONS]\n\n"
        "Each suite measures a prefixkv path against the limit measured in the\n"
        "same run (memcpy, raw hashing, raw O_DIRECT I/O, ...) and prints ratios.\n\n"
        "suites:\n");
    for (const auto& [name, info] : BenchSuites()) {
      std::fprintf(out, "  %-10s %s\n", name.c_str(), info.summary.c_str());
    }
    return args.empty() ? 2 : 0;
  }
  auto it = BenchSuites().find(args[0]);
  if (it == BenchSuites().end()) {
    return ReportError(HasJsonArg(args), "prefixkv bench",
                       "unknown suite '" + args[0] + "' (see prefixkv bench --help)",
                       kExitUsage);
  }
  return it->second.run(std::vector<std::string>(args.begin() + 1, args.end()));
}

}  // namespace

PKV_REGISTER_COMMAND("bench", "benchmark suites with ratios against same-run limits",
                     RunBench);

}  // namespace prefixkv::cli
