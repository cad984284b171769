// LocalRedisCluster: a throwaway Redis Cluster of N masters on 127.0.0.1, for
// tests and for `prefixkv demo` when no --remote is given. It runs Debian's
// redis-server (one child process per master, cluster mode, no persistence)
// on free loopback ports, joins them with `redis-cli --cluster create`, and
// waits until every node reports cluster_state:ok with all 16384 slots.
//
// Every step is bounded in time (start_timeout_ms overall); a failure names
// the step and ends with the tail of the log. Stop() (and the destructor)
// sends SIGTERM, then SIGKILL after a bounded wait, reaps every child and
// removes the work directory. The children also get SIGKILL when the thread
// that started them exits (PR_SET_PDEATHSIG), so a crashed test leaves no
// server behind: start the cluster from a thread that outlives it (the main
// thread, a test's SetUpTestSuite).
//
// Not thread-safe: one thread starts, kills and stops a cluster.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "prefixkv/status.h"

namespace prefixkv {

struct LocalRedisClusterOptions {
  // Masters (no replicas). A cluster needs at least 3.
  int masters = 3;
  // False: `masters` standalone servers (no cluster mode; at least 1), e.g.
  // stand-ins for nodes whose event streams a test feeds with XADD.
  bool cluster = true;
  // Per node maxmemory with maxmemory-policy allkeys-lru; 0: no limit.
  uint64_t maxmemory_bytes_per_node = 0;
  // Parent of the cluster's own fresh directory (nodes-*.conf, redis.log);
  // empty: $TMPDIR or /tmp. Only the fresh directory is removed on Stop().
  std::string work_dir;
  // Progress lines ("redis cluster: 3 masters on 127.0.0.1:31000,...");
  // empty: silent.
  std::function<void(std::string_view)> log;
  // Bound of Start() in all (ports, servers up, create, slots agreed).
  uint32_t start_timeout_ms = 20000;
};

class LocalRedisCluster {
 public:
  // Whether redis-server and redis-cli are installed (on PATH or /usr/bin).
  static bool Available();

  // Starts the cluster. NotSupported when redis-server or redis-cli is
  // missing, Unavailable when a step did not finish in time, IOError when a
  // process could not be started (each with the log's tail).
  static StatusOr<std::unique_ptr<LocalRedisCluster>> Start(
      const LocalRedisClusterOptions& options);

  ~LocalRedisCluster();
  LocalRedisCluster(const LocalRedisCluster&) = delete;
  LocalRedisCluster& operator=(const LocalRedisCluster&) = delete;

  // "127.0.0.1:p1,127.0.0.1:p2,..." and "redis://" + seeds().
  std::string seeds() const;
  std::string uri() const { return "redis://" + seeds(); }
  const std::vector<int>& ports() const { return ports_; }
  // Process id of master `i`, -1 once killed or stopped.
  pid_t pid(int i) const { return pids_[i]; }
  const std::string& dir() const { return dir_; }

  // SIGKILLs master `i` and reaps it (a crash, for fault tests).
  void KillMaster(int i);
  // SIGKILLs master `i` and starts it again on its port, empty (no
  // persistence): its cluster config (nodes-<port>.conf) keeps its node id
  // and slots, so it serves them again without their keys, as a master
  // restarted without persistence does. Waits until every node reports
  // cluster_state:ok (start_timeout_ms).
  Status RestartMasterEmpty(int i);
  // Starts one more server on a free port, joins it to the cluster as a
  // replica of master `i` and waits until its copy is in sync
  // (start_timeout_ms); its index into ports() and pid().
  StatusOr<int> AddReplica(int i);
  // Stops every server (SIGTERM, SIGKILL after 2 s), reaps them and removes
  // dir(). Idempotent.
  void Stop();

 private:
  explicit LocalRedisCluster(LocalRedisClusterOptions options)
      : options_(std::move(options)) {}
  Status Launch(uint64_t deadline_nanos);
  // On `port`, or on a free port picked at random when it is -1.
  Status StartServer(int i, uint64_t deadline_nanos, int port = -1);
  Status CreateCluster(uint64_t deadline_nanos);
  // Until every node says cluster_state:ok with 16384 slots and knows the
  // others (ports_.size() nodes).
  Status WaitUntilAgreed(uint64_t deadline_nanos);
  // Until `probe` answers true, polled; Unavailable naming `what` past the deadline.
  Status WaitFor(const std::function<bool()>& probe, uint64_t deadline_nanos,
                 const std::string& what);
  // `what` failed: the status with the log's last lines.
  Status Failed(StatusCode code, const std::string& what) const;
  void Log(const std::string& line) const;

  LocalRedisClusterOptions options_;
  std::string dir_;
  std::string log_path_;
  std::vector<int> ports_;
  std::vector<pid_t> pids_;
};

}  // namespace prefixkv
