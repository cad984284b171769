// Hostile and careless clients: malformed frames, oversized lengths, too many
// connections, idle connections and clients that never read. Each gets an error
// or is disconnected while every other client keeps being served and nothing
// stored changes.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "prefixkv/server.h"
#include "tests/server/server_fixture.h"

namespace prefixkv {
namespace {

using testing::EncodeCommand;
using testing::Reply;

class ServerBadInputTest : public testing::ServerFixture {
 protected:
  // Stores a value through one client so tests can check it survives.
  void StoreWitness() {
    auto c = Connect();
    ASSERT_EQ(c->Call({"SET", "witness", "intact"}).str, "OK");
  }
  void ExpectWitnessIntact() {
    auto c = Connect();
    EXPECT_EQ(c->Call({"GET", "witness"}).str, "intact");
  }

  // Sends `bytes`, expects a protocol error reply and then a closed connection.
  void ExpectProtocolErrorAndClose(const std::string& bytes, const std::string& error) {
    auto c = Connect();
    ASSERT_TRUE(c->SendRaw(bytes));
    Reply r = c->Read();
    EXPECT_EQ(r.str, "ERR Protocol error: " + error) << bytes;
    EXPECT_TRUE(c->ReadsEof()) << bytes;
  }
};

TEST_F(ServerBadInputTest, ClosesConnectionsThatSendMalformedFrames) {
  StartServer();
  StoreWitness();
  auto bystander = Connect();
  ExpectProtocolErrorAndClose("*-1\r\n", "invalid multibulk length");
  ExpectProtocolErrorAndClose("*x\r\n", "invalid multibulk length");
  ExpectProtocolErrorAndClose("*1\r\n$-2\r\n", "invalid bulk length");
  ExpectProtocolErrorAndClose("*1\r\n:5\r\n", "expected '$', got ':'");
  ExpectProtocolErrorAndClose("*1\r\n$4\r\nPINGxx",
                              "expected CRLF after a bulk argument");
  ExpectProtocolErrorAndClose("*1\r\n$" + std::string(40, '9') + "\r\n",
                              "invalid bulk length");
  EXPECT_EQ(bystander->Call({"PING"}).str, "PONG");
  ExpectWitnessIntact();
  EXPECT_EQ(server_->stats().protocol_errors, 6u);
}

TEST_F(ServerBadInputTest, AnswersCommandsBeforeTheMalformedFrame) {
  StartServer();
  auto c = Connect();
  ASSERT_TRUE(c->SendRaw(EncodeCommand({"SET", "a", "1"}) + "*1\r\n$-7\r\n" +
                         EncodeCommand({"SET", "b", "2"})));
  EXPECT_EQ(c->Read().str, "OK");
  EXPECT_EQ(c->Read().str, "ERR Protocol error: invalid bulk length");
  EXPECT_TRUE(c->ReadsEof());
  auto check = Connect();
  EXPECT_EQ(check->Call({"GET", "a"}).str, "1");
  EXPECT_TRUE(check->Call({"GET", "b"}).null);  // after the bad frame: never run
}

TEST_F(ServerBadInputTest, RejectsRequestsOverTheSizeLimitBeforeReadingThem) {
  options_.max_request_bytes = 1 << 20;
  StartServer();
  StoreWitness();
  ExpectProtocolErrorAndClose("*3\r\n$3\r\nSET\r\n$7\r\nwitness\r\n$1048577\r\n",
                              "invalid bulk length");
  ExpectWitnessIntact();
  auto c = Connect();  // exactly at the limit is fine
  EXPECT_EQ(c->Call({"ECHO", std::string((1 << 20) - 4, 'e')}).str.size(),
            (1u << 20) - 4);
}

TEST_F(ServerBadInputTest, RejectsTooManyArgumentsAndTooLongInlineLines) {
  options_.max_array_elements = 8;
  options_.max_inline_bytes = 100;
  StartServer();
  ExpectProtocolErrorAndClose("*9\r\n", "invalid multibulk length");
  ExpectProtocolErrorAndClose(std::string(101, 'A'), "too big inline request");
  auto c = Connect();
  ASSERT_TRUE(c->SendRaw("SET inline works\r\nGET inline\r\n"));
  EXPECT_EQ(c->Read().str, "OK");
  EXPECT_EQ(c->Read().str, "works");
}

TEST_F(ServerBadInputTest, TurnsAwayConnectionsOverTheLimit) {
  options_.max_connections = 2;
  StartServer();
  auto a = Connect();
  auto b = Connect();
  ASSERT_EQ(a->Call({"PING"}).str, "PONG");
  ASSERT_EQ(b->Call({"PING"}).str, "PONG");
  auto c = Connect();
  EXPECT_EQ(c->Read().str, "ERR max number of clients reached");
  EXPECT_TRUE(c->ReadsEof());
  EXPECT_EQ(a->Call({"PING"}).str, "PONG");
  EXPECT_EQ(server_->stats().rejected_connections, 1u);
  EXPECT_EQ(server_->stats().total_connections_received, 2u);  // as in Redis
}

TEST_F(ServerBadInputTest, ClosesOnlyConnectionsIdleLongerThanTheTimeout) {
  FakeClock clock;
  options_.clock = &clock;
  options_.idle_timeout_ms = 1000;
  options_.idle_check_interval_ms = 3'600'000;  // sweeps only when the test asks
  StartServer();
  auto idle = Connect();
  ASSERT_EQ(idle->Call({"PING"}).str, "PONG");
  clock.AdvanceMillis(600);
  auto active = Connect();
  ASSERT_EQ(active->Call({"PING"}).str, "PONG");
  EXPECT_EQ(server_->SweepIdleConnections(), 0u);  // 600 ms is not over the limit
  clock.AdvanceMillis(600);
  EXPECT_EQ(server_->SweepIdleConnections(), 1u);
  EXPECT_TRUE(idle->ReadsEof());
  EXPECT_EQ(active->Call({"PING"}).str, "PONG");
  EXPECT_EQ(server_->stats().idle_disconnections, 1u);
}

// Each idle connection counts once in idle_disconnections (INFO stats, the
// metrics): a sweep running before the connection's thread has closed one
// that an earlier sweep timed out used to count it again.
TEST_F(ServerBadInputTest, AnIdleDisconnectionIsCountedOnce) {
  FakeClock clock;
  options_.clock = &clock;
  options_.idle_timeout_ms = 1000;
  options_.idle_check_interval_ms = 3'600'000;  // sweeps only when the test asks
  options_.io_threads = 1;
  StartServer();
  constexpr size_t kClients = 20;
  std::vector<std::unique_ptr<testing::RespClient>> idle;
  for (size_t i = 0; i < kClients; ++i) {
    idle.push_back(Connect());
    ASSERT_EQ(idle.back()->Call({"PING"}).str, "PONG");
  }
  clock.AdvanceMillis(1500);
  size_t swept = 0;
  for (int i = 0; i < 3; ++i) swept += server_->SweepIdleConnections();
  for (auto& c : idle) EXPECT_TRUE(c->ReadsEof());
  EXPECT_TRUE(
      testing::WaitUntil([&] { return server_->stats().connected_clients == 0; }));
  swept += server_->SweepIdleConnections();
  EXPECT_EQ(swept, kClients);
  EXPECT_EQ(server_->stats().idle_disconnections, kClients);
}

// A client taking in a reply longer than the socket buffers is not idle, even
// when the whole reply takes longer than the timeout (it used to be cut off
// mid-value: only received bytes counted as activity). One that stops reading
// is idle from the last bytes its socket took.
TEST_F(ServerBadInputTest, AClientReadingALongReplyIsNotIdleButOneThatStopsIs) {
  FakeClock clock;
  options_.clock = &clock;
  options_.idle_timeout_ms = 1000;
  options_.idle_check_interval_ms = 3'600'000;  // sweeps only when the test asks
  StartServer();
  constexpr size_t kValue = size_t{48} << 20;
  // More than the loopback socket buffers (send and receive, a few MiB each)
  // can hold: reading this much after advancing the clock means the server
  // wrote to the socket after the advance.
  constexpr size_t kPastBuffers = size_t{16} << 20;
  std::string value(kValue, 'v');
  for (size_t i = 0; i < value.size(); i += 4096)
    value[i] = static_cast<char>('a' + i % 23);
  ASSERT_EQ(Connect()->Call({"SET", "big", value}).str, "OK");
  const std::string header = "$" + std::to_string(kValue) + "\r\n";

  auto reader = Connect();
  auto stalled = Connect();
  ASSERT_TRUE(reader->SendRaw(EncodeCommand({"GET", "big"})));
  ASSERT_TRUE(stalled->SendRaw(EncodeCommand({"GET", "big"})));
  std::string got, part;
  ASSERT_TRUE(reader->ReadBytes(header.size(), &part));
  ASSERT_EQ(part, header);
  // Let the server fill the stalled client's socket before the clock moves:
  // its last write is then at 0 ms (settled when the bytes waiting stop
  // growing for 500 ms: a loaded machine can pause the server's writes for
  // the 150 ms this once took).
  for (size_t waiting = 0, same = 0, tries = 0; same < 10 && tries < 400; ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const size_t now = stalled->BytesWaiting();
    same = now == waiting && now > 0 ? same + 1 : 0;
    waiting = now;
  }
  for (int step = 0; step < 2; ++step) {
    clock.AdvanceMillis(600);  // 1,200 ms after the GET in all
    ASSERT_TRUE(reader->ReadBytes(kPastBuffers, &part));
    got += part;
    EXPECT_EQ(server_->SweepIdleConnections(), step == 0 ? 0u : 1u)
        << "step " << step;  // the stalled client's GET was 1,200 ms ago
  }
  EXPECT_TRUE(stalled->ReadsEofAfterDraining());
  ASSERT_TRUE(reader->ReadBytes(kValue - got.size() + 2, &part));
  got += part;
  EXPECT_EQ(got, value + "\r\n");
  EXPECT_EQ(reader->Call({"PING"}).str, "PONG");
  EXPECT_EQ(server_->stats().idle_disconnections, 1u);
}

TEST_F(ServerBadInputTest, StopsExecutingCommandsWhileRepliesPileUpUnread) {
  options_.max_pending_reply_bytes = 1 << 20;
  StartServer();
  auto setup = Connect();
  const std::string value(1 << 20, 'v');
  ASSERT_EQ(setup->Call({"SET", "big", value}).str, "OK");
  uint64_t before = server_->stats().total_commands_processed;

  auto slow = Connect();
  constexpr int kGets = 200;  // 200 MiB of replies for ~6 KiB of requests
  std::string batch;
  for (int i = 0; i < kGets; ++i) batch += EncodeCommand({"GET", "big"});
  ASSERT_TRUE(slow->SendRaw(batch));
  Reply first = slow->Read();
  // Without backpressure all 200 GETs would have run by now. With it, at most
  // the pending limit plus what the kernel socket buffers hold has run.
  uint64_t executed = server_->stats().total_commands_processed - before;
  EXPECT_LT(executed, 40u);
  EXPECT_EQ(first.str, value);
  for (int i = 1; i < kGets; ++i) ASSERT_EQ(slow->Read().str.size(), value.size()) << i;
  EXPECT_EQ(server_->stats().total_commands_processed - before, uint64_t{kGets});
}

// An MSET that is refused for a key it names (longer than 64 KiB) stores
// none of its pairs: it used to store the pairs before that key and then
// answer the error, so a client told the MSET failed found part of it done.
TEST_F(ServerBadInputTest, AnMsetRefusedForOneKeyStoresNoPair) {
  StartServer();
  StoreWitness();
  auto c = Connect();
  const std::string too_long(70000, 'k');
  EXPECT_EQ(
      c->Call({"MSET", "witness", "changed", "a", "1", too_long, "2", "b", "3"}).str,
      "ERR InvalidArgument: key of 70000 bytes is longer than the limit of 64 KiB");
  EXPECT_TRUE(c->Call({"GET", "a"}).null);
  EXPECT_TRUE(c->Call({"GET", "b"}).null);
  EXPECT_EQ(c->Call({"DBSIZE"}).integer, 1);
  ExpectWitnessIntact();
}

TEST_F(ServerBadInputTest, AnswersWhatAHalfClosedClientSent) {
  StartServer();
  auto c = Connect();
  ASSERT_TRUE(c->SendRaw(EncodeCommand({"SET", "k", "v"}) + EncodeCommand({"GET", "k"})));
  c->ShutdownWrite();
  EXPECT_EQ(c->Read().str, "OK");
  EXPECT_EQ(c->Read().str, "v");
  EXPECT_TRUE(c->ReadsEof());
}

}  // namespace
}  // namespace prefixkv
