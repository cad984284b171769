// Every command of the server, through a real TCP connection to an in-process
// server (docs/protocol.md is the contract).
#include "prefixkv/server.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <thread>

#include "glob.h"
#include "tests/server/server_fixture.h"
#include "tests/support/fault_injection_file_system.h"
#include "tests/support/test_util.h"

// The machine's memory as sysinfo(2) reports it to the server, which lowers
// max_request_bytes to it: a test sets a small machine here (0: the
// real one). This executable's sysinfo stands in for the C library's.
static std::atomic<uint64_t> fake_machine_memory_bytes{0};

extern "C" int sysinfo(struct sysinfo* info) {
  const int rc = static_cast<int>(::syscall(SYS_sysinfo, info));
  const uint64_t fake = fake_machine_memory_bytes.load();
  if (rc == 0 && fake != 0) {
    info->totalram = fake;
    info->totalswap = 0;
    info->mem_unit = 1;
  }
  return rc;
}

namespace prefixkv {
namespace {

using testing::Reply;

class ServerTest : public testing::ServerFixture {};

TEST_F(ServerTest, AnswersPingAndEcho) {
  StartServer();
  auto c = Connect();
  EXPECT_EQ(c->Call({"PING"}).str, "PONG");
  EXPECT_EQ(c->Call({"ping", "hello"}).str, "hello");
  EXPECT_EQ(c->Call({"ECHO", std::string("a\0b", 3)}).str, std::string("a\0b", 3));
}

TEST_F(ServerTest, StoresAndReturnsBinaryValues) {
  StartServer();
  auto c = Connect();
  std::string value;
  for (int i = 0; i < 256; ++i) value += static_cast<char>(i);
  EXPECT_EQ(c->Call({"SET", "k", value}).str, "OK");
  Reply got = c->Call({"GET", "k"});
  EXPECT_EQ(got.type, '$');
  EXPECT_EQ(got.str, value);
  EXPECT_EQ(c->Call({"SET", "k", "v2"}).str, "OK");
  EXPECT_EQ(c->Call({"GET", "k"}).str, "v2");
  EXPECT_TRUE(c->Call({"GET", "missing"}).null);
}

TEST_F(ServerTest, ChargesRawKeysToTheValuesOwnerOfTheHotBudget) {
  StartServer();
  auto c = Connect();
  ASSERT_EQ(c->Call({"SET", "user:1", "v"}).str, "OK");
  ASSERT_EQ(c->Call({"SET", "user:2", "w"}).str, "OK");
  EXPECT_EQ(OwnerHot("values").entries, 2u);
  EXPECT_TRUE(engine_->ContainsValue("user:1"));
}

TEST_F(ServerTest, ServesLargeValuesIntact) {
  StartServer();
  auto c = Connect();
  std::string big(3 << 20, 'x');
  for (size_t i = 0; i < big.size(); i += 4093) big[i] = static_cast<char>(i);
  ASSERT_EQ(c->Call({"SET", "big", big}).str, "OK");
  EXPECT_EQ(c->Call({"GET", "big"}).str, big);
}

TEST_F(ServerTest, DeletesAndCountsExistingKeys) {
  StartServer();
  auto c = Connect();
  ASSERT_EQ(c->Call({"MSET", "a", "1", "b", "2", "c", "3"}).str, "OK");
  EXPECT_EQ(c->Call({"EXISTS", "a", "b", "zz", "a"}).integer, 3);
  EXPECT_EQ(c->Call({"DEL", "a", "zz"}).integer, 1);
  EXPECT_EQ(c->Call({"EXISTS", "a"}).integer, 0);
  Reply m = c->Call({"MGET", "a", "b", "c"});
  ASSERT_EQ(m.elems.size(), 3u);
  EXPECT_TRUE(m.elems[0].null);
  EXPECT_EQ(m.elems[1].str, "2");
  EXPECT_EQ(m.elems[2].str, "3");
}

TEST_F(ServerTest, WritesEvictedValuesBackAndPromotesThemOnRead) {
  StartServer(/*hot_capacity_bytes=*/8 << 10);  // room for one 4 KiB value
  auto c = Connect();
  std::string a(4000, 'a'), b(4000, 'b');
  ASSERT_EQ(c->Call({"SET", "a", a}).str, "OK");
  ASSERT_EQ(c->Call({"SET", "b", b}).str, "OK");  // evicts "a" to the SSD tier
  EXPECT_EQ(OwnerHot("values").evictions, 1u);
  EXPECT_EQ(OwnerHot("values").entries, 1u);
  EXPECT_EQ(c->Call({"GET", "a"}).str, a);  // from SSD, promoted (evicting "b")
  const uint64_t hot_hits = OwnerHot("values").hits;
  EXPECT_EQ(c->Call({"GET", "a"}).str, a);
  EXPECT_EQ(OwnerHot("values").hits, hot_hits + 1);  // the second read is from RAM
  EXPECT_EQ(c->Call({"GET", "b"}).str, b);
  EXPECT_EQ(c->Call({"DEL", "a", "b"}).integer, 2);
  EXPECT_EQ(c->Call({"EXISTS", "a", "b"}).integer, 0);
}

TEST_F(ServerTest, StoresValuesLargerThanTheHotTierDirectlyBelowIt) {
  StartServer(/*hot_capacity_bytes=*/8 << 10);
  auto c = Connect();
  std::string big(64 << 10, 'z');
  ASSERT_EQ(c->Call({"SET", "big", "small"}).str, "OK");
  ASSERT_EQ(c->Call({"SET", "big", big}).str, "OK");
  EXPECT_EQ(c->Call({"GET", "big"}).str, big);  // not the stale hot copy
}

TEST_F(ServerTest, ReportsWrongArityAndUnknownCommands) {
  StartServer();
  auto c = Connect();
  EXPECT_EQ(c->Call({"GET"}).str, "ERR wrong number of arguments for 'get' command");
  EXPECT_EQ(c->Call({"GET", "a", "b"}).str,
            "ERR wrong number of arguments for 'get' command");
  EXPECT_EQ(c->Call({"MSET", "a", "1", "b"}).str,
            "ERR wrong number of arguments for 'mset' command");
  EXPECT_EQ(c->Call({"SET", "a", "1", "EXX", "10"}).str, "ERR syntax error");
  EXPECT_EQ(c->Call({"NOSUCH"}).str,
            "ERR unknown command 'NOSUCH', with args beginning with: ");
  // Redis's list (redis-server 7.0.15): every argument while under 128 bytes,
  // the last cut to fit, each up to a NUL, CR and LF as spaces.
  EXPECT_EQ(c->Call({"FOO", "a", "b", "c", "d", "e"}).str,
            "ERR unknown command 'FOO', with args beginning with: 'a' 'b' 'c' 'd' 'e' ");
  EXPECT_EQ(c->Call({"FOO", std::string(120, 'x'), "yyyyyyyyyyyy", "z"}).str,
            "ERR unknown command 'FOO', with args beginning with: '" +
                std::string(120, 'x') + "' 'yyyyy' ");
  EXPECT_EQ(c->Call({"FOO", std::string("\0x", 2), "a\r\nb"}).str,
            "ERR unknown command 'FOO', with args beginning with: '' 'a  b' ");
  EXPECT_EQ(
      c->Call({std::string(200, 'N')}).str,
      "ERR unknown command '" + std::string(128, 'N') + "', with args beginning with: ");
  EXPECT_EQ(c->Call({"PING"}).str, "PONG");  // the connection is still usable
}

TEST_F(ServerTest, RunsATransactionsQueuedCommandsInOrderAtExec) {
  StartServer();
  auto c = Connect();
  auto other = Connect();
  EXPECT_EQ(c->Call({"MULTI"}).str, "OK");
  EXPECT_EQ(c->Call({"SET", "a", "1"}).str, "QUEUED");
  EXPECT_EQ(c->Call({"GET", "a"}).str, "QUEUED");
  EXPECT_EQ(c->Call({"DEL", "a", "b"}).str, "QUEUED");
  EXPECT_EQ(c->Call({"SET", "a", "2", "EX", "0"}).str, "QUEUED");  // fails at EXEC
  EXPECT_EQ(c->Call({"SET", "b", "3"}).str, "QUEUED");
  EXPECT_TRUE(other->Call({"GET", "a"}).null);  // queued, not run
  Reply exec = c->Call({"EXEC"});
  ASSERT_EQ(exec.type, '*');
  ASSERT_EQ(exec.elems.size(), 5u);
  EXPECT_EQ(exec.elems[0].str, "OK");
  EXPECT_EQ(exec.elems[1].str, "1");
  EXPECT_EQ(exec.elems[2].integer, 1);
  EXPECT_TRUE(exec.elems[3].IsError());  // as Redis: the others still run
  EXPECT_EQ(exec.elems[4].str, "OK");
  EXPECT_EQ(other->Call({"GET", "b"}).str, "3");
  EXPECT_EQ(c->Call({"GET", "b"}).str, "3");  // no longer queueing
  EXPECT_EQ(c->Call({"MULTI"}).str, "OK");
  EXPECT_EQ(c->Call({"EXEC"}).elems.size(), 0u);
}

TEST_F(ServerTest, AbortsATransactionWithACommandRefusedWhenQueued) {
  StartServer();
  auto c = Connect();
  ASSERT_EQ(c->Call({"MULTI"}).str, "OK");
  EXPECT_EQ(c->Call({"SET", "a", "1"}).str, "QUEUED");
  EXPECT_EQ(c->Call({"GET"}).str, "ERR wrong number of arguments for 'get' command");
  EXPECT_EQ(c->Call({"NOSUCH", "x"}).str.rfind("ERR unknown command 'NOSUCH'", 0), 0u);
  EXPECT_EQ(c->Call({"EXEC"}).str,
            "EXECABORT Transaction discarded because of previous errors.");
  EXPECT_TRUE(c->Call({"GET", "a"}).null);
  // Only an unknown name aborts too.
  ASSERT_EQ(c->Call({"MULTI"}).str, "OK");
  EXPECT_EQ(c->Call({"SET", "a", "1"}).str, "QUEUED");
  EXPECT_TRUE(c->Call({"NOSUCH"}).IsError());
  EXPECT_TRUE(c->Call({"EXEC"}).IsError());
  EXPECT_TRUE(c->Call({"GET", "a"}).null);
  // An admin command without the permission aborts it as well.
  ASSERT_EQ(c->Call({"MULTI"}).str, "OK");
  EXPECT_TRUE(c->Call({"PKV.AUDIT"}).IsError());
  EXPECT_EQ(c->Call({"EXEC"}).str.rfind("EXECABORT", 0), 0u);
}

// A transaction's queue is bounded by what it holds, not only by its
// argument bytes: 20,000 empty arguments are 120 KB on the wire and 4 bytes
// of arguments, but each kept argument used to cost about 220 bytes (its own
// allocation), uncounted: 24 MB sent that way grew the server by 890 MB, with
// the limit (--max-request-bytes) never reached and client_buffer_bytes at
// 8 MB. Each argument now counts its place in the queue.
TEST_F(ServerTest, ATransactionsQueueCountsEveryArgumentItKeeps) {
  options_.max_request_bytes = 1 << 20;  // the transaction's limit too
  StartServer();
  auto c = Connect();
  auto observer = Connect();
  const auto buffer_bytes = [&] {
    const std::string info = observer->Call({"INFO", "clients"}).str;
    const size_t at = info.find("client_buffer_bytes:");
    return at == std::string::npos ? int64_t{-1} : std::stoll(info.substr(at + 20));
  };
  std::vector<std::string> mget(20'001, "");
  mget[0] = "MGET";
  ASSERT_EQ(c->Call({"MULTI"}).str, "OK");
  EXPECT_EQ(c->Call(mget).str, "QUEUED");
  // (The connection counts its buffers after its reply is on its way.)
  EXPECT_TRUE(testing::WaitUntil([&] {
    return buffer_bytes() >= int64_t{20'000} * static_cast<int64_t>(sizeof(SharedBytes));
  })) << buffer_bytes();
  const std::string refused = c->Call(mget).str;  // 40,000 queued arguments: over 1 MiB
  EXPECT_EQ(refused.rfind("ERR transaction too large", 0), 0u) << refused;
  EXPECT_EQ(c->Call({"EXEC"}).str.rfind("EXECABORT", 0), 0u);
  EXPECT_TRUE(testing::WaitUntil([&] { return buffer_bytes() < (64 << 10); }))
      << buffer_bytes();  // the queue is gone
}

// A transaction's limit is --max-request-bytes as in force, lowered to the
// machine's memory like every request's (INFO server's max_request_bytes):
// the queue used to take the option as given, so with --max-request-bytes
// above RAM + swap a client could queue commands until the server died of
// memory (its write-back blocks in RAM lost). A 4 MiB machine here.
TEST_F(ServerTest, ATransactionsLimitIsTheRequestLimitInForce) {
  options_.max_request_bytes = size_t{1} << 40;
  fake_machine_memory_bytes = 4 << 20;
  StartServer();
  fake_machine_memory_bytes = 0;
  auto c = Connect();
  EXPECT_NE(c->Call({"INFO", "server"}).str.find("max_request_bytes:4194304\r\n"),
            std::string::npos);
  const std::string value(1 << 20, 'v');
  ASSERT_EQ(c->Call({"MULTI"}).str, "OK");
  for (int i = 0; i < 3; ++i) ASSERT_EQ(c->Call({"SET", "k", value}).str, "QUEUED") << i;
  const std::string refused = c->Call({"SET", "k", value}).str;  // over 4 MiB in all
  EXPECT_EQ(refused, "ERR transaction too large: its commands exceed 4194304 bytes");
  EXPECT_EQ(c->Call({"EXEC"}).str.rfind("EXECABORT", 0), 0u);
}

TEST_F(ServerTest, AnswersMisplacedTransactionCommandsAsRedisDoes) {
  StartServer();
  auto c = Connect();
  EXPECT_EQ(c->Call({"EXEC"}).str, "ERR EXEC without MULTI");
  EXPECT_EQ(c->Call({"DISCARD"}).str, "ERR DISCARD without MULTI");
  EXPECT_EQ(c->Call({"WATCH", "k"}).str.rfind("ERR WATCH is not supported", 0), 0u);
  EXPECT_EQ(c->Call({"UNWATCH"}).str, "OK");
  ASSERT_EQ(c->Call({"MULTI"}).str, "OK");
  EXPECT_EQ(c->Call({"MULTI"}).str, "ERR MULTI calls can not be nested");
  EXPECT_EQ(c->Call({"WATCH", "k"}).str, "ERR WATCH inside MULTI is not allowed");
  EXPECT_EQ(c->Call({"SET", "k", "v"}).str, "QUEUED");
  EXPECT_EQ(c->Call({"DISCARD"}).str, "OK");  // drops the queue
  EXPECT_TRUE(c->Call({"GET", "k"}).null);
  ASSERT_EQ(c->Call({"MULTI"}).str, "OK");
  EXPECT_EQ(c->Call({"MULTI"}).type, '-');  // a nested MULTI does not abort
  EXPECT_EQ(c->Call({"SET", "k", "v"}).str, "QUEUED");
  EXPECT_EQ(c->Call({"EXEC"}).elems.size(), 1u);
  EXPECT_EQ(c->Call({"GET", "k"}).str, "v");
}

// A reader on another I/O thread never sees the value a transaction holds
// only between two of its commands.
TEST_F(ServerTest, RunsATransactionWithoutOtherClientsCommandsInBetween) {
  options_.io_threads = 2;
  StartServer();
  auto writer = Connect();
  auto reading = Connect();
  std::string pipeline =
      testing::EncodeCommand({"MULTI"}) + testing::EncodeCommand({"SET", "k", "mid"});
  for (int i = 0; i < 3000; ++i) pipeline += testing::EncodeCommand({"EXISTS", "k"});
  pipeline += testing::EncodeCommand({"DEL", "k"}) + testing::EncodeCommand({"EXEC"});
  std::atomic<bool> done{false};
  std::atomic<int> seen_mid{0}, reads{0};
  std::thread reader([&] {
    while (!done.load()) {
      Reply r = reading->Call({"GET", "k"});
      if (r.str == "mid") ++seen_mid;
      ++reads;
    }
  });
  for (int round = 0; round < 20; ++round) {
    ASSERT_TRUE(writer->SendRaw(pipeline));
    for (int i = 0; i < 3003; ++i) ASSERT_NE(writer->Read().type, 0);
    Reply exec = writer->Read();
    ASSERT_EQ(exec.elems.size(), 3002u);
  }
  done = true;
  reader.join();
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(seen_mid.load(), 0);
}

TEST_F(ServerTest, NamesIdentifiesAndListsItsClients) {
  StartServer();
  auto a = Connect();
  auto b = Connect();
  const int64_t id_a = a->Call({"CLIENT", "ID"}).integer;
  const int64_t id_b = b->Call({"client", "id"}).integer;
  EXPECT_GT(id_a, 0);
  EXPECT_NE(id_a, id_b);
  EXPECT_TRUE(a->Call({"CLIENT", "GETNAME"}).null);
  EXPECT_EQ(a->Call({"CLIENT", "SETNAME", "worker-1"}).str, "OK");
  EXPECT_EQ(a->Call({"CLIENT", "GETNAME"}).str, "worker-1");
  EXPECT_EQ(a->Call({"CLIENT", "SETNAME", "two words"}).str,
            "ERR Client names cannot contain spaces, newlines or special characters.");
  EXPECT_EQ(a->Call({"CLIENT", "GETNAME"}).str, "worker-1");
  const std::string info = a->Call({"CLIENT", "INFO"}).str;
  EXPECT_EQ(info.rfind("id=" + std::to_string(id_a) + " addr=127.0.0.1:", 0), 0u) << info;
  EXPECT_NE(info.find(" name=worker-1 "), std::string::npos) << info;
  EXPECT_NE(info.find(" cmd=client "), std::string::npos) << info;
  ASSERT_EQ(a->Call({"MULTI"}).str, "OK");
  const std::string list = b->Call({"CLIENT", "LIST"}).str;
  EXPECT_EQ(std::count(list.begin(), list.end(), '\n'), 2) << list;
  EXPECT_NE(
      list.find("name=worker-1 age=0 idle=0 flags=x db=0 sub=0 psub=0 ssub=0 multi=0"),
      std::string::npos)
      << list;
  const std::string only_b = b->Call({"CLIENT", "LIST", "ID", std::to_string(id_b)}).str;
  EXPECT_EQ(only_b.rfind("id=" + std::to_string(id_b) + " ", 0), 0u) << only_b;
  EXPECT_EQ(std::count(only_b.begin(), only_b.end(), '\n'), 1);
  EXPECT_EQ(b->Call({"CLIENT", "LIST", "ID", "x"}).str, "ERR Invalid client ID");
  EXPECT_EQ(b->Call({"CLIENT", "KILL", "x"}).str,
            "ERR unknown subcommand 'KILL'. Try CLIENT HELP.");
  EXPECT_TRUE(b->Call({"CLIENT", "SETNAME"}).IsError());
  EXPECT_EQ(b->Call({"CLIENT", "SETINFO", "LIB-NAME", "redis-py"}).str, "OK");
  // A closed client leaves the list.
  a.reset();
  std::string after;
  testing::WaitUntil([&] {  // the server sees the close when its thread runs
    after = b->Call({"CLIENT", "LIST"}).str;
    return std::count(after.begin(), after.end(), '\n') == 1;
  });
  EXPECT_EQ(after.find("worker-1"), std::string::npos) << after;
}

TEST_F(ServerTest, HelloSetsTheNameAndReportsTheClientId) {
  StartServer();
  auto c = Connect();
  const int64_t id = c->Call({"CLIENT", "ID"}).integer;
  Reply hello = c->Call({"HELLO", "2", "SETNAME", "pipeline-7"});
  ASSERT_EQ(hello.elems.size(), 14u);
  EXPECT_EQ(hello.elems[6].str, "id");
  EXPECT_EQ(hello.elems[7].integer, id);
  EXPECT_EQ(c->Call({"CLIENT", "GETNAME"}).str, "pipeline-7");
  EXPECT_EQ(c->Call({"HELLO", "2", "SETNAME", "a\nb"}).str,
            "ERR Client names cannot contain spaces, newlines or special characters.");
  EXPECT_EQ(c->Call({"CLIENT", "GETNAME"}).str, "pipeline-7");
}

// DBSIZE counts each raw key once: INFO's db0 line counts a key in RAM and on
// SSD twice (here 3 for 2 keys).
TEST_F(ServerTest, CountsEachRawKeyOnceWhicheverTiersHoldIt) {
  options_.admin_pass = "adm";
  StartServer(/*hot_capacity_bytes=*/8 << 10);  // room for one 4 KiB value
  auto c = Connect();
  EXPECT_EQ(c->Call({"DBSIZE"}).integer, 0);
  ASSERT_EQ(c->Call({"SET", "a", std::string(4000, 'a')}).str, "OK");
  ASSERT_EQ(c->Call({"SET", "b", std::string(4000, 'b')}).str, "OK");  // a to SSD
  ASSERT_EQ(c->Call({"GET", "a"}).str.size(), 4000u);  // promoted: in RAM and on SSD
  ASSERT_EQ(c->Call({"SET", "c", "small"}).str, "OK");
  EXPECT_EQ(c->Call({"DBSIZE"}).integer, 3);
  EXPECT_EQ(c->Call({"UNLINK", "a", "zz", "c"}).integer, 2);  // UNLINK is DEL
  EXPECT_TRUE(c->Call({"GET", "a"}).null);
  EXPECT_EQ(c->Call({"DBSIZE"}).integer, 1);
  // FLUSHDB also reaches a key only on SSD ("b" was evicted by "a").
  ASSERT_EQ(c->Call({"AUTH", "admin", "adm"}).str, "OK");
  EXPECT_EQ(c->Call({"FLUSHDB"}).str, "OK");
  EXPECT_EQ(c->Call({"DBSIZE"}).integer, 0);
  EXPECT_TRUE(c->Call({"GET", "b"}).null);
}

// A fake clock at a plausible Unix time (2026) that outlives the fixture's
// engine (TearDown closes it after the test body).
FakeClock& FakeUnixClock() {
  static FakeClock* clock = new FakeClock();
  clock->SetNanos(1'780'000'000'000ull * 1'000'000);
  return *clock;
}

// A key's expiry runs on the engine's clock: SET EX, TTL and PTTL, EXPIRE
// and PERSIST, and an expired key is absent to every command.
TEST_F(ServerTest, ExpiresKeysOnTheEngineClock) {
  FakeClock& clock = FakeUnixClock();
  engine_options_.clock = &clock;
  StartServer();
  auto c = Connect();
  ASSERT_EQ(c->Call({"SET", "k", "v", "EX", "10"}).str, "OK");
  EXPECT_EQ(c->Call({"TTL", "k"}).integer, 10);
  EXPECT_EQ(c->Call({"PTTL", "k"}).integer, 10000);
  clock.AdvanceMillis(9499);
  EXPECT_EQ(c->Call({"TTL", "k"}).integer, 1);  // rounded, as Redis does
  EXPECT_EQ(c->Call({"GET", "k"}).str, "v");
  clock.AdvanceMillis(501);
  EXPECT_TRUE(c->Call({"GET", "k"}).null);
  EXPECT_EQ(c->Call({"EXISTS", "k"}).integer, 0);
  EXPECT_EQ(c->Call({"TTL", "k"}).integer, -2);
  EXPECT_EQ(c->Call({"TYPE", "k"}).str, "none");
  ASSERT_EQ(c->Call({"SET", "p", "v"}).str, "OK");
  EXPECT_EQ(c->Call({"TTL", "p"}).integer, -1);
  EXPECT_EQ(c->Call({"PERSIST", "p"}).integer, 0);
  EXPECT_EQ(c->Call({"PEXPIRE", "p", "1500"}).integer, 1);
  EXPECT_EQ(c->Call({"PTTL", "p"}).integer, 1500);
  EXPECT_EQ(c->Call({"PERSIST", "p"}).integer, 1);
  EXPECT_EQ(c->Call({"TTL", "p"}).integer, -1);
  const int64_t now_s = static_cast<int64_t>(clock.UnixMillis() / 1000);
  EXPECT_EQ(c->Call({"EXPIREAT", "p", std::to_string(now_s + 100)}).integer, 1);
  EXPECT_EQ(c->Call({"TTL", "p"}).integer, 100);
  EXPECT_EQ(c->Call({"EXPIRE", "p", "50", "GT"}).integer, 0);
  EXPECT_EQ(c->Call({"EXPIRE", "p", "50", "LT"}).integer, 1);
  EXPECT_EQ(c->Call({"EXPIRE", "p", "60", "NX"}).integer, 0);
  EXPECT_EQ(c->Call({"EXPIRE", "zz", "60"}).integer, 0);
  EXPECT_EQ(c->Call({"EXPIRE", "p", "-1"}).integer, 1);  // in the past: removed
  EXPECT_EQ(c->Call({"EXISTS", "p"}).integer, 0);
  EXPECT_EQ(c->Call({"EXPIRE", "p", "x"}).str,
            "ERR value is not an integer or out of range");
  EXPECT_EQ(c->Call({"EXPIRE", "p", "10", "NX", "XX"}).str,
            "ERR NX and XX, GT or LT options at the same time are not compatible");
  EXPECT_EQ(c->Call({"EXPIRE", "p", "10", "GT", "LT"}).str,
            "ERR GT and LT options at the same time are not compatible");
  EXPECT_EQ(c->Call({"EXPIRE", "p", "10", "SOON"}).str, "ERR Unsupported option SOON");
  EXPECT_EQ(c->Call({"EXPIRE", "p", "9223372036854775807"}).str,
            "ERR invalid expire time in 'expire' command");
}

// EXISTS and TYPE of a key whose record cannot be read (an SSD read error,
// after a restart when the key's expiry is not known yet) answer the error,
// as GET does: they used to answer 0 and "none", a present key reported
// absent to a client that then, say, SET NX'd it.
TEST_F(ServerTest, ExistsAndTypeAnswerAFailedReadAsAnError) {
  FaultInjectionFileSystem fs;
  engine_options_.file_system = &fs;
  StartServer();
  {
    auto c = Connect();
    ASSERT_EQ(c->Call({"SET", "k", "v"}).str, "OK");
  }
  server_->Stop();
  ASSERT_OK(engine_->Close());
  StartServer();  // "k" is on SSD only, and not known to the catalog
  auto c = Connect();
  fs.AddFault({.op = FaultOp::kRead, .path_contains = ".seg"});
  const Reply exists = c->Call({"EXISTS", "k"});
  EXPECT_TRUE(exists.IsError()) << exists.integer;
  const Reply type = c->Call({"TYPE", "k"});
  EXPECT_TRUE(type.IsError()) << type.str;
  EXPECT_TRUE(c->Call({"GET", "k"}).IsError());
  EXPECT_GT(fs.faults_injected(), 0u);
  fs.ClearFaults();
  EXPECT_EQ(c->Call({"EXISTS", "k", "k"}).integer, 2);
  EXPECT_EQ(c->Call({"TYPE", "k"}).str, "string");
  EXPECT_EQ(c->Call({"EXISTS", "absent"}).integer, 0);
  EXPECT_EQ(c->Call({"TYPE", "absent"}).str, "none");
  server_->Stop();
  ASSERT_OK(engine_->Close());
  server_.reset();
  engine_.reset();  // before `fs` goes
}

// The most negative milliseconds are a time in the past, as in Redis 7
// (checked against redis-server 7.0.15): only a conversion of seconds, or the
// addition of now, can overflow.
TEST_F(ServerTest, ExpiresAtTheMostNegativeMillisecondsAsRedisDoes) {
  FakeClock& clock = FakeUnixClock();
  engine_options_.clock = &clock;
  StartServer();
  auto c = Connect();
  for (const char* cmd : {"PEXPIRE", "PEXPIREAT"}) {
    ASSERT_EQ(c->Call({"SET", "k", "v"}).str, "OK");
    EXPECT_EQ(c->Call({cmd, "k", "-9223372036854775808"}).integer, 1) << cmd;
    EXPECT_EQ(c->Call({"EXISTS", "k"}).integer, 0) << cmd;
  }
  ASSERT_EQ(c->Call({"SET", "k", "v"}).str, "OK");
  EXPECT_EQ(c->Call({"EXPIREAT", "k", "-9223372036854775808"}).str,
            "ERR invalid expire time in 'expireat' command");
  EXPECT_EQ(c->Call({"EXPIRE", "k", "-9223372036854775"}).integer, 1);
  EXPECT_EQ(c->Call({"EXISTS", "k"}).integer, 0);
}

// EXPIRETIME / PEXPIRETIME (Redis 7): the key's deadline as a Unix time,
// seconds rounded as Redis rounds them (redis-server 7.0.15: PXAT
// 99999999999500 gives 100000000000, ...499 gives 99999999999); -1 without
// expiry, -2 missing or expired.
TEST_F(ServerTest, ExpireTimeAnswersTheDeadlineAsRedisDoes) {
  FakeClock& clock = FakeUnixClock();
  engine_options_.clock = &clock;
  StartServer();
  auto c = Connect();
  const uint64_t now_ms = clock.UnixMillis();
  const uint64_t at_ms = now_ms + 10'500;
  ASSERT_EQ(c->Call({"SET", "k", "v", "PXAT", std::to_string(at_ms)}).str, "OK");
  ASSERT_EQ(c->Call({"SET", "j", "v", "PXAT", std::to_string(at_ms - 1)}).str, "OK");
  ASSERT_EQ(c->Call({"SET", "forever", "v"}).str, "OK");
  clock.AdvanceMillis(3000);  // the deadline, not the time left
  EXPECT_EQ(c->Call({"PEXPIRETIME", "k"}).integer, static_cast<int64_t>(at_ms));
  EXPECT_EQ(c->Call({"EXPIRETIME", "k"}).integer, static_cast<int64_t>(at_ms / 1000 + 1));
  EXPECT_EQ(c->Call({"EXPIRETIME", "j"}).integer, static_cast<int64_t>(at_ms / 1000));
  EXPECT_EQ(c->Call({"expiretime", "forever"}).integer, -1);
  EXPECT_EQ(c->Call({"PEXPIRETIME", "forever"}).integer, -1);
  EXPECT_EQ(c->Call({"EXPIRETIME", "missing"}).integer, -2);
  EXPECT_EQ(c->Call({"EXPIRETIME"}).str,
            "ERR wrong number of arguments for 'expiretime' command");
  clock.AdvanceMillis(7500);
  EXPECT_EQ(c->Call({"PEXPIRETIME", "k"}).integer, -2);
}

// SET's options: NX, XX, GET, KEEPTTL, EX / PX / EXAT / PXAT, with Redis'
// replies and errors.
TEST_F(ServerTest, TakesSetsOptionsAsRedisDoes) {
  FakeClock& clock = FakeUnixClock();
  engine_options_.clock = &clock;
  StartServer();
  auto c = Connect();
  EXPECT_TRUE(c->Call({"SET", "k", "1", "XX"}).null);
  EXPECT_EQ(c->Call({"SET", "k", "1", "NX"}).str, "OK");
  EXPECT_TRUE(c->Call({"SET", "k", "2", "NX"}).null);
  EXPECT_EQ(c->Call({"SET", "k", "2", "nx", "GET"}).str, "1");  // not replaced
  EXPECT_EQ(c->Call({"SET", "k", "3", "XX", "GET", "PX", "2500"}).str, "1");
  EXPECT_EQ(c->Call({"PTTL", "k"}).integer, 2500);
  EXPECT_EQ(c->Call({"SET", "k", "4", "KEEPTTL"}).str, "OK");
  EXPECT_EQ(c->Call({"PTTL", "k"}).integer, 2500);
  EXPECT_EQ(c->Call({"SET", "k", "5"}).str, "OK");
  EXPECT_EQ(c->Call({"PTTL", "k"}).integer, -1);
  const uint64_t now_ms = clock.UnixMillis();
  EXPECT_EQ(c->Call({"SET", "k", "6", "PXAT", std::to_string(now_ms + 700)}).str, "OK");
  EXPECT_EQ(c->Call({"PTTL", "k"}).integer, 700);
  EXPECT_EQ(c->Call({"SET", "k", "7", "EXAT", std::to_string(now_ms / 1000 + 3)}).str,
            "OK");
  EXPECT_EQ(c->Call({"PTTL", "k"}).integer, static_cast<int64_t>(3000 - now_ms % 1000));
  EXPECT_TRUE(c->Call({"SET", "new", "v", "GET"}).null);
  EXPECT_EQ(c->Call({"GET", "new"}).str, "v");
  EXPECT_EQ(c->Call({"SET", "k", "v", "NX", "XX"}).str, "ERR syntax error");
  EXPECT_EQ(c->Call({"SET", "k", "v", "EX", "1", "PX", "5"}).str, "ERR syntax error");
  EXPECT_EQ(c->Call({"SET", "k", "v", "EX", "1", "KEEPTTL"}).str, "ERR syntax error");
  EXPECT_EQ(c->Call({"SET", "k", "v", "EX"}).str, "ERR syntax error");
  EXPECT_EQ(c->Call({"SET", "k", "v", "FOREVER"}).str, "ERR syntax error");
  EXPECT_EQ(c->Call({"SET", "k", "v", "EX", "ten"}).str,
            "ERR value is not an integer or out of range");
  EXPECT_EQ(c->Call({"SET", "k", "v", "EX", "0"}).str,
            "ERR invalid expire time in 'set' command");
  EXPECT_EQ(c->Call({"SET", "k", "v", "PX", "-5"}).str,
            "ERR invalid expire time in 'set' command");
  EXPECT_EQ(c->Call({"GET", "k"}).str, "7") << "a refused SET changes nothing";
}

// SET's options are all read before the expiry's number is checked, and an
// option given twice takes its last value, as redis-server 7.0.15 answers
// (each reply below is its own): a second EX (PX, EXAT, PXAT), NX, XX or
// KEEPTTL used to be a syntax error here, and a bad number before a syntax
// error was reported instead of it.
TEST_F(ServerTest, TakesRepeatedSetOptionsAsRedisDoes) {
  FakeClock& clock = FakeUnixClock();
  engine_options_.clock = &clock;
  StartServer();
  auto c = Connect();
  const uint64_t now_s = clock.UnixMillis() / 1000;
  EXPECT_EQ(c->Call({"SET", "k", "1", "EX", "10", "EX", "20"}).str, "OK");
  EXPECT_EQ(c->Call({"PTTL", "k"}).integer, 20000);
  EXPECT_EQ(c->Call({"SET", "k", "2", "PX", "10", "px", "30"}).str, "OK");
  EXPECT_EQ(c->Call({"PTTL", "k"}).integer, 30);
  EXPECT_EQ(c->Call({"SET", "k", "3", "EXAT", std::to_string(now_s + 100), "EXAT",
                     std::to_string(now_s + 50)})
                .str,
            "OK");
  EXPECT_EQ(c->Call({"TTL", "k"}).integer, 50);
  EXPECT_EQ(c->Call({"SET", "k", "4", "KEEPTTL", "KEEPTTL"}).str, "OK");
  EXPECT_EQ(c->Call({"TTL", "k"}).integer, 50);
  EXPECT_EQ(c->Call({"SET", "k", "5", "XX", "XX"}).str, "OK");
  EXPECT_TRUE(c->Call({"SET", "k", "6", "NX", "NX"}).null);
  EXPECT_EQ(c->Call({"SET", "k", "7", "EX", "ten", "EX", "10"}).str, "OK");
  EXPECT_EQ(c->Call({"SET", "k", "8", "EX", "0", "EX", "10"}).str, "OK");
  EXPECT_EQ(c->Call({"SET", "k", "v", "EX", "10", "EX", "ten"}).str,
            "ERR value is not an integer or out of range");
  EXPECT_EQ(c->Call({"SET", "k", "v", "EX", "10", "EX", "0"}).str,
            "ERR invalid expire time in 'set' command");
  EXPECT_EQ(c->Call({"SET", "k", "v", "EX", "ten", "NX", "XX"}).str, "ERR syntax error");
  EXPECT_EQ(c->Call({"SET", "k", "v", "EX", "0", "FOREVER"}).str, "ERR syntax error");
  EXPECT_EQ(c->Call({"SET", "k", "v", "PX", "5", "EX", "1"}).str, "ERR syntax error");
  EXPECT_EQ(c->Call({"SET", "k", "v", "KEEPTTL", "PXAT", "5"}).str, "ERR syntax error");
  EXPECT_EQ(c->Call({"GET", "k"}).str, "8") << "a refused SET changes nothing";
  EXPECT_EQ(c->Call({"TTL", "k"}).integer, 10);
}

// An integer argument is read as Redis's string2ll reads it: "01", "-0" and
// "+5" are not integers (SET PX 01 answered OK, XRANGE COUNT -0 an empty
// page); "0" and "-5" are.
TEST_F(ServerTest, RefusesIntegersWithALeadingZeroOrSignAsRedisDoes) {
  StartServer();
  auto c = Connect();
  constexpr std::string_view kNotInteger = "ERR value is not an integer or out of range";
  for (const char* n : {"01", "-0", "+5", "00", "-01", " 5"}) {
    SCOPED_TRACE(n);
    EXPECT_EQ(c->Call({"SET", "k", "v", "PX", n}).str, kNotInteger);
    EXPECT_EQ(c->Call({"PEXPIRE", "k", n}).str, kNotInteger);
    EXPECT_EQ(c->Call({"XRANGE", "prefixkv:events", "-", "+", "COUNT", n}).str,
              kNotInteger);
    EXPECT_EQ(c->Call({"XREAD", "COUNT", n, "STREAMS", "prefixkv:events", "0"}).str,
              kNotInteger);
    EXPECT_EQ(c->Call({"SCAN", "0", "COUNT", n}).str, kNotInteger);
    EXPECT_EQ(c->Call({"SELECT", n}).str, kNotInteger);
  }
  EXPECT_TRUE(c->Call({"GET", "k"}).null) << "a refused SET stores nothing";
  EXPECT_EQ(c->Call({"XREAD", "BLOCK", "-1", "STREAMS", "prefixkv:events", "$"}).str,
            "ERR timeout is negative");
  EXPECT_EQ(c->Call({"SET", "k", "v", "PX", "0"}).str,
            "ERR invalid expire time in 'set' command");
  EXPECT_EQ(c->Call({"SET", "k", "v", "EX", "-5"}).str,
            "ERR invalid expire time in 'set' command");
  EXPECT_EQ(c->Call({"SELECT", "0"}).str, "OK");
}

// SCAN's cursor is read as Redis reads it (strtoul): a sign, leading zeros and
// the empty text are cursors ("-1" is 2^64 - 1, past every key), a leading
// space, trailing junk or a value past 2^64 - 1 are not (replies of
// redis-server 7.0.15).
TEST_F(ServerTest, ReadsScanCursorsAsRedisDoes) {
  StartServer();
  auto c = Connect();
  ASSERT_EQ(c->Call({"SET", "k", "v"}).str, "OK");
  for (const std::string& cursor :
       std::vector<std::string>{"+0", "-0", "", "00", std::string("0\0x", 3)}) {
    SCOPED_TRACE(cursor);
    Reply r = c->Call({"SCAN", cursor});
    ASSERT_EQ(r.elems.size(), 2u) << r.str;
    EXPECT_EQ(r.elems[0].str, "0");
    ASSERT_EQ(r.elems[1].elems.size(), 1u);
    EXPECT_EQ(r.elems[1].elems[0].str, "k");
  }
  for (const char* cursor : {"-1", "18446744073709551615", "-18446744073709551615"}) {
    SCOPED_TRACE(cursor);
    EXPECT_EQ(c->Call({"SCAN", cursor}).elems.size(), 2u);
  }
  for (const char* cursor : {" 0", "0 ", "-", "+", "+-1", "- 1", "0x1", "1.5",
                             "18446744073709551616", "-18446744073709551616"}) {
    SCOPED_TRACE(cursor);
    EXPECT_EQ(c->Call({"SCAN", cursor}).str, "ERR invalid cursor");
  }
}

// SCAN walks the raw keys' names with MATCH, COUNT and TYPE; KEYS lists them
// with the same glob.
TEST_F(ServerTest, ScansAndListsKeysByGlob) {
  StartServer(/*hot_capacity_bytes=*/16 << 10);  // most of them on SSD only
  auto c = Connect();
  std::set<std::string> all;
  for (int i = 0; i < 40; ++i) {
    const std::string k = (i % 2 == 0 ? "model@0@" : "other:") + std::to_string(i);
    ASSERT_EQ(c->Call({"SET", k, std::string(1000, 'x')}).str, "OK");
    all.insert(k);
  }
  std::set<std::string> seen, matched;
  std::string cursor = "0";
  int pages = 0;
  do {
    Reply r = c->Call({"SCAN", cursor, "COUNT", "5"});
    ASSERT_EQ(r.elems.size(), 2u);
    cursor = r.elems[0].str;
    for (const Reply& k : r.elems[1].elems) seen.insert(k.str);
    ++pages;
  } while (cursor != "0" && pages < 100);
  EXPECT_EQ(seen, all);
  EXPECT_GT(pages, 4);
  cursor = "0";
  do {
    Reply r = c->Call({"SCAN", cursor, "MATCH", "model@?@[0-9]*", "COUNT", "1000"});
    cursor = r.elems[0].str;
    for (const Reply& k : r.elems[1].elems) matched.insert(k.str);
  } while (cursor != "0");
  EXPECT_EQ(matched.size(), 20u);
  EXPECT_EQ(c->Call({"SCAN", "0", "COUNT", "1000", "TYPE", "hash"}).elems[1].elems.size(),
            0u);
  EXPECT_EQ(
      c->Call({"SCAN", "0", "COUNT", "1000", "TYPE", "string"}).elems[1].elems.size(),
      40u);
  EXPECT_EQ(c->Call({"KEYS", "other:1*"}).elems.size(), 6u);  // 1, 11, 13, 15, 17, 19
  EXPECT_EQ(c->Call({"KEYS", "*"}).elems.size(), 40u);
  EXPECT_EQ(c->Call({"SCAN", "x"}).str, "ERR invalid cursor");
  EXPECT_EQ(c->Call({"SCAN", "0", "COUNT", "0"}).str, "ERR syntax error");
  EXPECT_EQ(c->Call({"SCAN", "0", "COUNT"}).str, "ERR syntax error");
  EXPECT_EQ(c->Call({"SCAN", "0", "LIMIT", "3"}).str, "ERR syntax error");
}

TEST(GlobMatch, MatchesAsRedisDoes) {
  using server::GlobMatch;
  EXPECT_TRUE(GlobMatch("*", ""));
  // The empty name: "" and "*" match it, longer runs of stars do not, as
  // redis-server 7.0.15's KEYS and SCAN MATCH answer.
  EXPECT_TRUE(GlobMatch("", ""));
  EXPECT_FALSE(GlobMatch("**", ""));
  EXPECT_FALSE(GlobMatch("***", ""));
  EXPECT_TRUE(GlobMatch("**", "a"));
  EXPECT_TRUE(GlobMatch("a*b", "ab"));
  EXPECT_TRUE(GlobMatch("a*b", "a-x-b"));
  EXPECT_FALSE(GlobMatch("a*b", "a-x-bc"));
  EXPECT_TRUE(GlobMatch("h?llo", "hallo"));
  EXPECT_FALSE(GlobMatch("h?llo", "hllo"));
  EXPECT_TRUE(GlobMatch("h[ae]llo", "hello"));
  EXPECT_FALSE(GlobMatch("h[ae]llo", "hillo"));
  EXPECT_TRUE(GlobMatch("h[^e]llo", "hallo"));
  EXPECT_FALSE(GlobMatch("h[^e]llo", "hello"));
  EXPECT_TRUE(GlobMatch("h[a-b]llo", "hbllo"));
  EXPECT_TRUE(GlobMatch("h[b-a]llo", "hallo"));  // a reversed range, as Redis
  EXPECT_TRUE(GlobMatch("a\\*b", "a*b"));
  EXPECT_FALSE(GlobMatch("a\\*b", "axb"));
  EXPECT_TRUE(GlobMatch("[\\]]", "]"));
  EXPECT_FALSE(GlobMatch("ab[", "ab["));  // an unclosed set, as Redis reads it
  EXPECT_TRUE(GlobMatch("ab[c", "abc"));
  EXPECT_TRUE(GlobMatch("a\\", "a\\"));  // a trailing backslash is itself
  EXPECT_TRUE(GlobMatch("model@*@*", "model@0@abc"));
  // Backtracking stays bounded (Redis' guard): this returns at once.
  EXPECT_FALSE(GlobMatch("a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b", std::string(5000, 'a')));
  // Nesting: as redis-server 7.0.15 answers, "*a" 1000 times matches a long
  // run of 'a's, 1001 times does not, and a trailing '*' adds no level.
  const std::string run(5000, 'a');
  const auto stars = [](int n, std::string_view tail) {
    std::string p;
    for (int i = 0; i < n; ++i) p += "*a";
    return p + std::string(tail);
  };
  EXPECT_TRUE(GlobMatch(stars(1000, ""), run));
  EXPECT_FALSE(GlobMatch(stars(1001, ""), run));
  EXPECT_TRUE(GlobMatch(stars(1000, "*"), run));
  EXPECT_FALSE(GlobMatch(stars(1001, "*"), run));
}

// A pattern of many stars recursed once per star matched: "*a" 65,536 times
// against the longest key (64 KiB of 'a') took about 3 MB of an I/O
// thread's stack, and killed the server (its write-back blocks with it) where
// threads get 2 MB: glibc's default under `ulimit -s unlimited`, set here for
// the server's threads. As in Redis (stringmatchlen's nesting guard), a
// pattern nested deeper than 1000 stars matches nothing.
TEST_F(ServerTest, ADeeplyNestedPatternDoesNotOverflowAnIoThreadsStack) {
  pthread_attr_t old_default, small;
  ASSERT_EQ(pthread_getattr_default_np(&old_default), 0);
  ASSERT_EQ(pthread_attr_init(&small), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&small, 2 << 20), 0);
  ASSERT_EQ(pthread_setattr_default_np(&small), 0);
  StartServer();
  ASSERT_EQ(pthread_setattr_default_np(&old_default), 0);
  pthread_attr_destroy(&small);
  pthread_attr_destroy(&old_default);
  auto c = Connect();
  constexpr size_t kDepth = 64 << 10;  // the longest key
  ASSERT_EQ(c->Call({"SET", std::string(kDepth, 'a'), "v"}).str, "OK");
  ASSERT_EQ(c->Call({"SET", "witness", "kept"}).str, "OK");
  std::string pattern;
  for (size_t i = 0; i < kDepth; ++i) pattern += "*a";
  EXPECT_EQ(c->Call({"KEYS", pattern}).elems.size(), 0u);
  const Reply page = c->Call({"SCAN", "0", "MATCH", pattern, "COUNT", "100"});
  ASSERT_EQ(page.elems.size(), 2u) << page.str;
  EXPECT_EQ(page.elems[1].elems.size(), 0u);
  EXPECT_EQ(c->Call({"GET", "witness"}).str, "kept");
  EXPECT_EQ(c->Call({"KEYS", "*a*a*a"}).elems.size(), 1u);  // a shallow one matches
}

TEST_F(ServerTest, RequiresAuthWhenAPasswordIsSet) {
  options_.requirepass = "s3cret";
  StartServer();
  auto c = Connect();
  EXPECT_EQ(c->Call({"GET", "k"}).str, "NOAUTH Authentication required.");
  EXPECT_EQ(c->Call({"NOSUCH"}).str, "NOAUTH Authentication required.");
  EXPECT_EQ(c->Call({"AUTH", "wrong"}).type, '-');
  EXPECT_EQ(c->Call({"SET", "k", "v"}).str, "NOAUTH Authentication required.");
  EXPECT_EQ(c->Call({"AUTH", "s3cret"}).str, "OK");
  EXPECT_EQ(c->Call({"SET", "k", "v"}).str, "OK");
  auto other = Connect();  // authentication is per connection
  EXPECT_EQ(other->Call({"GET", "k"}).str, "NOAUTH Authentication required.");
  EXPECT_EQ(other->Call({"AUTH", "default", "s3cret"}).str, "OK");
  EXPECT_EQ(other->Call({"GET", "k"}).str, "v");
}

TEST_F(ServerTest, RejectsAuthWhenNoPasswordIsSet) {
  StartServer();
  auto c = Connect();
  EXPECT_TRUE(c->Call({"AUTH", "x"}).IsError());
  EXPECT_EQ(c->Call({"PING"}).str, "PONG");
}

TEST_F(ServerTest, NegotiatesOnlyProtocolTwoWithHello) {
  options_.requirepass = "pw";
  StartServer();
  auto c = Connect();
  EXPECT_EQ(c->Call({"HELLO", "3"}).str.rfind("NOPROTO", 0), 0u);
  EXPECT_EQ(c->Call({"HELLO", "2"}).str.rfind("NOAUTH", 0), 0u);
  Reply hello = c->Call({"HELLO", "2", "AUTH", "default", "pw"});
  ASSERT_EQ(hello.type, '*');
  ASSERT_EQ(hello.elems.size(), 14u);
  EXPECT_EQ(hello.elems[1].str, "prefixkv");
  EXPECT_EQ(hello.elems[5].integer, 2);
  EXPECT_EQ(c->Call({"GET", "x"}).type, '$');  // authenticated by HELLO
  EXPECT_TRUE(c->Call({"HELLO", "x"}).IsError());
}

TEST_F(ServerTest, ReportsEveryTierAndOwnerCounterInInfo) {
  StartServer();
  auto c = Connect();
  ASSERT_EQ(c->Call({"SET", "k", "v"}).str, "OK");
  std::string info = c->Call({"INFO"}).str;
  for (const char* field : {"# Server",
                            "tcp_port:",
                            "connected_clients:1",
                            "total_commands_processed:",
                            "# Tier_hot",
                            "hot_capacity_bytes:67108864",
                            "hot_entries:1",
                            "hot_bytes:",
                            "hot_pinned_bytes:",
                            "hot_hits:",
                            "hot_misses:",
                            "hot_inserts:1",
                            "hot_removes:",
                            "hot_evictions:",
                            "hot_spills:",
                            "hot_corruptions:",
                            "hot_io_errors:",
                            "hot_external_bytes:",
                            "hot_dirty_blocks:1",
                            "# Owners",
                            "owner0:name=values,entries=1,bytes=",
                            "# Tier_ssd",
                            "ssd_entries:0",
                            "ssd_queued_blocks:",
                            "# Wear",
                            "ssd_written_bytes:",
                            "ssd_write_bytes_per_day:",
                            "ssd_projected_lifetime_days:0.0",
                            "ssd_admission:all",
                            "ssd_admission_skipped_blocks:0"}) {
    EXPECT_NE(info.find(field), std::string::npos) << field << "\n" << info;
  }
  std::string tiers_only = c->Call({"INFO", "tiers"}).str;
  EXPECT_EQ(tiers_only.find("# Server"), std::string::npos);
  EXPECT_NE(tiers_only.find("hot_entries"), std::string::npos);
  std::string ssd_only = c->Call({"INFO", "tier_ssd"}).str;
  EXPECT_EQ(ssd_only.find("hot_entries"), std::string::npos);
  EXPECT_NE(ssd_only.find("ssd_entries"), std::string::npos);
  EXPECT_EQ(ssd_only.find("# Wear"), std::string::npos);
  std::string wear_only = c->Call({"INFO", "wear"}).str;
  EXPECT_EQ(wear_only.find("ssd_entries"), std::string::npos);
  EXPECT_NE(wear_only.find("ssd_written_bytes:"), std::string::npos);
}

TEST_F(ServerTest, DescribesItsCommandsForRedisCli) {
  StartServer();
  auto c = Connect();
  int64_t count = c->Call({"COMMAND", "COUNT"}).integer;
  EXPECT_GE(count, 20);
  EXPECT_EQ(static_cast<int64_t>(c->Call({"COMMAND"}).elems.size()), count);
  Reply info = c->Call({"COMMAND", "INFO", "get", "nosuch"});
  ASSERT_EQ(info.elems.size(), 2u);
  EXPECT_EQ(info.elems[0].elems[0].str, "get");
  EXPECT_EQ(info.elems[0].elems[1].integer, 2);
  EXPECT_TRUE(info.elems[1].null);
  EXPECT_EQ(c->Call({"COMMAND", "DOCS"}).type, '*');
  EXPECT_EQ(c->Call({"CONFIG", "GET", "appendonly"}).elems.size(), 2u);
  EXPECT_EQ(c->Call({"SELECT", "0"}).str, "OK");
  EXPECT_EQ(c->Call({"SELECT", "1"}).str, "ERR DB index is out of range");
  EXPECT_EQ(c->Call({"SELECT", "-3"}).str, "ERR DB index is out of range");
  // Past an int, Redis's own text (redis-server 7.0.15).
  EXPECT_EQ(c->Call({"SELECT", "-2147483648"}).str, "ERR DB index is out of range");
  for (const char* n : {"2147483648", "-2147483649", "9223372036854775807"}) {
    EXPECT_EQ(c->Call({"SELECT", n}).str,
              "ERR value is out of range, value must between -2147483648 and 2147483647")
        << n;
  }
  EXPECT_EQ(c->Call({"SELECT", "abc"}).str,
            "ERR value is not an integer or out of range");
  EXPECT_EQ(c->Call({"SELECT", "-"}).str, "ERR value is not an integer or out of range");
  EXPECT_EQ(c->Call({"SELECT", "99999999999999999999"}).str,
            "ERR value is not an integer or out of range");
  // The error names what COMMAND does take (there is no COMMAND HELP).
  EXPECT_EQ(c->Call({"COMMAND", "HELP"}).str,
            "ERR unknown subcommand 'HELP'. COMMAND takes COUNT, INFO name... or DOCS.");
}

TEST_F(ServerTest, QuitRepliesThenCloses) {
  StartServer();
  auto c = Connect();
  ASSERT_TRUE(
      c->SendRaw(testing::EncodeCommand({"QUIT"}) + testing::EncodeCommand({"PING"})));
  EXPECT_EQ(c->Read().str, "OK");
  EXPECT_TRUE(c->ReadsEof());  // the PING after QUIT is never run
}

TEST_F(ServerTest, ReportsStatsAndACleanAudit) {
  options_.admin_pass = "adm";
  StartServer();
  auto c = Connect();
  ASSERT_EQ(c->Call({"SET", "k", "v"}).str, "OK");
  Reply stats = c->Call({"PKV.STATS"});
  ASSERT_EQ(stats.type, '*');
  std::map<std::string, int64_t> by_name;
  for (size_t i = 0; i + 1 < stats.elems.size(); i += 2) {
    by_name[stats.elems[i].str] = stats.elems[i + 1].integer;
  }
  EXPECT_EQ(stats.elems[0].str, "hot.capacity_bytes");
  EXPECT_EQ(by_name["hot.entries"], 1);
  EXPECT_EQ(by_name["owner.values.entries"], 1);
  EXPECT_EQ(by_name["owner.values.bytes"], by_name["hot.bytes"]);
  EXPECT_EQ(by_name["hot.dirty_blocks"], 1);
  EXPECT_TRUE(by_name.contains("ssd.corruptions"));
  ASSERT_EQ(c->Call({"AUTH", "admin", "adm"}).str, "OK");
  Reply audit = c->Call({"PKV.AUDIT"});  // flushes first
  EXPECT_EQ(audit.type, '*') << audit.str;
  EXPECT_TRUE(audit.elems.empty());
  EXPECT_EQ(engine_->Stats().dirty_blocks, 0u);
}

TEST_F(ServerTest, AnswersPipelinedCommandsInOrder) {
  StartServer();
  auto c = Connect();
  std::string batch;
  for (int i = 0; i < 200; ++i) {
    batch += testing::EncodeCommand({"SET", "k" + std::to_string(i), std::to_string(i)});
    batch += testing::EncodeCommand({"GET", "k" + std::to_string(i)});
  }
  ASSERT_TRUE(c->SendRaw(batch));
  for (int i = 0; i < 200; ++i) {
    EXPECT_EQ(c->Read().str, "OK");
    EXPECT_EQ(c->Read().str, std::to_string(i));
  }
}

// A connection's buffers grow for a big request or reply and are given back
// once it is done; what it keeps for small requests goes once it idles. After
// 2,000 pipelined SETs and a 230 KB MGET reply a connection used to keep
// the reply's 256 KiB text buffer, the 64 KiB read buffer and a 32 KiB
// argument list for as long as it stayed open.
TEST_F(ServerTest, GivesBuffersBackOnceARequestIsDoneAndWhenIdle) {
  FakeClock clock;
  options_.clock = &clock;
  options_.idle_check_interval_ms = 3600 * 1000;  // the test sweeps
  StartServer();
  auto c = Connect();
  std::string batch;
  std::vector<std::string> mget = {"MGET"};
  for (int i = 0; i < 2000; ++i) {
    const std::string key = "k" + std::to_string(i);
    batch += testing::EncodeCommand({"SET", key, std::string(100, 'a' + i % 26)});
    mget.push_back(key);
  }
  ASSERT_TRUE(c->SendRaw(batch));
  for (int i = 0; i < 2000; ++i) ASSERT_EQ(c->Read().str, "OK") << i;
  Reply values = c->Call(mget);
  ASSERT_EQ(values.elems.size(), 2000u);
  EXPECT_EQ(values.elems[1999].str, std::string(100, 'a' + 1999 % 26));
  // Only small buffers stay: the read buffer, the small-argument buffer.
  EXPECT_TRUE(testing::WaitUntil([&] {
    return server_->stats().client_buffer_bytes <= 24 << 10;
  })) << server_->stats().client_buffer_bytes;
  // Not yet idle for 2 s: kept for the next request.
  clock.AdvanceMillis(1999);
  server_->SweepIdleConnections();
  EXPECT_EQ(c->Call({"PING"}).str, "PONG");
  EXPECT_GT(server_->stats().client_buffer_bytes, 0u);
  clock.AdvanceMillis(2000);
  // Swept until the PING's write has completed on the server's side too.
  EXPECT_TRUE(testing::WaitUntil([&] {
    server_->SweepIdleConnections();
    return server_->stats().client_buffer_bytes == 0;
  })) << server_->stats().client_buffer_bytes;
  // And it goes on serving.
  EXPECT_EQ(c->Call({"GET", "k7"}).str, std::string(100, 'h'));
}

TEST_F(ServerTest, FinishesAcceptedCommandsOnStop) {
  StartServer();
  auto c = Connect();
  ASSERT_EQ(c->Call({"SET", "k", "v"}).str, "OK");
  server_->Stop();
  EXPECT_TRUE(c->ReadsEof());
  EXPECT_TRUE(engine_->ContainsValue("k"));
  EXPECT_FALSE(testing::RespClient(server_->port()).connected());
}

// Waits until `observer`'s CLIENT LIST shows client `id`'s XREAD dispatched
// (parked when it blocks, its "$" taken): in its place a sleep raced a
// loaded machine, where the XREAD could come after the change meant to wake
// it (or after the clock's advance).
::testing::AssertionResult XreadDispatched(testing::RespClient& observer, int64_t id) {
  std::string line;
  if (testing::WaitUntil([&] {
        line = observer.Call({"CLIENT", "LIST", "ID", std::to_string(id)}).str;
        return line.find(" cmd=xread ") != std::string::npos;
      })) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "no XREAD dispatched: " << line;
}

// The event stream (docs/events.md, "RESP"): an XREAD BLOCK parks its
// connection, not its I/O thread: with one I/O thread another client is
// answered meanwhile, and the blocked client's pipelined command waits for
// the XREAD's reply. The XREAD waits with no bound (BLOCK 0) until the other
// client's SET; the other client is answered once CLIENT LIST shows the XREAD
// dispatched (so parked, and its "$" taken before the SET), whatever the
// machine's load (a 400 ms bound here once raced the other client's PING: 2
// of 30 runs at nice 19 beside 4 busy loops). A held thread fails the test by
// the client's read timeout.
TEST_F(ServerTest, XreadBlockDoesNotHoldTheIoThread) {
  options_.io_threads = 1;
  StartServer();
  auto blocked = Connect();
  auto other = Connect();
  const int64_t id = blocked->Call({"CLIENT", "ID"}).integer;
  ASSERT_TRUE(blocked->SendRaw(
      testing::EncodeCommand({"XREAD", "BLOCK", "0", "STREAMS", "prefixkv:events", "$"}) +
      testing::EncodeCommand({"PING"})));
  ASSERT_TRUE(XreadDispatched(*other, id));
  EXPECT_EQ(other->Call({"PING"}).str, "PONG");
  EXPECT_EQ(other->Call({"SET", "k", "v"}).str, "OK");  // wakes the XREAD
  Reply woken = blocked->Read();
  ASSERT_EQ(woken.elems.size(), 1u) << "type " << woken.type << " " << woken.str;
  EXPECT_EQ(blocked->Read().str, "PONG");
}

// An XREAD BLOCK with nothing new answers nil once its time is up, never
// before it (the server's wait starts after `start`).
TEST_F(ServerTest, XreadBlockTimesOutWithNil) {
  options_.io_threads = 1;
  StartServer();
  auto blocked = Connect();
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(blocked->SendRaw(testing::EncodeCommand({"XREAD", "BLOCK", "400", "STREAMS",
                                                       "prefixkv:events", "$"}) +
                               testing::EncodeCommand({"PING"})));
  Reply timed_out = blocked->Read();
  EXPECT_TRUE(timed_out.null) << timed_out.str;
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(400));
  EXPECT_EQ(blocked->Read().str, "PONG");
}

// A BLOCK longer than the timer's nanoseconds can hold (about 292 years)
// still waits: it used to overflow to a deadline in the past and answer nil
// at once (10^13 ms here), which a client looping on XREAD turns into a busy
// loop.
TEST_F(ServerTest, XreadWithAVeryLongBlockWaitsForTheNextChange) {
  options_.io_threads = 1;
  StartServer();
  auto reader = Connect();
  auto writer = Connect();
  const int64_t id = reader->Call({"CLIENT", "ID"}).integer;
  ASSERT_TRUE(reader->SendRaw(testing::EncodeCommand(
      {"XREAD", "BLOCK", "10000000000000", "STREAMS", "prefixkv:events", "$"})));
  ASSERT_TRUE(XreadDispatched(*writer, id));
  // The one I/O thread has run the XREAD's timer by now if it had expired.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(writer->Call({"PING"}).str, "PONG");
  EXPECT_EQ(writer->Call({"SET", "k", "v"}).str, "OK");
  Reply r = reader->Read();
  EXPECT_FALSE(r.null) << "the XREAD answered nil without waiting";
  ASSERT_EQ(r.elems.size(), 1u) << "type " << r.type << " " << r.str;
  const Reply& entries = r.elems[0].elems[1];
  ASSERT_GE(entries.elems.size(), 1u);
  EXPECT_EQ(entries.elems[0].elems[1].elems[1].str, "stored");
}

TEST_F(ServerTest, XreadBlockWakesOnTheNextChange) {
  StartServer();
  auto reader = Connect();
  auto writer = Connect();
  const int64_t id = reader->Call({"CLIENT", "ID"}).integer;
  ASSERT_TRUE(reader->SendRaw(testing::EncodeCommand(
      {"XREAD", "BLOCK", "0", "STREAMS", "prefixkv:events", "$"})));
  ASSERT_TRUE(XreadDispatched(*writer, id));
  EXPECT_EQ(writer->Call({"SET", "k", "v"}).str, "OK");
  Reply r = reader->Read();
  ASSERT_EQ(r.elems.size(), 1u) << r.str;
  const Reply& entries = r.elems[0].elems[1];
  ASSERT_GE(entries.elems.size(), 1u);
  const Reply& fields = entries.elems[0].elems[1];
  EXPECT_EQ(fields.elems[1].str, "stored");
  EXPECT_EQ(fields.elems[5].str, "hot");
}

// --idle-timeout-ms does not close a connection while its XREAD BLOCK waits
// (longer than the timeout); it does once the connection idles afterwards.
TEST_F(ServerTest, XreadBlockIsNotClosedByTheIdleTimeout) {
  FakeClock clock;
  options_.clock = &clock;
  options_.idle_timeout_ms = 1000;
  options_.idle_check_interval_ms = 3600 * 1000;  // the test sweeps
  StartServer();
  auto reader = Connect();
  auto writer = Connect();
  const int64_t id = reader->Call({"CLIENT", "ID"}).integer;
  ASSERT_TRUE(reader->SendRaw(testing::EncodeCommand(
      {"XREAD", "BLOCK", "0", "STREAMS", "prefixkv:events", "$"})));
  ASSERT_TRUE(XreadDispatched(*writer, id));  // it blocks
  clock.AdvanceMillis(5000);
  EXPECT_EQ(writer->Call({"PING"}).str, "PONG");  // the writer is fresh again
  EXPECT_EQ(server_->SweepIdleConnections(), 0u);
  EXPECT_EQ(writer->Call({"SET", "k", "v"}).str, "OK");
  Reply r = reader->Read();
  ASSERT_EQ(r.elems.size(), 1u) << "type " << r.type << " " << r.str;
  // Idle after its reply: closed like any other connection.
  clock.AdvanceMillis(5000);
  EXPECT_TRUE(testing::WaitUntil([&] { return server_->SweepIdleConnections() > 0; }));
  EXPECT_TRUE(reader->Read().closed());
}

// A client that closes its socket while its XREAD BLOCK waits is released at
// once, as Redis frees it: it used to keep its connection (a maxclients
// place, its buffers) until the BLOCK's end, for ever with BLOCK 0, since
// the end-of-file only stopped reading and a command pipelined behind the
// XREAD stopped even the read that would have seen it.
TEST_F(ServerTest, AClientClosedWhileItsXreadBlocksIsReleasedAtOnce) {
  options_.io_threads = 1;
  StartServer();
  auto observer = Connect();
  for (const bool pipelined : {false, true}) {
    auto reader = Connect();
    const int64_t id = reader->Call({"CLIENT", "ID"}).integer;
    ASSERT_TRUE(reader->SendRaw(
        testing::EncodeCommand(
            {"XREAD", "BLOCK", "0", "STREAMS", "prefixkv:events", "$"}) +
        (pipelined ? testing::EncodeCommand({"SET", "after", "xread"}) : "")));
    ASSERT_TRUE(XreadDispatched(*observer, id));
    reader.reset();  // closes the socket
    EXPECT_TRUE(testing::WaitUntil(
        [&] { return server_->stats().connected_clients == 1; }, std::chrono::seconds(5)))
        << "pipelined " << pipelined << ": " << server_->stats().connected_clients
        << " clients";
  }
  // The SET behind the dropped XREAD never ran (as in Redis).
  EXPECT_TRUE(observer->Call({"GET", "after"}).null);
  EXPECT_EQ(observer->Call({"PING"}).str, "PONG");
}

// Commands a client sends while its XREAD BLOCK waits, one write at a time
// (the server reads them on after the XREAD to see a close), run after its
// reply, in order.
TEST_F(ServerTest, CommandsSentWhileAnXreadBlocksRunAfterItsReply) {
  options_.io_threads = 1;
  StartServer();
  auto reader = Connect();
  auto writer = Connect();
  const int64_t id = reader->Call({"CLIENT", "ID"}).integer;
  ASSERT_TRUE(reader->SendRaw(testing::EncodeCommand(
      {"XREAD", "BLOCK", "0", "STREAMS", "prefixkv:events", "$"})));
  ASSERT_TRUE(XreadDispatched(*writer, id));
  constexpr int kSent = 4000;  // ~100 KB: past the one read chunk kept behind it
  for (int i = 0; i < kSent; ++i) {
    ASSERT_TRUE(reader->SendRaw(testing::EncodeCommand({"ECHO", std::to_string(i)})));
  }
  EXPECT_EQ(writer->Call({"PING"}).str, "PONG");  // the reader's bytes are in
  EXPECT_EQ(writer->Call({"SET", "k", "v"}).str, "OK");
  Reply r = reader->Read();
  ASSERT_EQ(r.elems.size(), 1u) << "type " << r.type << " " << r.str;
  for (int i = 0; i < kSent; ++i) ASSERT_EQ(reader->Read().str, std::to_string(i));
}

// A QUIT (or a protocol error) pipelined behind a waiting XREAD BLOCK closes
// the connection once both are answered, as it does anywhere: the read the
// server keeps under way behind the XREAD (to see a close) used to keep it
// open until the client sent more or closed itself, so a client waiting for
// the server's close hung.
TEST_F(ServerTest, AQuitPipelinedBehindAnXreadClosesAfterItsReply) {
  options_.io_threads = 1;
  StartServer();
  auto writer = Connect();
  for (const bool quit : {true, false}) {
    testing::RespClient reader(server_->port(), /*timeout_s=*/3);
    const int64_t id = reader.Call({"CLIENT", "ID"}).integer;
    ASSERT_TRUE(reader.SendRaw(
        testing::EncodeCommand(
            {"XREAD", "BLOCK", "0", "STREAMS", "prefixkv:events", "$"}) +
        (quit ? testing::EncodeCommand({"QUIT"}) : std::string("*x\r\n"))));
    ASSERT_TRUE(XreadDispatched(*writer, id));
    EXPECT_EQ(writer->Call({"SET", "k", quit ? "quit" : "error"}).str, "OK");
    Reply r = reader.Read();
    ASSERT_EQ(r.elems.size(), 1u) << "type " << r.type << " " << r.str;
    EXPECT_EQ(reader.Read().type, quit ? '+' : '-');
    EXPECT_TRUE(reader.ReadsEof())
        << (quit ? "QUIT" : "protocol error") << ": the connection stayed open";
  }
}

// A connection that read on behind its XREAD BLOCK and then idles gives its
// buffers back like any other, and goes on serving.
TEST_F(ServerTest, AConnectionThatReadBehindAnXreadFreesItsBuffersAndServesOn) {
  FakeClock clock;
  options_.clock = &clock;
  options_.idle_check_interval_ms = 3600 * 1000;  // the test sweeps
  options_.io_threads = 1;
  StartServer();
  auto reader = Connect();
  auto writer = Connect();
  const int64_t id = reader->Call({"CLIENT", "ID"}).integer;
  ASSERT_TRUE(reader->SendRaw(
      testing::EncodeCommand({"XREAD", "BLOCK", "0", "STREAMS", "prefixkv:events", "$"}) +
      testing::EncodeCommand({"PING"})));
  ASSERT_TRUE(XreadDispatched(*writer, id));
  EXPECT_EQ(writer->Call({"SET", "k", "v"}).str, "OK");
  Reply r = reader->Read();
  ASSERT_EQ(r.elems.size(), 1u) << "type " << r.type << " " << r.str;
  EXPECT_EQ(reader->Read().str, "PONG");
  clock.AdvanceMillis(3000);
  EXPECT_TRUE(testing::WaitUntil([&] {
    server_->SweepIdleConnections();
    return server_->stats().client_buffer_bytes == 0;
  })) << server_->stats().client_buffer_bytes;
  EXPECT_EQ(reader->Call({"ECHO", "after"}).str, "after");
}

// Snapshot + tail over RESP: PKV.SNAPSHOT's key sets and ID, then XREAD from
// that ID gives exactly the changes after it.
TEST_F(ServerTest, PkvSnapshotBootstrapsAStreamConsumer) {
  StartServer();
  auto c = Connect();
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(c->Call({"SET", "k" + std::to_string(i), "v"}).str, "OK");
  Reply snap = c->Call({"PKV.SNAPSHOT"});
  ASSERT_EQ(snap.elems.size(), 6u) << snap.str;
  EXPECT_EQ(snap.elems[0].str, "id");
  const std::string id = snap.elems[1].str;
  EXPECT_EQ(id, c->Call({"XINFO", "STREAM", "prefixkv:events"}).elems[7].str);
  EXPECT_EQ(snap.elems[2].str, "hot");
  ASSERT_EQ(snap.elems[3].elems.size(), 5u);
  const Reply& block = snap.elems[3].elems[0];
  ASSERT_EQ(block.elems.size(), 5u);
  EXPECT_EQ(block.elems[0].str.size(), 32u);  // the key in hex
  EXPECT_EQ(block.elems[4].type, ':');        // bytes
  EXPECT_EQ(snap.elems[4].str, "ssd");
  // The tail after the snapshot: nothing yet, then exactly the next change.
  EXPECT_TRUE(c->Call({"XREAD", "STREAMS", "prefixkv:events", id}).null);
  EXPECT_EQ(c->Call({"DEL", "k0"}).integer, 1);
  Reply tail = c->Call({"XREAD", "STREAMS", "prefixkv:events", id});
  ASSERT_EQ(tail.elems.size(), 1u) << tail.str;
  const Reply& entries = tail.elems[0].elems[1];
  ASSERT_EQ(entries.elems.size(), 1u);
  EXPECT_EQ(entries.elems[0].elems[1].elems[1].str, "removed");
  std::set<std::string> hot;
  for (const Reply& b : snap.elems[3].elems) hot.insert(b.elems[0].str);
  EXPECT_TRUE(hot.contains(entries.elems[0].elems[1].elems[15].str));  // its key
  EXPECT_TRUE(c->Call({"PKV.SNAPSHOT", "extra"}).IsError());
}

// PKV.SNAPSHOT <cursor> COUNT n pages the key sets: every page's blocks lie
// in its span of the key space, and a consumer that applies every page
// (while another client stores and deletes between them), then XREAD from
// the first page's ID, holds exactly the key sets of the unpaged answer.
TEST_F(ServerTest, PkvSnapshotPagesAddUpWithTheTailAfterTheFirstPage) {
  StartServer();
  auto c = Connect();
  for (int i = 0; i < 40; ++i)
    ASSERT_EQ(c->Call({"SET", "k" + std::to_string(i), "v"}).str, "OK");
  std::map<std::string, std::set<std::string>> held;  // tier -> keys
  std::string first_id;
  std::string cursor = "0";
  int pages = 0;
  do {
    Reply page = c->Call({"PKV.SNAPSHOT", cursor, "COUNT", "7"});
    ASSERT_EQ(page.elems.size(), 8u) << page.str;
    EXPECT_EQ(page.elems[0].str, "id");
    EXPECT_EQ(page.elems[2].str, "cursor");
    if (first_id.empty()) first_id = page.elems[1].str;
    const uint64_t begin = std::stoull(cursor);
    const uint64_t end = std::stoull(page.elems[3].str);
    for (size_t t : {5u, 7u}) {
      EXPECT_LE(page.elems[t].elems.size(), 40u);
      for (const Reply& b : page.elems[t].elems) {
        const uint64_t hi = std::stoull(b.elems[0].str.substr(0, 16), nullptr, 16);
        EXPECT_GE(hi, begin);
        EXPECT_TRUE(end == 0 || hi < end) << hi << " " << end;
        held[page.elems[t - 1].str].insert(b.elems[0].str);
      }
    }
    // The node changes between pages: a key stored, one of the first deleted.
    ASSERT_EQ(c->Call({"SET", "new" + std::to_string(pages), "v"}).str, "OK");
    EXPECT_EQ(c->Call({"DEL", "k" + std::to_string(pages)}).integer, 1);
    cursor = page.elems[3].str;
    ASSERT_LT(++pages, 100);
  } while (cursor != "0");
  EXPECT_GE(pages, 3);
  // The tail from the first page's ID.
  std::string last = first_id;
  for (;;) {
    Reply r = c->Call({"XREAD", "COUNT", "5", "STREAMS", "prefixkv:events", last});
    if (r.null) break;
    ASSERT_EQ(r.elems.size(), 1u) << r.str;
    for (const Reply& entry : r.elems[0].elems[1].elems) {
      const Reply& f = entry.elems[1];
      const std::string& kind = f.elems[1].str;
      const std::string& key = f.elems[15].str;
      if (kind == "stored") held[f.elems[5].str].insert(key);
      if (kind == "removed") held[f.elems[5].str].erase(key);
      if (kind == "moved") {
        held[f.elems[7].str].erase(key);
        held[f.elems[5].str].insert(key);
      }
      if (kind == "cleared") held[f.elems[5].str].clear();
      last = entry.elems[0].str;
    }
  }
  Reply all = c->Call({"PKV.SNAPSHOT"});
  ASSERT_EQ(all.elems.size(), 6u) << all.str;
  for (size_t t : {3u, 5u}) {
    std::set<std::string> want;
    for (const Reply& b : all.elems[t].elems) want.insert(b.elems[0].str);
    EXPECT_EQ(held[all.elems[t - 1].str], want) << all.elems[t - 1].str;
  }
  EXPECT_EQ(held["hot"].size(), 40u);  // 40 - pages deleted + pages stored
  // Bad input: a clear error each.
  for (const std::vector<std::string>& bad :
       std::vector<std::vector<std::string>>{{"PKV.SNAPSHOT", "x"},
                                             {"PKV.SNAPSHOT", "-1"},
                                             {"PKV.SNAPSHOT", "0", "COUNT"},
                                             {"PKV.SNAPSHOT", "0", "COUNT", "x"},
                                             {"PKV.SNAPSHOT", "0", "LIMIT", "5"}}) {
    EXPECT_TRUE(c->Call(bad).IsError()) << bad.back();
  }
}

TEST_F(ServerTest, StreamCommandsServeTheEventLog) {
  StartServer();
  auto c = Connect();
  EXPECT_EQ(c->Call({"XLEN", "prefixkv:events"}).integer, 1);  // the hot tier's kCleared
  Reply range = c->Call({"XRANGE", "prefixkv:events", "-", "+"});
  ASSERT_EQ(range.elems.size(), 1u);
  const std::string id = range.elems[0].elems[0].str;
  EXPECT_TRUE(id.ends_with("-0")) << id;
  const Reply& fields = range.elems[0].elems[1];
  ASSERT_EQ(fields.elems.size(), 22u);
  EXPECT_EQ(fields.elems[0].str, "kind");
  EXPECT_EQ(fields.elems[1].str, "cleared");
  EXPECT_EQ(fields.elems[5].str, "hot");
  // XREAD from 0 returns it; from its own id nothing (no BLOCK: a null).
  Reply read = c->Call({"XREAD", "COUNT", "5", "STREAMS", "prefixkv:events", "0"});
  ASSERT_EQ(read.elems.size(), 1u);
  EXPECT_EQ(read.elems[0].elems[0].str, "prefixkv:events");
  EXPECT_EQ(read.elems[0].elems[1].elems[0].elems[0].str, id);
  EXPECT_TRUE(c->Call({"XREAD", "STREAMS", "prefixkv:events", id}).null);
  EXPECT_EQ(
      c->Call({"XREVRANGE", "prefixkv:events", "+", "-", "COUNT", "1"}).elems.size(), 1u);
  Reply info = c->Call({"XINFO", "STREAM", "prefixkv:events"});
  ASSERT_GE(info.elems.size(), 4u);
  EXPECT_EQ(info.elems[0].str, "length");
  EXPECT_EQ(info.elems[1].integer, 1);
  EXPECT_NE(c->Call({"INFO", "events"})
                .str.find("events_head_seq:" + id.substr(0, id.size() - 2)),
            std::string::npos);
}

// The largest ID is ahead of the log like any other beyond its head: a
// RESNAPSHOT, never the log replayed from its start (the next seq after it
// used to wrap to 0, so a consumer got old events as if they were new).
TEST_F(ServerTest, XreadAfterTheLargestIdIsAheadOfTheLog) {
  StartServer();
  auto c = Connect();
  ASSERT_EQ(c->Call({"SET", "k", "v"}).str, "OK");  // the log holds its start
  for (const char* id :
       {"18446744073709551615", "18446744073709551615-0", "18446744073709551615-7"}) {
    Reply r = c->Call({"XREAD", "STREAMS", "prefixkv:events", id});
    ASSERT_TRUE(r.IsError()) << id << ": " << r.elems.size() << " streams";
    EXPECT_TRUE(r.str.starts_with("RESNAPSHOT ")) << r.str;
  }
}

// Range bounds at the largest ID: a start after it holds nothing and an
// end just after it holds everything (their seq + 1 used to wrap to 0: the
// whole log, and nothing, instead). Redis 7.0.15 answers the same.
TEST_F(ServerTest, XrangeBoundsAtTheLargestIdDoNotWrap) {
  StartServer();
  auto c = Connect();
  ASSERT_EQ(c->Call({"SET", "k", "v"}).str, "OK");
  const std::string max = "18446744073709551615";
  EXPECT_EQ(c->Call({"XRANGE", "prefixkv:events", "(" + max, "+"}).elems.size(), 0u);
  EXPECT_EQ(c->Call({"XRANGE", "prefixkv:events", max + "-1", "+"}).elems.size(), 0u);
  EXPECT_EQ(c->Call({"XREVRANGE", "prefixkv:events", "+", "(" + max}).elems.size(), 0u);
  EXPECT_EQ(c->Call({"XRANGE", "prefixkv:events", "-", "(" + max + "-1"}).elems.size(),
            c->Call({"XRANGE", "prefixkv:events", "-", "+"}).elems.size());
  EXPECT_GE(c->Call({"XRANGE", "prefixkv:events", "-", "+"}).elems.size(), 1u);
}

// An exclusive end without a sequence part, "(N", is N-18446744073709551615
// exclusive in Redis: entry N-0 lies before it and is in the range (redis-server
// 7.0.15: XRANGE s - (7 answers 5-0 6-0 7-0). It used to be taken as "(N-0"
// and left entry N out.
TEST_F(ServerTest, XrangeExclusiveEndWithoutASequenceHoldsItsEntry) {
  StartServer();
  auto c = Connect();
  ASSERT_EQ(c->Call({"SET", "k", "v"}).str, "OK");
  Reply all = c->Call({"XRANGE", "prefixkv:events", "-", "+"});
  ASSERT_GE(all.elems.size(), 2u);
  const std::string last = all.elems.back().elems[0].str;  // "<seq>-0"
  const std::string seq = last.substr(0, last.size() - 2);
  EXPECT_EQ(c->Call({"XRANGE", "prefixkv:events", "-", "(" + seq}).elems.size(),
            all.elems.size());
  EXPECT_EQ(c->Call({"XREVRANGE", "prefixkv:events", "(" + seq, "-"}).elems.size(),
            all.elems.size());
  EXPECT_EQ(c->Call({"XRANGE", "prefixkv:events", "-", "(" + last}).elems.size(),
            all.elems.size() - 1);
  EXPECT_EQ(c->Call({"XRANGE", "prefixkv:events", "-", "(" + seq + "-1"}).elems.size(),
            all.elems.size());
  EXPECT_EQ(c->Call({"XRANGE", "prefixkv:events", "-", "(0"}).elems.size(), 0u);
}

// Stream IDs as redis-server 7.0.15 reads them: each part through string2ull
// ("+1", " 1", "001", "1--0" are IDs), an exclusive bound's ID strict ("(-" and
// "(+" are not bounds), an exclusive start past the largest ID or end before
// the least its own error, and XREAD's ID strict.
TEST_F(ServerTest, ReadsStreamIdsAsRedisDoes) {
  StartServer();
  auto c = Connect();
  ASSERT_EQ(c->Call({"SET", "k", "v"}).str, "OK");
  const std::string stream = "prefixkv:events";
  const Reply all = c->Call({"XRANGE", stream, "-", "+"});
  const size_t n = all.elems.size();
  ASSERT_GE(n, 2u);
  const std::string first = all.elems[0].elems[0].str;  // "<seq>-0"
  const std::string seq = first.substr(0, first.size() - 2);
  for (const std::string& id :  // each the first entry's
       {"+" + seq, " " + seq, "00" + seq, seq + "--0", seq + "-+0", "+" + first}) {
    SCOPED_TRACE(id);
    EXPECT_EQ(c->Call({"XRANGE", stream, id, "+"}).elems.size(), n);
    EXPECT_EQ(c->Call({"XREVRANGE", stream, "+", id}).elems.size(), n);
    EXPECT_EQ(c->Call({"XRANGE", stream, "-", id}).elems.size(), 1u);
    Reply read = c->Call({"XREAD", "STREAMS", stream, id});
    ASSERT_EQ(read.elems.size(), 1u) << read.str;
    EXPECT_EQ(read.elems[0].elems[1].elems.size(), n - 1);
  }
  constexpr std::string_view kInvalid =
      "ERR Invalid stream ID specified as stream command argument";
  EXPECT_EQ(c->Call({"XRANGE", stream, "(-", "+"}).str, kInvalid);
  EXPECT_EQ(c->Call({"XRANGE", stream, "-", "(+"}).str, kInvalid);
  EXPECT_EQ(c->Call({"XREVRANGE", stream, "(+", "-"}).str, kInvalid);
  for (const char* id :
       {"-", "+", "-1", "1-", "1-*", "1 ", "1x", "", "18446744073709551616"}) {
    SCOPED_TRACE(id);
    EXPECT_EQ(c->Call({"XREAD", "STREAMS", stream, id}).str, kInvalid);
  }
  EXPECT_EQ(c->Call({"XRANGE", stream, "-", "(0-0"}).str,
            "ERR invalid end ID for the interval");
  EXPECT_EQ(
      c->Call({"XRANGE", stream, "(18446744073709551615-18446744073709551615", "+"}).str,
      "ERR invalid start ID for the interval");
  EXPECT_EQ(c->Call({"XRANGE", stream, "(-", "x", "COUNT", "y"}).str, kInvalid);
}

// COUNT as redis-server 7.0.15 reads it: XRANGE/XREVRANGE with COUNT 0 (or a
// negative one) ask for no entry and get a null array, where XREAD's COUNT 0
// or -1 is no limit. XRANGE COUNT 0 used to answer every entry (up to 10,000)
// and a negative COUNT was an error.
TEST_F(ServerTest, StreamCountsAreReadAsRedisReadsThem) {
  StartServer();
  auto c = Connect();
  ASSERT_EQ(c->Call({"SET", "k", "v"}).str, "OK");
  for (const char* n : {"0", "-1"}) {
    EXPECT_TRUE(c->Call({"XRANGE", "prefixkv:events", "-", "+", "COUNT", n}).null) << n;
    EXPECT_TRUE(c->Call({"XREVRANGE", "prefixkv:events", "+", "-", "COUNT", n}).null)
        << n;
    Reply read = c->Call({"XREAD", "COUNT", n, "STREAMS", "prefixkv:events", "0"});
    ASSERT_EQ(read.elems.size(), 1u) << n << ": " << read.str;
    EXPECT_EQ(read.elems[0].elems[1].elems.size(), 2u) << n;
  }
  EXPECT_EQ(c->Call({"XRANGE", "prefixkv:events", "-", "+", "COUNT", "1"}).elems.size(),
            1u);
  EXPECT_TRUE(
      c->Call({"XRANGE", "prefixkv:events", "-", "+", "COUNT", "18446744073709551615"})
          .IsError());
}

TEST_F(ServerTest, StreamCommandsRefuseBadInputClearly) {
  StartServer();
  auto c = Connect();
  // A consumer ahead of the log (an id of another node, or lost in a crash).
  Reply ahead =
      c->Call({"XREAD", "STREAMS", "prefixkv:events", "18446744073709551614-0"});
  ASSERT_TRUE(ahead.IsError());
  EXPECT_TRUE(ahead.str.starts_with("RESNAPSHOT ")) << ahead.str;
  EXPECT_TRUE(c->Call({"XLEN", "other"}).IsError());
  EXPECT_TRUE(c->Call({"XRANGE", "prefixkv:events", "x", "+"}).IsError());
  EXPECT_TRUE(
      c->Call({"XREAD", "BLOCK", "-1", "STREAMS", "prefixkv:events", "$"}).IsError());
  EXPECT_TRUE(c->Call({"XREAD", "STREAMS", "prefixkv:events"}).IsError());
  EXPECT_TRUE(c->Call({"XINFO", "GROUPS", "prefixkv:events"}).IsError());
  EXPECT_EQ(c->Call({"PING"}).str, "PONG");  // the connection goes on
}

}  // namespace
}  // namespace prefixkv
