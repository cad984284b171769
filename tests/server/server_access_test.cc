// Access control and INFO sections of the server (docs/protocol.md,
// "Authentication and admin commands", "INFO"): admin commands are off
// without an admin password and need AUTH admin with one; failed AUTHs are
// delayed and close the connection after a few; before AUTH a client cannot
// make the server buffer a large request; INFO returns the section asked for.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "tests/server/server_fixture.h"

namespace prefixkv {
namespace {

using testing::Reply;

class ServerAccessTest : public testing::ServerFixture {};

// The integer after "name:" in an INFO text; -1 when absent.
int64_t InfoField(const std::string& info, const std::string& name) {
  const size_t at = info.find("\r\n" + name + ":");
  if (at == std::string::npos) return -1;
  return std::stoll(info.substr(at + name.size() + 3));
}

TEST_F(ServerAccessTest, AdminCommandsAreOffWithoutAnAdminPassword) {
  StartServer();
  auto c = Connect();
  ASSERT_EQ(c->Call({"SET", "k", "v"}).str, "OK");
  Reply audit = c->Call({"PKV.AUDIT"});
  EXPECT_EQ(audit.str,
            "ERR admin commands are off: start the server with an admin password "
            "(--admin-pass-file or PREFIXKV_ADMIN_PASS)");
  EXPECT_EQ(engine_->Stats().dirty_blocks, 1u);  // the audit's flush never ran
  EXPECT_TRUE(c->Call({"AUTH", "admin", ""}).IsError());
  EXPECT_TRUE(c->Call({"AUTH", "admin", "anything"}).IsError());
  EXPECT_TRUE(c->Call({"PKV.AUDIT"}).IsError());
}

TEST_F(ServerAccessTest, AdminCommandsNeedAuthAsAdmin) {
  options_.requirepass = "pw";
  options_.admin_pass = "adm";
  options_.auth_failure_delay_ms = 0;
  StartServer();
  auto c = Connect();
  EXPECT_EQ(c->Call({"PKV.AUDIT"}).str, "NOAUTH Authentication required.");
  ASSERT_EQ(c->Call({"AUTH", "pw"}).str, "OK");
  EXPECT_EQ(c->Call({"PKV.AUDIT"}).str,
            "NOPERM this is an admin command: AUTH admin <admin password> first");
  EXPECT_EQ(c->Call({"AUTH", "admin", "pw"}).str.rfind("WRONGPASS", 0), 0u);
  EXPECT_EQ(c->Call({"AUTH", "admin", "adm"}).str, "OK");
  Reply audit = c->Call({"PKV.AUDIT"});
  EXPECT_EQ(audit.type, '*') << audit.str;
  // The admin password alone authenticates a connection too.
  auto admin = Connect();
  EXPECT_EQ(admin->Call({"AUTH", "admin", "adm"}).str, "OK");
  EXPECT_EQ(admin->Call({"PKV.AUDIT"}).type, '*');
  EXPECT_EQ(admin->Call({"SET", "k", "v"}).str, "OK");
  // COMMAND tells clients which commands are admin commands.
  Reply info = admin->Call({"COMMAND", "INFO", "pkv.audit", "pkv.stats"});
  ASSERT_EQ(info.elems.size(), 2u);
  ASSERT_EQ(info.elems[0].elems.size(), 6u);
  ASSERT_EQ(info.elems[0].elems[2].elems.size(), 2u);
  EXPECT_EQ(info.elems[0].elems[2].elems[1].str, "admin");
  EXPECT_EQ(info.elems[1].elems[2].elems.size(), 1u);
}

// AUTH as default after AUTH admin makes the connection default's again, as
// AUTH switches users in Redis: admin commands are refused from then on (also
// one queued in a transaction before the switch), and CLIENT INFO says so. A
// failed AUTH changes nothing.
TEST_F(ServerAccessTest, AuthAsDefaultTakesTheAdminPermissionAway) {
  options_.requirepass = "pw";
  options_.admin_pass = "adm";
  options_.auth_failure_delay_ms = 0;
  StartServer();
  auto c = Connect();
  ASSERT_EQ(c->Call({"AUTH", "admin", "adm"}).str, "OK");
  EXPECT_TRUE(c->Call({"AUTH", "default", "wrong"}).IsError());
  EXPECT_EQ(c->Call({"PKV.AUDIT"}).type, '*');  // still the admin
  ASSERT_EQ(c->Call({"AUTH", "default", "pw"}).str, "OK");
  EXPECT_EQ(c->Call({"PKV.AUDIT"}).str,
            "NOPERM this is an admin command: AUTH admin <admin password> first");
  EXPECT_NE(c->Call({"CLIENT", "INFO"}).str.find(" user=default "), std::string::npos);
  ASSERT_EQ(c->Call({"SET", "k", "v"}).str, "OK");
  ASSERT_EQ(c->Call({"AUTH", "admin", "adm"}).str, "OK");
  EXPECT_EQ(c->Call({"MULTI"}).str, "OK");
  EXPECT_EQ(c->Call({"AUTH", "pw"}).str, "QUEUED");
  EXPECT_EQ(c->Call({"FLUSHDB"}).str, "QUEUED");  // the admin's when queued
  Reply exec = c->Call({"EXEC"});
  ASSERT_EQ(exec.elems.size(), 2u) << exec.str;
  EXPECT_EQ(exec.elems[0].str, "OK");
  EXPECT_EQ(exec.elems[1].str.rfind("NOPERM", 0), 0u) << exec.elems[1].str;
  EXPECT_EQ(c->Call({"GET", "k"}).str, "v");  // not flushed
}

// 10,000 wrong AUTHs used to run in 0.07 s on one connection. Now each failure
// pauses the connection (100 ms by default) and the third one closes it.
TEST_F(ServerAccessTest, FailedAuthIsDelayedAndClosesTheConnectionAfterAFew) {
  options_.requirepass = "s3cret";
  StartServer();
  auto c = Connect();
  std::string batch;
  for (int i = 0; i < 10; ++i) batch += testing::EncodeCommand({"AUTH", "guess"});
  batch += testing::EncodeCommand({"AUTH", "s3cret"});
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(c->SendRaw(batch));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(c->Read().str.rfind("WRONGPASS", 0), 0u) << i;
  }
  EXPECT_TRUE(c->ReadsEof());  // the correct password after them never ran
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_GE(elapsed, std::chrono::milliseconds(200));  // two pauses between three
  // Another connection is not affected; the counter tells an operator.
  auto other = Connect();
  EXPECT_EQ(other->Call({"AUTH", "s3cret"}).str, "OK");
  EXPECT_EQ(InfoField(other->Call({"INFO", "stats"}).str, "auth_failures"), 3);
  // HELLO ... AUTH counts the same way.
  auto hello = Connect();
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(
        hello->Call({"HELLO", "2", "AUTH", "default", "x"}).str.rfind("WRONGPASS", 0),
        0u);
  }
  EXPECT_TRUE(hello->Call({"AUTH", "y"}).IsError());
  EXPECT_TRUE(hello->ReadsEof());
}

