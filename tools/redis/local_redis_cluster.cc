// LocalRedisCluster: redis-server children on loopback ports, joined by
// redis-cli --cluster create (local_redis_cluster.h).
#include "tools/redis/local_redis_cluster.h"

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "prefixkv/clock.h"

namespace prefixkv {
namespace {

constexpr int kBusPortOffset = 10000;  // Redis Cluster's bus: port + 10000
constexpr uint64_t kMillis = 1000000;

uint64_t Now() { return Clock::System()->NowNanos(); }
void Pause() { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }

// The program's path on $PATH or in /usr/bin; "" when absent.
std::string FindProgram(const std::string& name) {
  std::string path = getenv("PATH") != nullptr ? getenv("PATH") : "";
  path += ":/usr/bin";
  std::stringstream dirs(path);
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (dir.empty()) continue;
    const std::string candidate = dir + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

bool LoopbackPortFree(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool free = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return free;
}

// A port p with p and p + 10000 free on 127.0.0.1, not in `taken`.
int PickPort(const std::vector<int>& taken) {
  static std::mt19937 random(static_cast<uint32_t>(getpid() ^ Now()));
  std::uniform_int_distribution<int> pick(20000, 55000 - 1);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const int port = pick(random);
    if (std::find(taken.begin(), taken.end(), port) != taken.end()) continue;
    if (LoopbackPortFree(port) && LoopbackPortFree(port + kBusPortOffset)) return port;
  }
  return -1;
}

// fork + exec with stdout and stderr appended to `log_fd`; -1 on failure. The
// child dies with the thread that started it (PR_SET_PDEATHSIG).
pid_t Spawn(const std::vector<std::string>& args, int log_fd) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid != 0) return pid;
  // Child: async-signal-safe calls only until exec.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);
  dup2(log_fd, STDOUT_FILENO);
  dup2(log_fd, STDERR_FILENO);
  execv(argv[0], argv.data());
  _exit(127);
}

// A reply to `command` from 127.0.0.1:`port` as text ("" when none).
std::string Ask(int port, const char* command) {
  timeval tv{0, 200000};
  redisContext* c = redisConnectWithTimeout("127.0.0.1", port, tv);
  std::string out;
  if (c != nullptr && c->err == 0) {
    redisSetTimeout(c, tv);
    auto* reply = static_cast<redisReply*>(redisCommand(c, command));
    if (reply != nullptr && reply->str != nullptr) out.assign(reply->str, reply->len);
    if (reply != nullptr) freeReplyObject(reply);
  }
  if (c != nullptr) redisFree(c);
  return out;
}

// Waits for `pid` to exit until `deadline`; its exit status, or -1.
int WaitExit(pid_t pid, uint64_t deadline) {
  while (true) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    if (Now() >= deadline) return -1;
    Pause();
  }
}

}  // namespace

bool LocalRedisCluster::Available() {
  return !FindProgram("redis-server").empty() && !FindProgram("redis-cli").empty();
}

StatusOr<std::unique_ptr<LocalRedisCluster>> LocalRedisCluster::Start(
    const LocalRedisClusterOptions& options) {
  if (!Available()) {
    return Status::NotSupported(
        "redis-server and redis-cli are needed for a local "
        "Redis Cluster (Debian: apt-get install redis-server)");
  }
  if (options.masters < (options.cluster ? 3 : 1)) {
    return Status::InvalidArgument(options.cluster
                                       ? "a Redis Cluster needs at least 3 masters"
                                       : "at least 1 server");
  }
  std::unique_ptr<LocalRedisCluster> cluster(new LocalRedisCluster(options));
  const char* tmp = getenv("TMPDIR");
  std::string parent = !options.work_dir.empty() ? options.work_dir
                       : tmp != nullptr          ? tmp
                                                 : "/tmp";
  std::string templ = parent + "/prefixkv-redis-XXXXXX";
  if (mkdtemp(templ.data()) == nullptr) {
    return Status::IOError("cannot create a directory under " + parent);
  }
  cluster->dir_ = templ;
  cluster->log_path_ = templ + "/redis.log";
  PKV_RETURN_IF_ERROR(
      cluster->Launch(Now() + uint64_t{options.start_timeout_ms} * kMillis));
  cluster->Log("redis cluster: " + std::to_string(options.masters) + " masters on " +
               cluster->seeds() + " (log " + cluster->log_path_ + ")");
  return cluster;
}

