// Runs Debian's redis-benchmark (package redis-tools) and reads its CSV
// figures: the same-run limit of the `prefixkv bench` suites that compare
// against Redis (server: a single redis-server; remote: a Redis Cluster).
#pragma once

#include <string>

namespace prefixkv::cli {

// One redis-benchmark invocation: `-t tests -d value_bytes -c clients
// -P pipeline -n requests -r keyspace` against host:port (with --cluster,
// any master of the cluster: redis-benchmark spreads its clients over the
// masters, each client on keys with its master's {hash tag}).
struct RedisBenchmarkRun {
  std::string host = "127.0.0.1";
  int port = 0;
  bool cluster = false;
  std::string tests = "set,get";  // -t, run in this order
  int value_bytes = 3;
  int clients = 50;
  int pipeline = 1;
  int requests = 100000;  // per test
  int keyspace = 0;       // -r; 0: one key
};

// Requests per second of each test; zero for a test that did not run or
// when redis-benchmark failed.
struct RedisBenchmarkOps {
  double set_ops = 0, get_ops = 0;
};

RedisBenchmarkOps RunRedisBenchmark(const RedisBenchmarkRun& run);

}  // namespace prefixkv::cli