// HELLO ... AUTH is an AUTH: it spends the server-wide budget and is refused
// unchecked past it; its other options are checked before the password.
TEST_F(ServerAccessTest, HelloAuthGoesThroughTheAuthThrottle) {
  FakeClock clock;
  options_.clock = &clock;
  options_.idle_check_interval_ms = 3600 * 1000;
  options_.requirepass = "s3cret";
  options_.auth_failure_delay_ms = 0;
  options_.max_auth_failures = 0;
  options_.auth_failures_per_second = 1;
  options_.auth_failure_burst = 1;
  StartServer();
  auto c = Connect();
  EXPECT_EQ(c->Call({"HELLO", "2", "AUTH", "default", "x", "SETNAME", "a b"}).str,
            "ERR Client names cannot contain spaces, newlines or special characters.");
  EXPECT_EQ(c->Call({"HELLO", "2", "AUTH", "default", "x"}).str.rfind("WRONGPASS", 0),
            0u);
  EXPECT_EQ(c->Call({"HELLO", "2", "AUTH", "default", "s3cret", "SETNAME", "n"})
                .str.rfind("ERR too many failed AUTH attempts", 0),
            0u);
  EXPECT_EQ(c->Call({"CLIENT", "GETNAME"}).str, "NOAUTH Authentication required.");
  clock.AdvanceMillis(1000);
  EXPECT_EQ(c->Call({"HELLO", "2", "AUTH", "default", "s3cret", "SETNAME", "n"}).type,
            '*');
  EXPECT_EQ(c->Call({"CLIENT", "GETNAME"}).str, "n");
  EXPECT_EQ(InfoField(c->Call({"INFO", "stats"}).str, "auth_failures"), 1);
  EXPECT_EQ(InfoField(c->Call({"INFO", "stats"}).str, "auth_throttled"), 1);
}

