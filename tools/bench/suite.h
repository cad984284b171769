// Suite registration for the `prefixkv-bench` binary (tools/bench/main.cc),
// as tools/cli/command.h does for the `prefixkv` subcommands: each
// tools/bench/bench_*.cc file registers its suite with PKV_REGISTER_BENCH, so
// a suite is added without touching the dispatcher. Exit codes are the
// `prefixkv` table (tools/cli/flags.h).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace prefixkv::cli {

using BenchFn = std::function<int(const std::vector<std::string>& args)>;

struct BenchSuiteInfo {
  std::string summary;  // one line for `prefixkv-bench --help`
  BenchFn run;          // receives the arguments after the suite name
};

// The registered suites by name (defined in main.cc; never destroyed).
std::map<std::string, BenchSuiteInfo>& BenchSuites();

struct BenchRegistrar {
  BenchRegistrar(const std::string& name, std::string summary, BenchFn fn) {
    BenchSuites()[name] = BenchSuiteInfo{std::move(summary), std::move(fn)};
  }
};

}  // namespace prefixkv::cli

#define PKV_BENCH_CONCAT_INNER(a, b) a##b
#define PKV_BENCH_CONCAT(a, b) PKV_BENCH_CONCAT_INNER(a, b)
#define PKV_REGISTER_BENCH(name, summary, fn)                                    \
  static ::prefixkv::cli::BenchRegistrar PKV_BENCH_CONCAT(pkv_bench_, __LINE__)( \
      name, summary, fn)
