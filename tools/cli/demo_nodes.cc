// `prefixkv demo --nodes 2` (demo_nodes.h): the parent process that forks one
// child per turn, alternating node A and node B over one shared remote tier, and
// the pipe protocol the child reports back with. Processes instead of threads,
// because two nodes must not share anything but the remote tier (no hot budget,
// no SSD tier, no address space); the parent opens no engine and stays
// single-threaded so fork() is safe. A child is bounded in time and reaped on
// every path, so a hung node cannot hang the demo.
#include "tools/cli/demo_nodes.h"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "prefixkv/clock.h"
#include "prefixkv/remote_counter_fields.h"

namespace prefixkv::cli {
namespace {

// The pipe message of a turn: a tag byte, then either the turn (DemoTurn and
// RemoteCounters as bytes: the child is a fork of the reader, same layout),
// the reply's length and tokens, or an error message.
static_assert(std::is_trivially_copyable_v<DemoTurn>);
static_assert(std::is_trivially_copyable_v<RemoteCounters>);
constexpr char kTurnTag = 'T';
constexpr char kErrorTag = 'E';

template <typename T>
void Append(std::string& out, const T& value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

template <typename T>
bool Take(std::string_view& in, T* value) {
  if (in.size() < sizeof(T)) return false;
  std::memcpy(value, in.data(), sizeof(T));
  in.remove_prefix(sizeof(T));
  return true;
}

std::string Encode(const StatusOr<DemoNodeTurn>& served) {
  std::string out;
  if (!served.ok()) {
    out.push_back(kErrorTag);
    return out + served.status().ToString();
  }
  out.push_back(kTurnTag);
  Append(out, served->turn);
  Append(out, served->remote);
  Append(out, static_cast<uint64_t>(served->reply.size()));
  for (int32_t token : served->reply) Append(out, token);
  return out;
}

StatusOr<DemoNodeTurn> Decode(std::string_view in) {
  if (!in.empty() && in[0] == kErrorTag)
    return Status::IOError(std::string(in.substr(1)));
  DemoNodeTurn served;
  uint64_t n = 0;
  bool ok = !in.empty() && in[0] == kTurnTag;
  if (ok) in.remove_prefix(1);
  ok = ok && Take(in, &served.turn) && Take(in, &served.remote) && Take(in, &n) &&
       in.size() == n * sizeof(int32_t);
  if (!ok) return Status::Corruption("truncated message");
  served.reply.resize(n);
  for (int32_t& token : served.reply) Take(in, &token);
  return served;
}

bool WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// The fault-injection hook of the tests: PREFIXKV_DEMO_FAULT=crash:N makes
// turn N's process die of SIGKILL before serving, hang:N makes it hang.
void InjectFault(int turn) {
  const char* fault = std::getenv("PREFIXKV_DEMO_FAULT");
  if (fault == nullptr) return;
  const std::string f(fault);
  const std::string n = ":" + std::to_string(turn + 1);
  if (f == "crash" + n) kill(getpid(), SIGKILL);
  if (f == "hang" + n) {
    while (true) pause();
  }
}

// The child: serves the turn, writes the message, exits without running the
// parent's destructors or atexit handlers (it shares their state).
[[noreturn]] void ServeInChild(const DemoNodeTurnOptions& options, int fd) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the demo
  InjectFault(options.turn);
  const bool written = WriteAll(fd, Encode(RunDemoNodeTurn(options)));
  close(fd);
  _exit(written ? 0 : 1);
}

uint64_t NowMs() { return Clock::System()->NowNanos() / 1000000; }

// Reads `fd` to EOF and reaps `pid`, both by `deadline_ms`; past it the child
// is SIGKILLed and reaped. Returns how the child ended ("" when it exited 0).
std::string AwaitChild(pid_t pid, int fd, uint64_t deadline_ms, std::string* data) {
  bool open = true;
  int status = 0;
  while (true) {
    const uint64_t now = NowMs();
    if (now >= deadline_ms) break;
    const int wait_ms = static_cast<int>(std::min<uint64_t>(deadline_ms - now, 50));
    if (open) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, wait_ms) > 0) {
        char buf[4096];
        const ssize_t n = read(fd, buf, sizeof(buf));
        if (n > 0) data->append(buf, static_cast<size_t>(n));
        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) open = false;
      }
      continue;
    }
    if (waitpid(pid, &status, WNOHANG) == pid) {
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
      return WIFSIGNALED(status)
                 ? "was killed by signal " + std::to_string(WTERMSIG(status))
                 : "exited with code " + std::to_string(WEXITSTATUS(status));
    }
    poll(nullptr, 0, wait_ms);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return "did not finish in time and was killed";
}

