// The real `prefixkv serve` against hostile or careless clients
// (docs/protocol.md, "Limits" and "Authentication and admin commands"): a bulk
// header larger than the machine's memory is refused and the server goes on
// (it used to abort on std::bad_alloc and lose the write-back values); clients
// that have not authenticated cannot make it buffer their streams (RSS read
// from /proc); passwords come from a file or the environment, not the command
// line that ps shows; failed AUTHs have a server-wide budget; `serve --help`
// names every flag in its usage line.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/server/resp_client.h"
#include "tests/server/serve_process.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

using testing::Reply;
using testing::RespClient;
using testing::ServeProcess;

// A "Name:   123 kB" line of /proc/PID/status, in bytes; -1 when absent.
int64_t ProcStatusBytes(pid_t pid, const std::string& name) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + ":", 0) == 0) {
      return std::stoll(line.substr(name.size() + 1)) * 1024;
    }
  }
  return -1;
}

// MemTotal + SwapTotal of /proc/meminfo, in bytes.
uint64_t MachineMemory() {
  std::ifstream in("/proc/meminfo");
  std::string name;
  uint64_t kb = 0, total = 0;
  std::string unit;
  while (in >> name >> kb) {
    if (name == "MemTotal:" || name == "SwapTotal:") total += kb * 1024;
    std::getline(in, unit);
  }
  return total;
}

