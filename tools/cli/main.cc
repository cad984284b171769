// prefixkv: the command-line entry point. Each subcommand registers itself
// from its own file (PKV_REGISTER_COMMAND in command.h) into the tables kept
// here (the benchmark suites are the prefixkv-bench binary, tools/bench/),
// so main only looks the name up and runs it, and the tools stay thin
// binaries over the library. The tables are function-local statics, so the
// other files' registrations (static initializers) find them constructed
// whatever the link order; they are never destroyed, so nothing runs at exit.
#include <cstdio>
#include <string>
#include <vector>

#include "prefixkv/version.h"
#include "tools/cli/command.h"
#include "tools/cli/flags.h"

namespace prefixkv::cli {

std::map<std::string, CommandInfo>& Commands() {
  static auto* m = new std::map<std::string, CommandInfo>();
  return *m;
}

namespace {

void PrintHelp(FILE* out) {
  std::fprintf(
      out,
      "prefixkv %s: a paged prefix-cache storage engine for LLM inference\n\n"
      "usage: prefixkv COMMAND [OPTIONS]   (prefixkv COMMAND --help for details)\n"
      "       prefixkv --version\n\n"
      "commands:\n",
      PREFIXKV_VERSION_STRING);
  for (const auto& [name, info] : Commands()) {
    std::fprintf(out, "  %-12s %s\n", name.c_str(), info.summary.c_str());
  }
  std::fprintf(out, "\n%swith --json (a command that takes it) %s", kExitCodeHelp,
               kJsonFailureHelp);
}

int Run(int argc, char** argv) {
  if (argc < 2) {
    PrintHelp(stderr);
    return kExitUsage;
  }
  std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    if (argc == 2) {
      PrintHelp(stdout);
      return kExitOk;
    }
    // `prefixkv help COMMAND` is `prefixkv COMMAND --help`.
    auto command = Commands().find(argv[2]);
    if (name != "help" || argc > 3 || command == Commands().end()) {
      return ReportError(false, "prefixkv",
                         name + " takes at most one argument, a command name",
                         kExitUsage);
    }
    return command->second.run({"--help"});
  }
  if (name == "--version" || name == "version") {
    if (argc > 2) {
      return ReportError(false, "prefixkv", name + " takes no arguments", kExitUsage);
    }
    std::printf("prefixkv %s\n", PREFIXKV_VERSION_STRING);
    return kExitOk;
  }
  std::vector<std::string> args(argv + 2, argv + argc);
  auto it = Commands().find(name);
  if (it == Commands().end()) {
    ReportError(HasJsonArg(args), "prefixkv", "unknown command '" + name + "'",
                kExitUsage);
    PrintHelp(stderr);
    return kExitUsage;
  }
  return it->second.run(args);
}

}  // namespace
}  // namespace prefixkv::cli

int main(int argc, char** argv) {
  using namespace prefixkv::cli;
  // A report cut short by a full disk is a failure, not a success.
  return FinishOutput("prefixkv", Run(argc, argv));
}