// Runs one turn in a forked child of this (single-threaded) process.
StatusOr<DemoNodeTurn> ServeInProcess(const DemoNodeTurnOptions& options, char node,
                                      uint32_t timeout_ms) {
  const std::string who = std::string("node ") + node + "'s process for turn " +
                          std::to_string(options.turn + 1);
  int fds[2];
  if (pipe(fds) != 0) return Status::IOError("pipe: " + std::string(strerror(errno)));
  std::fflush(nullptr);  // nothing buffered is written twice
  const uint64_t deadline_ms = NowMs() + timeout_ms;
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return Status::IOError("fork: " + std::string(strerror(errno)));
  }
  if (pid == 0) {
    close(fds[0]);
    ServeInChild(options, fds[1]);
  }
  close(fds[1]);
  std::string data;
  const std::string ended = AwaitChild(pid, fds[0], deadline_ms, &data);
  close(fds[0]);
  StatusOr<DemoNodeTurn> served = Decode(data);
  if (!served.ok() && data.empty()) {
    return Status::IOError(who + (ended.empty() ? " sent nothing" : " " + ended));
  }
  if (!served.ok()) return Status::IOError(who + ": " + served.status().message());
  if (!ended.empty()) return Status::IOError(who + " " + ended);
  return served;
}

// Every counter summed (gauges: each turn's process ends with an empty queue).
void AddCounters(const RemoteCounters& c, RemoteCounters* sum) {
  for (const RemoteCounterField& f : kRemoteCounterFields) {
    if (f.counter) sum->*f.field += c.*f.field;
  }
  sum->available = c.available;
}

Status WipeNodeDirs(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (ec) return Status::IOError("cannot wipe " + dir.string() + ": " + ec.message());
  for (const char* node : {"node-a", "node-b"}) {
    std::filesystem::create_directories(dir / node, ec);
    if (ec) return Status::IOError("cannot create " + (dir / node).string());
  }
  return Status::OK();
}

}  // namespace

StatusOr<DemoNodesReport> RunDemoNodes(const DemoNodesOptions& options) {
  if (options.remote.remote.empty()) return Status::InvalidArgument("no remote tier");
  const std::filesystem::path dir(options.dir);
  PKV_RETURN_IF_ERROR(WipeNodeDirs(dir));
  DemoNodesReport report;
  report.model = options.model;
  PKV_ASSIGN_OR_RETURN(report.layer_kinds, DemoLayerKinds(options.model));
  report.block_tokens = DemoBlockTokens();
  report.hot_capacity_bytes = DemoHotCapacityBytes();
  report.parity = true;
  report.later_turns_restored = true;
  DemoNodeTurnOptions turn;
  turn.turns = options.turns;
  turn.model = options.model;
  turn.remote = options.remote;
  turn.remote.remote_write = RemoteWriteMode::kAlways;
  for (int t = 0; t < options.turns; ++t) {
    const char node = t % 2 == 0 ? 'A' : 'B';
    turn.dir = (dir / (node == 'A' ? "node-a" : "node-b")).string();
    turn.turn = t;
    PKV_ASSIGN_OR_RETURN(DemoNodeTurn served,
                         ServeInProcess(turn, node, options.turn_timeout_ms));
    std::vector<int32_t> prompt = DemoPrompt(turn.conversation, t);
    if (served.turn.prompt_tokens != prompt.size()) {
      return Status::Internal("node " + std::string(1, node) + " served a prompt of " +
                              std::to_string(served.turn.prompt_tokens) +
                              " tokens, not " + std::to_string(prompt.size()));
    }
    PKV_ASSIGN_OR_RETURN(std::vector<int32_t> stateless,
                         DemoStatelessReply(prompt, options.model));
    served.turn.parity = stateless == served.reply;
    report.parity = report.parity && served.turn.parity;
    const DemoTurn& d = served.turn;
    const uint64_t restored =
        d.restored_hot_tokens + d.restored_ssd_tokens + d.restored_remote_tokens;
    if (t > 0 && restored == 0) report.later_turns_restored = false;
    if (t == 1) report.node_b_restored_remote = d.restored_remote_tokens > 0;
    AddCounters(served.remote, &report.remote);
    report.turns.push_back({node, served.turn});
    turn.conversation = std::move(prompt);
    turn.conversation.insert(turn.conversation.end(), served.reply.begin(),
                             served.reply.end());
  }
  return report;
}

}  // namespace prefixkv::cli
