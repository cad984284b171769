// `prefixkv bench server`: `prefixkv serve` against redis-server, both driven by
// redis-benchmark on loopback in the same run, for SET and GET of 4 KiB values
// (50 clients, pipeline 16) and 1 MiB values (16 clients, pipeline 4). The
// figures are ratios: ops/s of prefixkv over ops/s of redis-server.
//
// redis-server runs with its built-in default persistence (RDB snapshots, no
// AOF) in a temporary directory; prefixkv serve with its defaults (hot RAM tier,
// write-back SSD tier with a write-ahead log) in another.
#include <fcntl.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "tools/bench/bench_util.h"
#include "tools/bench/redis_benchmark.h"
#include "tools/bench/suite.h"
#include "tools/cli/flags.h"
#include "tools/cli/json.h"
#include "tools/cli/sibling_binary.h"

extern char** environ;

namespace prefixkv::cli {
namespace {

// One redis-benchmark workload.
struct Workload {
  const char* name;  // "4kib", "1mib"
  int value_bytes;
  int clients;
  int pipeline;
  int requests;  // per command (SET, then GET)
  int keyspace;  // distinct keys (-r)
};

struct Throughput {
  double set_ops = 0, get_ops = 0;
};

// A child process started with posix_spawn; its stdout optionally piped.
struct Child {
  pid_t pid = -1;
  FILE* out = nullptr;
};

Child Spawn(const std::vector<std::string>& argv, bool capture_stdout) {
  std::vector<char*> cargv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  // Server logs would interleave with the figures.
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  int fds[2] = {-1, -1};
  if (capture_stdout && pipe(fds) == 0) {
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&actions, fds[0]);
  } else {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  }
  Child child;
  if (posix_spawnp(&child.pid, cargv[0], &actions, nullptr, cargv.data(), environ) != 0) {
    child.pid = -1;
  }
  posix_spawn_file_actions_destroy(&actions);
  if (fds[1] >= 0) {
    close(fds[1]);
    child.out = fdopen(fds[0], "r");
  }
  return child;
}

void Terminate(Child& child) {
  if (child.pid <= 0) return;
  kill(child.pid, SIGTERM);
  int status = 0;
  waitpid(child.pid, &status, 0);
  if (child.out != nullptr) fclose(child.out);
  child = Child{};
}

// A port that was free a moment ago (redis-server needs a number up front).
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

// Waits (up to ~10 s) until a server on `port` answers PING.
bool WaitForPing(int port) {
  std::string cmd = "redis-cli -p " + std::to_string(port) + " ping 2>/dev/null";
  for (int i = 0; i < 200; ++i) {
    FILE* p = popen(cmd.c_str(), "r");
    char buf[64] = {0};
    bool pong = p != nullptr && fgets(buf, sizeof(buf), p) != nullptr &&
                std::string(buf).rfind("PONG", 0) == 0;
    if (p != nullptr) pclose(p);
    if (pong) return true;
    usleep(50 * 1000);
  }
  return false;
}

// Runs redis-benchmark for SET then GET; zero ops/s when it fails.
Throughput RunBenchmark(int port, const Workload& w) {
  const RedisBenchmarkOps ops = RunRedisBenchmark({.port = port,
                                                   .value_bytes = w.value_bytes,
                                                   .clients = w.clients,
                                                   .pipeline = w.pipeline,
                                                   .requests = w.requests,
                                                   .keyspace = w.keyspace});
  return Throughput{ops.set_ops, ops.get_ops};
}

struct Servers {
  Child prefixkv, redis;
  int prefixkv_port = -1, redis_port = -1;
};

bool StartServers(const std::filesystem::path& dir, int threads, Servers* s) {
  s->prefixkv = Spawn(
      {SiblingBinaryPath("prefixkv"), "serve", "--data-dir", (dir / "prefixkv").string(),
       "--port", "0", "--threads", std::to_string(threads), "--hot-capacity-bytes", "2G"},
      /*capture_stdout=*/true);
  char line[256] = {0};
  if (s->prefixkv.out == nullptr ||
      fgets(line, sizeof(line), s->prefixkv.out) == nullptr) {
    return false;
  }
  std::string l(line);  // "listening on 127.0.0.1:PORT"
  s->prefixkv_port = std::atoi(l.substr(l.rfind(':') + 1).c_str());
  s->redis_port = FreePort();
  std::filesystem::create_directories(dir / "redis");
  s->redis = Spawn({"redis-server", "--port", std::to_string(s->redis_port), "--bind",
                    "127.0.0.1", "--dir", (dir / "redis").string()},
                   /*capture_stdout=*/false);
  return s->redis.pid > 0 && WaitForPing(s->prefixkv_port) && WaitForPing(s->redis_port);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Per workload: the median over rounds of each figure. Each round runs both
// servers back to back (alternating which goes first), so a ratio compares
// measurements taken under the same machine load.
struct Figures {
  double get_ratio = 0, set_ratio = 0;
  Throughput pkv, redis;
};

Figures Measure(const Servers& s, const Workload& w, int rounds) {
  std::vector<double> get_ratio, set_ratio, pkv_get, pkv_set, redis_get, redis_set;
  for (int r = 0; r < rounds; ++r) {
    Throughput pkv, redis;
    if (r % 2 == 0) {
      pkv = RunBenchmark(s.prefixkv_port, w);
      redis = RunBenchmark(s.redis_port, w);
    } else {
      redis = RunBenchmark(s.redis_port, w);
      pkv = RunBenchmark(s.prefixkv_port, w);
    }
    get_ratio.push_back(redis.get_ops > 0 ? pkv.get_ops / redis.get_ops : 0.0);
    set_ratio.push_back(redis.set_ops > 0 ? pkv.set_ops / redis.set_ops : 0.0);
    pkv_get.push_back(pkv.get_ops);
    pkv_set.push_back(pkv.set_ops);
    redis_get.push_back(redis.get_ops);
    redis_set.push_back(redis.set_ops);
  }
  return Figures{Median(get_ratio), Median(set_ratio),
                 Throughput{Median(pkv_set), Median(pkv_get)},
                 Throughput{Median(redis_set), Median(redis_get)}};
}

void PrintJson(const Workload* workloads, const std::vector<Figures>& results,
               int rounds) {
  SuiteJson out("server");
  JsonWriter& j = out.j();
  j.Field("rounds", rounds);
  for (size_t i = 0; i < results.size(); ++i) {
    std::string n = workloads[i].name;
    const Figures& f = results[i];
    j.Field("get_" + n + "_ratio_vs_redis", f.get_ratio)
        .Field("set_" + n + "_ratio_vs_redis", f.set_ratio)
        .Field("prefixkv_get_" + n + "_ops_per_s", f.pkv.get_ops)
        .Field("prefixkv_set_" + n + "_ops_per_s", f.pkv.set_ops)
        .Field("redis_get_" + n + "_ops_per_s", f.redis.get_ops)
        .Field("redis_set_" + n + "_ops_per_s", f.redis.set_ops);
  }
  out.Print();
}

void PrintTable(const Workload* workloads, const std::vector<Figures>& results,
                int rounds) {
  std::printf(
      "server benchmark: prefixkv serve vs redis-server under redis-benchmark "
      "(median of %d rounds)\n",
      rounds);
  const char* goals[2][2] = {{">= 0.7", ">= 0.7"}, {">= 1.0", ">= 0.8"}};
  for (size_t i = 0; i < results.size(); ++i) {
    const Figures& f = results[i];
    std::printf("  GET %-5s %.2fx  (%.0f vs %.0f ops/s, goal %s)\n", workloads[i].name,
                f.get_ratio, f.pkv.get_ops, f.redis.get_ops, goals[i][0]);
    std::printf("  SET %-5s %.2fx  (%.0f vs %.0f ops/s, goal %s)\n", workloads[i].name,
                f.set_ratio, f.pkv.set_ops, f.redis.set_ops, goals[i][1]);
  }
}

int RunServerBench(const std::vector<std::string>& args) {
  Flags flags("prefixkv bench server [--json] [--threads N] [--rounds N]",
              {{"json", "print one JSON object", true, ""},
               {"threads", "I/O threads of prefixkv serve", false, "2"},
               {"rounds", "measurements per figure (median taken)", false, "5"}});
  if (std::optional<int> done = ParseSuiteFlags(flags, args)) return *done;
  std::optional<uint64_t> threads = ParseCount(flags, "threads", "2", 64);
  if (!threads) return UsageError(flags, NotInRange(flags, "threads", "1..64"));
  std::optional<uint64_t> rounds = ParseCount(flags, "rounds", "5", 50);
  if (!rounds) return UsageError(flags, NotInRange(flags, "rounds", "1..50"));
  if (std::system("command -v redis-server >/dev/null && command -v redis-benchmark "
                  ">/dev/null") != 0) {
    return Failure(flags, "bench server",
                   "needs redis-server and redis-benchmark "
                   "(Debian packages redis-server, redis-tools)");
  }
  char tmpl[] = "/tmp/prefixkv-bench-server-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return Failure(flags, "bench server", "mkdtemp failed");
  std::filesystem::path dir(tmpl);
  Servers servers;
  bool started = StartServers(dir, static_cast<int>(*threads), &servers);
  const Workload workloads[] = {{"4kib", 4096, 50, 16, 100000, 1000},
                                {"1mib", 1 << 20, 16, 4, 1500, 100}};
  std::vector<Figures> results;
  for (const Workload& w : workloads) {
    if (started) results.push_back(Measure(servers, w, static_cast<int>(*rounds)));
  }
  Terminate(servers.prefixkv);
  Terminate(servers.redis);
  std::filesystem::remove_all(dir);
  if (!started) return Failure(flags, "bench server", "could not start both servers");
  if (flags.GetBool("json")) {
    PrintJson(workloads, results, static_cast<int>(*rounds));
  } else {
    PrintTable(workloads, results, static_cast<int>(*rounds));
  }
  return 0;
}

}  // namespace

PKV_REGISTER_BENCH("server", "prefixkv serve vs redis-server under redis-benchmark",
                   RunServerBench);

}  // namespace prefixkv::cli
