// Subcommand registration for the `prefixkv` binary.
//
// Each tools/cli/*.cc file registers its subcommand with PKV_REGISTER_COMMAND;
// main.cc dispatches on the first argument. Exit codes: 0 success, 1 the
// command ran and found a problem (or failed), 2 usage error (the table and
// the reporters that keep it are in flags.h).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace prefixkv::cli {

using CommandFn = std::function<int(const std::vector<std::string>& args)>;

struct CommandInfo {
  std::string summary;  // one line for `prefixkv --help`
  CommandFn run;        // receives the arguments after the subcommand name
};

std::map<std::string, CommandInfo>& Commands();

struct CommandRegistrar {
  CommandRegistrar(const std::string& name, std::string summary, CommandFn fn) {
    Commands()[name] = CommandInfo{std::move(summary), std::move(fn)};
  }
};

}  // namespace prefixkv::cli

#define PKV_CLI_CONCAT_INNER(a, b) a##b
#define PKV_CLI_CONCAT(a, b) PKV_CLI_CONCAT_INNER(a, b)
#define PKV_REGISTER_COMMAND(name, summary, fn)                                \
  static ::prefixkv::cli::CommandRegistrar PKV_CLI_CONCAT(pkv_cmd_, __LINE__)( \
      name, summary, fn)