Status LocalRedisCluster::Launch(uint64_t deadline) {
  for (int i = 0; i < options_.masters; ++i) {
    ports_.push_back(-1);
    pids_.push_back(-1);
    PKV_RETURN_IF_ERROR(StartServer(i, deadline));
  }
  if (!options_.cluster) return Status::OK();
  PKV_RETURN_IF_ERROR(CreateCluster(deadline));
  return WaitUntilAgreed(deadline);
}

Status LocalRedisCluster::StartServer(int i, uint64_t deadline, int fixed_port) {
  const std::string server = FindProgram("redis-server");
  const int log_fd =
      open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return Status::IOError("cannot open " + log_path_);
  // A port picked free may be taken before the server binds it (another test
  // starting its cluster): the server exits and another port is tried.
  for (int attempt = 0; attempt < 5 && Now() < deadline; ++attempt) {
    const int port = fixed_port > 0 ? fixed_port : PickPort(ports_);
    if (port < 0) break;
    const std::string p = std::to_string(port);
    std::vector<std::string> args = {server,      "--port",       p,    "--bind",
                                     "127.0.0.1", "--dir",        dir_, "--save",
                                     "",          "--appendonly", "no", "--daemonize",
                                     "no",        "--logfile",    ""};
    if (options_.cluster) {
      args.insert(
          args.end(),
          {"--cluster-enabled", "yes", "--cluster-config-file", "nodes-" + p + ".conf",
           // A dead master loses its own slots only; the others keep serving.
           "--cluster-require-full-coverage", "no", "--cluster-node-timeout", "5000"});
    }
    if (options_.maxmemory_bytes_per_node > 0) {
      args.insert(args.end(),
                  {"--maxmemory", std::to_string(options_.maxmemory_bytes_per_node),
                   "--maxmemory-policy", "allkeys-lru"});
    }
    const pid_t pid = Spawn(args, log_fd);
    if (pid < 0) break;
    pids_[i] = pid;
    ports_[i] = port;
    while (Now() < deadline) {
      if (Ask(port, "PING") == "PONG") {
        close(log_fd);
        return Status::OK();
      }
      int status;
      if (waitpid(pid, &status, WNOHANG) == pid) break;  // exited: port taken?
      Pause();
    }
    if (kill(pid, 0) == 0) {  // still running but no PONG before the deadline
      close(log_fd);
      return Failed(StatusCode::kUnavailable,
                    "redis-server on port " + p + " did not answer PING in time");
    }
    pids_[i] = -1;
    ports_[i] = -1;
  }
  close(log_fd);
  return Failed(StatusCode::kIOError,
                "redis-server master " + std::to_string(i) + " did not start");
}

Status LocalRedisCluster::CreateCluster(uint64_t deadline) {
  std::vector<std::string> args = {FindProgram("redis-cli"), "--cluster", "create"};
  for (int port : ports_) args.push_back("127.0.0.1:" + std::to_string(port));
  args.insert(args.end(), {"--cluster-replicas", "0", "--cluster-yes"});
  const int log_fd =
      open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return Status::IOError("cannot open " + log_path_);
  const pid_t pid = Spawn(args, log_fd);
  close(log_fd);
  if (pid < 0) return Failed(StatusCode::kIOError, "cannot run redis-cli");
  const int status = WaitExit(pid, deadline);
  if (status == -1) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    return Failed(StatusCode::kUnavailable, "redis-cli --cluster create did not finish");
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Failed(StatusCode::kIOError, "redis-cli --cluster create failed");
  }
  return Status::OK();
}

Status LocalRedisCluster::WaitUntilAgreed(uint64_t deadline) {
  const std::string known = "cluster_known_nodes:" + std::to_string(ports_.size());
  while (true) {
    bool agreed = true;
    for (size_t i = 0; i < ports_.size(); ++i) {
      if (pids_[i] <= 0) continue;  // killed: the others still know it
      const std::string info = Ask(ports_[i], "CLUSTER INFO");
      agreed = agreed && info.find("cluster_state:ok") != std::string::npos &&
               info.find("cluster_slots_ok:16384") != std::string::npos &&
               info.find(known) != std::string::npos;
    }
    if (agreed) return Status::OK();
    if (Now() >= deadline) {
      return Failed(StatusCode::kUnavailable,
                    "the nodes did not all report cluster_state:ok with 16384 slots");
    }
    Pause();
  }
}