std::string WriteFile(const testing::TempDir& dir, const std::string& name,
                      const std::string& text) {
  const std::string path = dir.str() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

std::string CommandLineOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// `*3 SET k $60000000000` with --max-request-bytes 100G: the server used to
// reserve the whole bulk, die of std::bad_alloc, and lose the value SET just
// before (write-back: still only in RAM). A length the machine cannot hold is
// refused at the header now, the connection closed, and the server goes on.
TEST(ServerLimits, AnOversizedBulkHeaderNeitherKillsTheServerNorLosesAValue) {
  testing::TempDir dir;
  const std::string data = dir.str() + "/data";
  const uint64_t declared = std::max<uint64_t>(60'000'000'000, 2 * MachineMemory());
  const std::vector<std::string> flags = {"--max-request-bytes",
                                          std::to_string(declared * 2)};
  {
    ServeProcess serve(data, flags);
    ASSERT_NE(serve.port(), 0) << "prefixkv serve did not start";
    RespClient c(serve.port());
    ASSERT_EQ(c.Call({"SET", "witness", "acknowledged"}).str, "OK");
    ASSERT_TRUE(
        c.SendRaw("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$" + std::to_string(declared) + "\r\n"));
    EXPECT_EQ(c.Read().str, "ERR Protocol error: invalid bulk length");
    EXPECT_TRUE(c.ReadsEof());
    RespClient other(serve.port());
    EXPECT_EQ(other.Call({"PING"}).str, "PONG");
    EXPECT_EQ(other.Call({"GET", "witness"}).str, "acknowledged");
    EXPECT_EQ(serve.StopWith(SIGTERM), 0);
  }
  ServeProcess serve(data, flags);
  ASSERT_NE(serve.port(), 0) << "prefixkv serve did not restart";
  RespClient c(serve.port());
  EXPECT_EQ(c.Call({"GET", "witness"}).str, "acknowledged");
  EXPECT_EQ(serve.StopWith(SIGTERM), 0);
}

// Address space for its buffers runs out while a 400 MiB value arrives (the
// server's RLIMIT_AS is lowered to what it maps plus 160 MiB): the request is
// refused, counted as an out-of-memory refusal (it used to count as a
// protocol error), that connection alone is closed, and the server goes on.
TEST(ServerLimits, RunningOutOfMemoryWhileAValueArrivesIsAnOutOfMemoryRefusal) {
  testing::TempDir dir;
  ServeProcess serve(dir.str() + "/data", {"--threads", "1"});
  ASSERT_NE(serve.port(), 0) << "prefixkv serve did not start";
  {
    RespClient warm(serve.port());
    ASSERT_EQ(warm.Call({"SET", "witness", "kept"}).str, "OK");
  }
  const int64_t mapped = ProcStatusBytes(serve.pid(), "VmSize");
  ASSERT_GT(mapped, 0);
  rlimit old_limit{};
  ASSERT_EQ(::prlimit(serve.pid(), RLIMIT_AS, nullptr, &old_limit), 0);
  const rlimit tight{static_cast<rlim_t>(mapped) + (rlim_t{160} << 20),
                     old_limit.rlim_max};
  ASSERT_EQ(::prlimit(serve.pid(), RLIMIT_AS, &tight, nullptr), 0);
  constexpr size_t kValue = size_t{400} << 20;
  {
    RespClient c(serve.port());
    ASSERT_TRUE(
        c.SendRaw("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$" + std::to_string(kValue) + "\r\n"));
    const std::string chunk(1 << 20, 'x');
    for (size_t sent = 0; sent < kValue; sent += chunk.size()) {
      if (!c.SendRaw(chunk)) break;  // the server refused it and closed
    }
    // The reply may be lost to the reset of a close with bytes unread; the
    // counters below are what this test checks.
    const Reply r = c.Read();
    if (!r.closed()) {
      EXPECT_EQ(r.str.rfind("ERR Protocol error: out of memory", 0), 0u) << r.str;
    }
  }
  ASSERT_EQ(::prlimit(serve.pid(), RLIMIT_AS, &old_limit, nullptr), 0);
  RespClient c(serve.port());
  const std::string stats = c.Call({"INFO", "stats"}).str;
  EXPECT_NE(stats.find("out_of_memory_refusals:1\r\n"), std::string::npos) << stats;
  EXPECT_NE(stats.find("protocol_errors:0\r\n"), std::string::npos) << stats;
  EXPECT_EQ(c.Call({"GET", "witness"}).str, "kept");
  EXPECT_TRUE(c.Call({"GET", "k"}).null);
  EXPECT_EQ(serve.StopWith(SIGTERM), 0);
}

// Under `ulimit -n 128` with the default --max-clients 10000, clients used to
// be accepted until the descriptors ran out: the next one hung unanswered in
// the accept backlog, and a write-through SET failed ('IOError: open
// .../segments/...seg: Too many open files'), the SSD tier unable to open a
// segment. The server now accepts only the clients that fit (INFO maxclients,
// and a line in its log), tells the next one it is full, and goes on storing.
TEST(ServerLimits, ClientsPastTheOpenFileLimitAreRefusedNotLeftToStarveTheEngine) {
  testing::TempDir dir;
  const std::string log = dir.str() + "/serve.log";
  ServeProcess serve(dir.str() + "/data",
                     {"--write-through", "--ssd-capacity-bytes", "16M"}, log,
                     /*open_file_limit=*/128);
  ASSERT_NE(serve.port(), 0) << "prefixkv serve did not start";
  std::vector<std::unique_ptr<RespClient>> served;
  for (int i = 0; i < 200; ++i) {
    auto c = std::make_unique<RespClient>(serve.port(), /*timeout_s=*/2);
    ASSERT_TRUE(c->connected()) << i;
    const Reply r = c->Call({"PING"});
    if (r.str == "PONG") {
      served.push_back(std::move(c));
      continue;
    }
    // Told the server is full, or closed before its PING was read; not hung.
    EXPECT_TRUE(r.str == "ERR max number of clients reached" ||
                (r.closed() && c->ReadsEofAfterDraining()))
        << "client " << i << " was neither served nor refused: '" << r.str << "'";
    break;
  }
  ASSERT_FALSE(served.empty());
  ASSERT_LT(served.size(), 128u);
  // With every place taken, values still reach new segments on SSD.
  const std::string value(700 << 10, 'v');
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(served[0]->Call({"SET", "k" + std::to_string(i), value}).str, "OK") << i;
  }
  const std::string fit = std::to_string(served.size());
  const std::string clients = served[0]->Call({"INFO", "clients"}).str;
  EXPECT_NE(clients.find("maxclients:" + fit + "\r\n"), std::string::npos) << clients;
  served.clear();
  EXPECT_EQ(serve.StopWith(SIGTERM), 0);
  std::ifstream in(log);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(text.find("the open file limit (ulimit -n) is 128: at most " + fit + " of"),
            std::string::npos)
      << text;
}

// Two clients that never AUTH each declare a 100 MiB value and stream it.
// They used to take the server's RSS up by the 200 MiB they sent; now the
// header is refused (16 KiB before AUTH) and the peak RSS barely moves.
TEST(ServerLimits, UnauthenticatedClientsCannotMakeTheServerBufferTheirStreams) {
  testing::TempDir dir;
  const std::string pass = WriteFile(dir, "pass", "pw\n");
  ServeProcess serve(dir.str() + "/data", {"--requirepass-file", pass});
  ASSERT_NE(serve.port(), 0) << "prefixkv serve did not start";
  {
    RespClient warm(serve.port());
    ASSERT_EQ(warm.Call({"AUTH", "pw"}).str, "OK");
    ASSERT_EQ(warm.Call({"SET", "k", "v"}).str, "OK");
  }
  // What the server does after the SET on its own (the write-back of k,
  // its arena's thread faulting in a region) is not the streams' doing:
  // wait until the RSS holds still, then count the peak from there
  // (clear_refs 5 resets VmHWM to the RSS).
  int64_t before = ProcStatusBytes(serve.pid(), "VmRSS");
  for (int still = 0, i = 0; still < 5 && i < 100; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const int64_t now = ProcStatusBytes(serve.pid(), "VmRSS");
    still = now == before ? still + 1 : 0;
    before = now;
  }
  ASSERT_GT(before, 0);
  {
    std::ofstream reset("/proc/" + std::to_string(serve.pid()) + "/clear_refs");
    reset << "5";
  }
  before = ProcStatusBytes(serve.pid(), "VmRSS");
  constexpr size_t kStream = size_t{100} << 20;
  auto stream = [&] {
    RespClient c(serve.port());
    if (!c.SendRaw("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$" + std::to_string(kStream) +
                   "\r\n")) {
      return;
    }
    const std::string chunk(1 << 20, 'x');
    for (size_t sent = 0; sent < kStream; sent += chunk.size()) {
      if (!c.SendRaw(chunk)) return;  // the server closed the connection
    }
    c.ShutdownWrite();
    c.Read();
  };
  std::thread a(stream), b(stream);
  a.join();
  b.join();
  const int64_t peak = ProcStatusBytes(serve.pid(), "VmHWM");
  std::printf("server RSS before %lld bytes, peak after %lld bytes\n",
              static_cast<long long>(before), static_cast<long long>(peak));
  EXPECT_LT(peak - before, int64_t{32} << 20);
  RespClient c(serve.port());
  EXPECT_EQ(c.Call({"AUTH", "pw"}).str, "OK");
  EXPECT_EQ(c.Call({"GET", "k"}).str, "v");
}

// --requirepass puts the password on the command line, where ps shows it to
// every user: --requirepass-file and PREFIXKV_REQUIREPASS keep it off it
// (and so do --admin-pass-file and PREFIXKV_ADMIN_PASS).
TEST(ServerLimits, PasswordsComeFromAFileOrTheEnvironment) {
  testing::TempDir dir;
  {
    const std::string pass = WriteFile(dir, "pass", "file-secret\n");
    const std::string admin = WriteFile(dir, "admin", "admin-secret\r\n");
    ServeProcess serve(dir.str() + "/a",
                       {"--requirepass-file", pass, "--admin-pass-file", admin});
    ASSERT_NE(serve.port(), 0) << "prefixkv serve did not start";
    EXPECT_EQ(CommandLineOf(serve.pid()).find("secret"), std::string::npos);
    RespClient c(serve.port());
    EXPECT_EQ(c.Call({"GET", "k"}).str, "NOAUTH Authentication required.");
    EXPECT_EQ(c.Call({"AUTH", "file-secret"}).str, "OK");
    EXPECT_TRUE(c.Call({"PKV.AUDIT"}).IsError());
    EXPECT_EQ(c.Call({"AUTH", "admin", "admin-secret"}).str, "OK");
    EXPECT_EQ(c.Call({"PKV.AUDIT"}).type, '*');
  }
  {
    ::setenv("PREFIXKV_REQUIREPASS", "env-secret", 1);
    ::setenv("PREFIXKV_ADMIN_PASS", "env-admin", 1);
    ServeProcess serve(dir.str() + "/b");
    ::unsetenv("PREFIXKV_REQUIREPASS");
    ::unsetenv("PREFIXKV_ADMIN_PASS");
    ASSERT_NE(serve.port(), 0) << "prefixkv serve did not start";
    RespClient c(serve.port());
    EXPECT_EQ(c.Call({"GET", "k"}).str, "NOAUTH Authentication required.");
    EXPECT_EQ(c.Call({"AUTH", "env-secret"}).str, "OK");
    EXPECT_EQ(c.Call({"AUTH", "admin", "env-admin"}).str, "OK");
    EXPECT_EQ(c.Call({"PKV.AUDIT"}).type, '*');
  }
}

// --auth-failures-per-second is the server-wide budget of failed AUTHs:
// guesses from fresh connections (one each, so no per-connection pause slows
// them) get 10 checks (the burst) plus one per second at 1/s; the rest are
// refused unchecked. With 0 there is no server-wide limit.
TEST(ServerLimits, ServeLimitsFailedAuthAcrossConnections) {
  testing::TempDir dir;
  ::setenv("PREFIXKV_REQUIREPASS", "pw", 1);
  ServeProcess limited(dir.str() + "/a", {"--auth-failures-per-second", "1"});
  ServeProcess unlimited(dir.str() + "/b", {"--auth-failures-per-second", "0"});
  ::unsetenv("PREFIXKV_REQUIREPASS");
  ASSERT_NE(limited.port(), 0) << "prefixkv serve did not start";
  ASSERT_NE(unlimited.port(), 0) << "prefixkv serve did not start";
  auto guess = [](uint16_t port, int n, int* wrong, int* throttled) {
    for (int i = 0; i < n; ++i) {
      const std::string reply = RespClient(port).Call({"AUTH", "guess"}).str;
      *wrong += reply.rfind("WRONGPASS", 0) == 0 ? 1 : 0;
      *throttled += reply.rfind("ERR too many failed AUTH", 0) == 0 ? 1 : 0;
    }
  };
  int wrong = 0, throttled = 0;
  const auto start = std::chrono::steady_clock::now();
  guess(limited.port(), 20, &wrong, &throttled);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(wrong + throttled, 20);
  EXPECT_LE(wrong, 10 + static_cast<int>(seconds) + 1) << seconds << " s";
  EXPECT_GE(throttled, 1) << seconds << " s";
  RespClient info(limited.port());
  // The right password once a check is free (1 s at 1/s).
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  ASSERT_EQ(info.Call({"AUTH", "pw"}).str, "OK");
  EXPECT_NE(info.Call({"INFO", "stats"})
                .str.find("auth_throttled:" + std::to_string(throttled)),
            std::string::npos);
  wrong = throttled = 0;
  guess(unlimited.port(), 20, &wrong, &throttled);
  EXPECT_EQ(wrong, 20);
  EXPECT_EQ(throttled, 0);
}

// Every --flag that `serve --help` explains appears in its usage line.
// Ports, counts and times take digits only: "--port 20K" used to listen on
// 20480 (read as a size), "--port -1" was "not a size", and "--max-clients 0"
// started a server that refused every client. Each is a usage error now
// (exit 2), before anything is opened, naming the value given.
TEST(ServerLimits, ServeRefusesPortsAndCountsThatAreNotPlainNumbers) {
  testing::TempDir dir;
  const struct {
    std::string flags;
    std::string error;
  } cases[] = {
      {"--port 20K", "--port: '20K' is not a whole number"},
      {"--port -1", "--port: '-1' is not a whole number"},
      {"--port 70000", "--port must be in [0, 65535], not '70000'"},
      {"--threads 2x", "--threads: '2x' is not a whole number"},
      {"--threads 0", "--threads must be in [1, 256], not '0'"},
      // The engine refused it after the flags passed: exit 1, 'zero capacity'.
      {"--ssd-capacity-bytes 0", "--ssd-capacity-bytes must be > 0, not '0'"},
      {"--ssd-drive-writes-per-day abc",
       "--ssd-drive-writes-per-day must be a number in (0, 1000000], not 'abc'"},
      // The listen refused it after the data directory was opened: exit 1.
      {"--bind localhost", "--bind must be an IPv4 or IPv6 address, not 'localhost'"},
      // Alone it was taken and did nothing.
      {"--ssd-drive-capacity-bytes 4T",
       "--ssd-drive-capacity-bytes needs --ssd-drive-writes-per-day"},
      {"--metrics-port 1M", "--metrics-port: '1M' is not a whole number"},
      {"--idle-timeout-ms 1.5", "--idle-timeout-ms: '1.5' is not a whole number"},
      {"--max-clients 0", "--max-clients must be > 0"},
      {"--auth-failures-per-second 5/s",
       "--auth-failures-per-second: '5/s' is not a whole number"},
      {"--auth-failures-per-second 2000000",
       "--auth-failures-per-second must be in [0, 1000000]"},
  };
  for (const auto& c : cases) {
    const std::string cmd = std::string(PREFIXKV_CLI) + " serve --data-dir " + dir.str() +
                            "/data " + c.flags + " 2>&1";
    FILE* pipe = ::popen(cmd.c_str(), "r");
    ASSERT_NE(pipe, nullptr);
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
    const int status = ::pclose(pipe);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << c.flags << "\n" << out;
    EXPECT_NE(out.find(c.error), std::string::npos) << c.flags << "\n" << out;
    EXPECT_EQ(out.find("listening"), std::string::npos) << c.flags << "\n" << out;
  }
}

TEST(ServerLimits, ServeHelpUsageNamesEveryFlag) {
  FILE* pipe = ::popen((std::string(PREFIXKV_CLI) + " serve --help 2>&1").c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string help;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) help.append(buf, n);
  ASSERT_EQ(::pclose(pipe), 0) << help;
  std::istringstream lines(help);
  std::string usage, line;
  std::set<std::string> explained;
  while (std::getline(lines, line)) {
    if (usage.empty() && line.find("prefixkv serve") != std::string::npos) {
      usage = line;
      continue;
    }
    const size_t dash = line.find("--");
    if (dash != std::string::npos && line.find_first_not_of(' ') == dash) {
      const size_t end = line.find_first_of(" =\t", dash);
      explained.insert(line.substr(dash, end - dash));
    }
  }
  ASSERT_FALSE(usage.empty()) << help;
  EXPECT_TRUE(explained.contains("--max-clients")) << help;
  EXPECT_TRUE(explained.contains("--idle-timeout-ms")) << help;
  EXPECT_TRUE(explained.contains("--auth-failures-per-second")) << help;
  for (const std::string& flag : explained) {
    if (flag == "--help") continue;
    const bool named = usage.find(flag + " ") != std::string::npos ||
                       usage.find(flag + "]") != std::string::npos;
    EXPECT_TRUE(named) << flag << " is missing from the usage line: " << usage;
  }
}

// `serve --advisor-max-keys N` bounds the capacity advisor's memory (INFO
// advisor's advisor_memory_bytes): about 1 MB of slots for the default 32768
// keys, tens of KB for 64 (most of it the histogram).
TEST(ServerLimits, AdvisorMaxKeysBoundsTheAdvisorsMemory) {
  auto memory = [](const std::vector<std::string>& flags) -> int64_t {
    testing::TempDir dir;
    ServeProcess serve(dir.str() + "/data", flags);
    if (serve.port() == 0) return -1;
    RespClient c(serve.port());
    const std::string info = c.Call({"INFO", "advisor"}).str;
    const std::string field = "advisor_memory_bytes:";
    const size_t at = info.find(field);
    return at == std::string::npos ? -2 : std::stoll(info.substr(at + field.size()));
  };
  EXPECT_GT(memory({}), 1'000'000);
  const int64_t small = memory({"--advisor-max-keys", "64", "--advisor-half-life", "60"});
  EXPECT_GT(small, 0);
  EXPECT_LT(small, 50'000);
}

}  // namespace
}  // namespace prefixkv
