// RunRedisBenchmark (redis_benchmark.h): runs Debian's redis-benchmark with
// --csv -q and reads its SET and GET figures, the same-run limit the server and
// remote bench suites compare against. A missing tool or unreadable output
// leaves the figures at zero, and each suite checks for that before it divides
// (the remote suite fails with Unavailable, the server suite prints no ratio).
#include "tools/bench/redis_benchmark.h"

#include <cstdio>
#include <cstdlib>

namespace prefixkv::cli {

RedisBenchmarkOps RunRedisBenchmark(const RedisBenchmarkRun& run) {
  std::string cmd =
      "redis-benchmark -h " + run.host + " -p " + std::to_string(run.port) +
      (run.cluster ? " --cluster" : "") + " -t " + run.tests + " --csv -q -d " +
      std::to_string(run.value_bytes) + " -c " + std::to_string(run.clients) + " -P " +
      std::to_string(run.pipeline) + " -n " + std::to_string(run.requests) +
      (run.keyspace > 0 ? " -r " + std::to_string(run.keyspace) : "") + " 2>/dev/null";
  RedisBenchmarkOps t;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return t;
  char line[512];
  while (fgets(line, sizeof(line), p) != nullptr) {
    // "SET","123456.78",...
    std::string s(line);
    double* target = s.rfind("\"SET\"", 0) == 0   ? &t.set_ops
                     : s.rfind("\"GET\"", 0) == 0 ? &t.get_ops
                                                  : nullptr;
    if (target != nullptr && s.size() > 7) *target = std::atof(s.c_str() + 7);
  }
  pclose(p);
  return t;
}

}  // namespace prefixkv::cli