Status LocalRedisCluster::Failed(StatusCode code, const std::string& what) const {
  std::ifstream in(log_path_);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::string tail;
  for (size_t i = lines.size() > 15 ? lines.size() - 15 : 0; i < lines.size(); ++i) {
    tail += "\n  " + lines[i];
  }
  return Status(code, "local redis cluster: " + what + "; last lines of " + log_path_ +
                          ":" + (tail.empty() ? " (empty)" : tail));
}

void LocalRedisCluster::Log(const std::string& line) const {
  if (options_.log) options_.log(line);
}

std::string LocalRedisCluster::seeds() const {
  std::string out;
  for (int port : ports_) {
    if (!out.empty()) out += ',';
    out += "127.0.0.1:";
    out += std::to_string(port);
  }
  return out;
}

void LocalRedisCluster::KillMaster(int i) {
  if (i < 0 || i >= static_cast<int>(pids_.size()) || pids_[i] <= 0) return;
  kill(pids_[i], SIGKILL);
  waitpid(pids_[i], nullptr, 0);
  pids_[i] = -1;
}

Status LocalRedisCluster::RestartMasterEmpty(int i) {
  if (i < 0 || i >= static_cast<int>(ports_.size()) || ports_[i] <= 0) {
    return Status::InvalidArgument("no master " + std::to_string(i));
  }
  const int port = ports_[i];
  KillMaster(i);
  const uint64_t deadline = Now() + uint64_t{options_.start_timeout_ms} * kMillis;
  PKV_RETURN_IF_ERROR(StartServer(i, deadline, port));
  if (!options_.cluster) return Status::OK();
  return WaitUntilAgreed(deadline);
}

StatusOr<int> LocalRedisCluster::AddReplica(int i) {
  if (!options_.cluster || i < 0 || i >= static_cast<int>(ports_.size()) ||
      pids_[i] <= 0) {
    return Status::InvalidArgument("no master " + std::to_string(i));
  }
  const uint64_t deadline = Now() + uint64_t{options_.start_timeout_ms} * kMillis;
  const int master = ports_[i];
  const int r = static_cast<int>(ports_.size());
  ports_.push_back(-1);
  pids_.push_back(-1);
  PKV_RETURN_IF_ERROR(StartServer(r, deadline));
  // Every node meets it itself: spread by gossip alone, the last one took
  // up to seconds to know it.
  const std::string meet = "CLUSTER MEET 127.0.0.1 " + std::to_string(ports_[r]);
  for (int j = 0; j < r; ++j) {
    if (pids_[j] > 0 && Ask(ports_[j], meet.c_str()) != "OK") {
      return Failed(StatusCode::kIOError, "CLUSTER MEET was refused");
    }
  }
  // Its first sync at once, not after the 5 s a diskless sync waits for more
  // replicas by default.
  if (Ask(master, "CONFIG SET repl-diskless-sync-delay 0") != "OK") {
    return Failed(StatusCode::kIOError,
                  "CONFIG SET repl-diskless-sync-delay was refused");
  }
  const std::string replicate = "CLUSTER REPLICATE " + Ask(master, "CLUSTER MYID");
  PKV_RETURN_IF_ERROR(WaitFor([&] { return Ask(ports_[r], replicate.c_str()) == "OK"; },
                              deadline, "CLUSTER REPLICATE"));
  PKV_RETURN_IF_ERROR(WaitFor(
      [&] {
        return Ask(ports_[r], "INFO replication").find("master_link_status:up") !=
               std::string::npos;
      },
      deadline, "the replica's link to its master"));
  PKV_RETURN_IF_ERROR(WaitUntilAgreed(deadline));  // every node knows it
  return r;
}

Status LocalRedisCluster::WaitFor(const std::function<bool()>& probe, uint64_t deadline,
                                  const std::string& what) {
  while (!probe()) {
    if (Now() >= deadline) {
      return Failed(StatusCode::kUnavailable, what + " did not happen in time");
    }
    Pause();
  }
  return Status::OK();
}

void LocalRedisCluster::Stop() {
  for (pid_t pid : pids_) {
    if (pid > 0) kill(pid, SIGTERM);
  }
  const uint64_t deadline = Now() + 2000 * kMillis;
  for (pid_t& pid : pids_) {
    if (pid <= 0) continue;
    if (WaitExit(pid, deadline) == -1) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    pid = -1;
  }
  if (!dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
    dir_.clear();
  }
}

LocalRedisCluster::~LocalRedisCluster() { Stop(); }

}  // namespace prefixkv