// The per-connection pause did not stop parallel guessing: 10 connections
// made 150 guesses/s. Now every password check spends one server-wide budget
// (the default 10/s with a burst of 10, on a fake clock here): however many
// connections guess, 10 guesses are checked, then 10 more per second; the
// rest are refused unchecked, counted and logged (one line per 10 s).
TEST_F(ServerAccessTest, FailedAuthIsThrottledAcrossConnections) {
  FakeClock clock;
  options_.clock = &clock;
  options_.idle_check_interval_ms = 3600 * 1000;
  options_.requirepass = "s3cret";
  options_.auth_failure_delay_ms = 0;  // the per-connection limits are another
  options_.max_auth_failures = 0;      // test's
  testing::LogLines log;
  options_.log = log.Sink();
  StartServer();
  constexpr int kClients = 10;
  constexpr int kGuesses = 20;
  std::atomic<int> wrong{0}, throttled{0}, other{0};
  const std::string kThrottled = "ERR too many failed AUTH attempts on this server";
  auto guess_in_parallel = [&] {
    std::vector<std::thread> threads;
    for (int t = 0; t < kClients; ++t) {
      threads.emplace_back([&, t] {
        testing::RespClient c(server_->port());
        for (int i = 0; i < kGuesses; ++i) {
          const std::string reply =
              c.Call({"AUTH", "guess" + std::to_string(t * 100 + i)}).str;
          if (reply.rfind("WRONGPASS", 0) == 0) {
            ++wrong;
          } else if (reply.rfind(kThrottled, 0) == 0) {
            ++throttled;
          } else {
            ++other;
          }
        }
      });
    }
    for (std::thread& t : threads) t.join();
  };
  guess_in_parallel();
  EXPECT_EQ(wrong.load(), 10);
  EXPECT_EQ(throttled.load(), kClients * kGuesses - 10);
  clock.AdvanceMillis(1000);  // one second: 10 more checks, whoever asks
  guess_in_parallel();
  EXPECT_EQ(wrong.load(), 20);
  EXPECT_EQ(throttled.load(), 2 * kClients * kGuesses - 20);
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(server_->stats().auth_failures, 20u);
  EXPECT_EQ(server_->stats().auth_throttled, 2u * kClients * kGuesses - 20);
  EXPECT_EQ(log.Count("AUTH throttled: more than 10 failed AUTH per second"), 1);

  // The right password works while the budget lasts and does not spend it.
  clock.AdvanceMillis(10'000);
  auto good = Connect();
  for (int i = 0; i < 30; ++i) ASSERT_EQ(good->Call({"AUTH", "s3cret"}).str, "OK") << i;
  EXPECT_EQ(InfoField(good->Call({"INFO", "stats"}).str, "auth_throttled"),
            2 * kClients * kGuesses - 20);
  // Once guessers spend it, the right password waits its turn: refused
  // unchecked, then accepted when a check is free again (100 ms at 10/s).
  auto guesser = Connect();
  for (int i = 0; i < 10; ++i) {
    ASSERT_EQ(guesser->Call({"AUTH", "x"}).str.rfind("WRONGPASS", 0), 0u) << i;
  }
  auto late = Connect();
  EXPECT_EQ(late->Call({"AUTH", "s3cret"}).str,
            kThrottled + ": the password was not checked; retry in 100 ms");
  EXPECT_EQ(late->Call({"GET", "k"}).str, "NOAUTH Authentication required.");
  clock.AdvanceMillis(100);
  EXPECT_EQ(late->Call({"AUTH", "s3cret"}).str, "OK");
  EXPECT_EQ(log.Count("AUTH throttled"), 2);  // the second, 10 s after the first
}

TEST(PasswordMatches, ComparesEveryByteAndTheLength) {
  using server::PasswordMatches;
  EXPECT_TRUE(PasswordMatches("s3cret", "s3cret"));
  EXPECT_FALSE(PasswordMatches("s3cre", "s3cret"));
  EXPECT_FALSE(PasswordMatches("s3crett", "s3cret"));
  EXPECT_FALSE(PasswordMatches("s3creu", "s3cret"));
  EXPECT_FALSE(PasswordMatches("t3cret", "s3cret"));
  EXPECT_FALSE(PasswordMatches("s3crets3cret", "s3cret"));  // the key repeated
  EXPECT_FALSE(PasswordMatches("", "s3cret"));
  EXPECT_FALSE(PasswordMatches("x", ""));
  EXPECT_FALSE(PasswordMatches(std::string(1, '\0'), ""));
}

// Before AUTH a request may hold at most max_unauthenticated_bytes (16 KiB):
// a larger bulk is refused at its header and the connection closed; after
// AUTH the usual limit applies.
TEST_F(ServerAccessTest, BeforeAuthALargeRequestIsRefusedAtItsHeader) {
  options_.requirepass = "pw";
  StartServer();
  const std::string value(20000, 'v');
  auto anonymous = Connect();
  ASSERT_TRUE(anonymous->SendRaw("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$20000\r\n"));
  EXPECT_EQ(anonymous->Read().str, "ERR Protocol error: invalid bulk length");
  EXPECT_TRUE(anonymous->ReadsEof());
  auto inline_client = Connect();
  ASSERT_TRUE(inline_client->SendRaw(std::string(20000, 'A')));
  EXPECT_EQ(inline_client->Read().str, "ERR Protocol error: too big inline request");
  auto c = Connect();
  ASSERT_EQ(c->Call({"AUTH", "pw"}).str, "OK");
  EXPECT_EQ(c->Call({"SET", "k", value}).str, "OK");
  EXPECT_EQ(c->Call({"GET", "k"}).str, value);
}

// Every connection used to allocate a 64 KiB read buffer when accepted (5,000
// idle sockets took the server's RSS from 12 to 338 MB). Now a connection that
// sent nothing holds no buffer, one that sent a command before AUTH a small
// one, and the figure goes back to 0 once they close.
TEST_F(ServerAccessTest, IdleConnectionsBeforeAuthHoldAlmostNoBufferMemory) {
  options_.requirepass = "pw";
  options_.auth_failure_delay_ms = 0;
  StartServer();
  // Two descriptors per connection in this process (client and server side).
  const size_t n = testing::RaiseOpenFileLimit(4500) >= 4500 ? 2000 : 400;
  std::vector<std::unique_ptr<testing::RespClient>> clients;
  for (size_t i = 0; i < n; ++i) clients.push_back(Connect());
  ASSERT_TRUE(testing::WaitUntil([&] { return server_->stats().connected_clients == n; }))
      << server_->stats().connected_clients << " of " << n;
  const uint64_t idle = server_->stats().client_buffer_bytes;
  EXPECT_LE(idle, n * 64) << idle / n << " bytes per idle connection";
  // Half of them send a command before AUTH (and get its error reply).
  for (size_t i = 0; i < n; i += 2) {
    EXPECT_TRUE(clients[i]->Call({"GET", "k"}).IsError()) << i;
  }
  const uint64_t used = server_->stats().client_buffer_bytes;
  EXPECT_LE(used, n * 4096) << used / n << " bytes per connection";
  std::printf(
      "%zu connections before AUTH: %.1f buffer bytes each idle, %.1f after a "
      "command\n",
      n, static_cast<double>(idle) / n, static_cast<double>(used) / n);
  EXPECT_GT(used, idle);  // a real figure: the replies and requests are in it
  // INFO clients shows it (with the asking connection's own buffers).
  auto admin = Connect();
  ASSERT_EQ(admin->Call({"AUTH", "pw"}).str, "OK");
  EXPECT_GE(InfoField(admin->Call({"INFO", "clients"}).str, "client_buffer_bytes"),
            static_cast<int64_t>(used));
  admin.reset();
  clients.clear();
  EXPECT_TRUE(testing::WaitUntil([&] {
    const ServerStats s = server_->stats();
    return s.connected_clients == 0 && s.client_buffer_bytes == 0;
  })) << server_->stats().client_buffer_bytes;
}

TEST_F(ServerAccessTest, InfoReturnsTheNamedSectionOnly) {
  StartServer();
  auto c = Connect();
  ASSERT_EQ(c->Call({"SET", "a", "1"}).str, "OK");
  ASSERT_EQ(c->Call({"SET", "b", "2"}).str, "OK");
  const std::string server = c->Call({"INFO", "server"}).str;
  EXPECT_EQ(server.rfind("# Server\r\n", 0), 0u) << server;
  for (const char* other : {"# Clients", "# Stats", "# Memory", "# Keyspace",
                            "# Tier_hot", "# Owners", "# Tier_ssd"}) {
    EXPECT_EQ(server.find(other), std::string::npos) << other << "\n" << server;
  }
  EXPECT_EQ(c->Call({"INFO", "clients"}).str.rfind("# Clients\r\n", 0), 0u);
  EXPECT_EQ(c->Call({"INFO", "STATS"}).str.rfind("# Stats\r\n", 0), 0u);
  EXPECT_EQ(c->Call({"INFO", "nosuchsection"}).str, "");
  // Several names (Redis 7): each section named, once, in the usual order.
  const std::string two = c->Call({"INFO", "stats", "Server", "nosuch", "server"}).str;
  EXPECT_EQ(two.rfind("# Server\r\n", 0), 0u) << two;
  EXPECT_NE(two.find("\r\n# Stats\r\n"), std::string::npos) << two;
  EXPECT_EQ(two.find("# Server", 1), std::string::npos) << two;
  EXPECT_EQ(two.find("# Clients"), std::string::npos) << two;
  EXPECT_EQ(two.find("# Memory"), std::string::npos) << two;
  const std::string all = c->Call({"INFO"}).str;
  for (const char* section : {"# Server", "# Clients", "# Stats", "# Memory",
                              "# Keyspace", "# Tier_hot", "# Owners", "# Tier_ssd"}) {
    EXPECT_NE(all.find(section), std::string::npos) << section;
  }
}

TEST_F(ServerAccessTest, InfoKeyspaceAndMemoryReportRealFigures) {
  StartServer();
  auto c = Connect();
  std::string keyspace = c->Call({"INFO", "keyspace"}).str;
  EXPECT_EQ(keyspace.rfind("# Keyspace\r\n", 0), 0u) << keyspace;
  EXPECT_NE(keyspace.find("db0:keys=0,expires=0,avg_ttl=0"), std::string::npos);
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(c->Call({"SET", "k" + std::to_string(i), "v"}).str, "OK");
  }
  ASSERT_EQ(c->Call({"DEL", "k4"}).integer, 1);
  keyspace = c->Call({"INFO", "keyspace"}).str;
  EXPECT_NE(keyspace.find("db0:keys=4,"), std::string::npos) << keyspace;
  EXPECT_EQ(InfoField(keyspace, "raw_keys_hot"), 4);
  EXPECT_EQ(InfoField(keyspace, "raw_keys_ssd"), 0);
  // Written back to SSD: counted there (and in RAM, where the clean copy
  // stays), by walking the SSD index.
  ASSERT_OK(engine_->Flush());
  keyspace = c->Call({"INFO", "keyspace"}).str;
  EXPECT_EQ(InfoField(keyspace, "raw_keys_ssd"), 4) << keyspace;
  EXPECT_EQ(InfoField(keyspace, "models"), 0);

  // The regions of the engine's memory resource, where the values live (the
  // arena may map one ahead meanwhile; nothing is unmapped here).
  auto mapped_now = [&] {
    std::pair<int64_t, int64_t> bytes_regions{0, 0};
    for (const MemoryRegion& r : engine_->memory_resource()->Regions()) {
      bytes_regions.first += static_cast<int64_t>(r.bytes);
      ++bytes_regions.second;
    }
    return bytes_regions;
  };
  const std::pair<int64_t, int64_t> mapped_before = mapped_now();
  const std::string memory = c->Call({"INFO", "memory"}).str;
  const std::pair<int64_t, int64_t> mapped_after = mapped_now();
  EXPECT_EQ(memory.rfind("# Memory\r\n", 0), 0u) << memory;
  const EngineStats s = engine_->Stats();
  EXPECT_EQ(InfoField(memory, "used_memory"), static_cast<int64_t>(s.hot.bytes));
  EXPECT_GT(InfoField(memory, "used_memory"), 0);
  EXPECT_EQ(InfoField(memory, "maxmemory"), 64 << 20);
  EXPECT_GT(InfoField(memory, "used_memory_rss"), 1 << 20);  // this test process
  EXPECT_NE(memory.find("maxmemory_policy:lru\r\n"), std::string::npos);
  EXPECT_GT(mapped_before.first, 0);
  EXPECT_GE(InfoField(memory, "memory_mapped_bytes"), mapped_before.first) << memory;
  EXPECT_LE(InfoField(memory, "memory_mapped_bytes"), mapped_after.first) << memory;
  EXPECT_GE(InfoField(memory, "memory_regions"), mapped_before.second);
  EXPECT_LE(InfoField(memory, "memory_regions"), mapped_after.second);
}

// maxmemory_policy names the hot tier's policy in force, each by its own
// name (docs/protocol.md: lru, leaf-lru or chain).
TEST_F(ServerAccessTest, InfoMemoryNamesTheHotPolicyInForce) {
  engine_options_.hot_policy = EvictionPolicyKind::kChain;
  StartServer();
  auto c = Connect();
  const std::string memory = c->Call({"INFO", "memory"}).str;
  EXPECT_NE(memory.find("\r\nmaxmemory_policy:chain\r\n"), std::string::npos) << memory;
}

}  // namespace
}  // namespace prefixkv
