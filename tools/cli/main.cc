// prefixkv: the command-line entry point. Each subcommand registers itself
// from its own file (PKV_REGISTER_COMMAND in command.h) into the tables kept
// here, so main only looks the name up and runs it, and the tools stay thin
// binaries over the library. The tables are function-local statics, so the
// other files' registrations (static initializers) find them constructed
// whatever the link order; they are never destroyed, so nothing runs at exit.
#include <cstdio>
#include <string>
#include <vector>

#include "prefixkv/version.h"
#include "tools/cli/command.h"

namespace prefixkv::cli {

std::map<std::string, CommandInfo>& Commands() {
  static auto* m = new std::map<std::string, CommandInfo>();
  return *m;
}

std::map<std::string, CommandInfo>& BenchSuites() {
  static auto* m = new std::map<std::string, CommandInfo>();
  return *m;
}

namespace {

void PrintHelp(FILE* out) {
  std::fprintf(
      out,
      "prefixkv: a paged prefix-cache storage engine for LLM inference\n\n"
      "usage: prefixkv COMMAND [OPTIONS]   (prefixkv COMMAND --help for details)\n\n"
      "commands:\n");
  for (const auto& [name, info] : Commands()) {
    std::fprintf(out, "  %-10s %s\n", name.c_str(), info.summary.c_str());
  }
}

}  // namespace
}  // namespace prefixkv::cli

int main(int argc, char** argv) {
  using namespace prefixkv::cli;
  if (argc < 2) {
    PrintHelp(stderr);
    return 2;
  }
  std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    PrintHelp(stdout);
    return 0;
  }
  if (name == "--version" || name == "version") {
    if (argc > 2) {
      std::fprintf(stderr, "prefixkv: %s takes no arguments\n", name.c_str());
      return 2;
    }
    std::printf("prefixkv %s\n", PREFIXKV_VERSION_STRING);
    return 0;
  }
  auto it = Commands().find(name);
  if (it == Commands().end()) {
    std::fprintf(stderr, "prefixkv: unknown command '%s'\n\n", name.c_str());
    PrintHelp(stderr);
    return 2;
  }
  std::vector<std::string> args(argv + 2, argv + argc);
  return it->second.run(args);
}
