// RedisConnection's time bound with an idle timeout: it bounds how long the
// node may stay silent, not how long a reply may take. A fake node on
// loopback sends one bulk reply in small pieces: a reply that keeps flowing
// for far longer than the timeout is read whole; a node that stops sending
// halfway fails within about the timeout.
#include "redis_connection.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "tests/support/loopback.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

// Answers the first command on one connection with a bulk string of `size`
// bytes, sent in `pieces` pieces `gap_ms` apart; after `stop_after` pieces
// it goes silent (holding the connection open) until destroyed.
class TricklingNode {
 public:
  TricklingNode(size_t size, int pieces, int gap_ms, int stop_after)
      : size_(size), pieces_(pieces), gap_ms_(gap_ms), stop_after_(stop_after) {
    fd_ = testing::BindLoopback(&port_, /*backlog=*/4);
    EXPECT_GE(fd_, 0);
    thread_ = std::thread([this] { Serve(); });
  }
  ~TricklingNode() {
    done_ = true;
    shutdown(fd_, SHUT_RDWR);
    thread_.join();
    close(fd_);
  }
  int port() const { return port_; }
  std::string Value() const { return std::string(size_, 'v'); }

 private:
  void Serve() {
    const int c = accept(fd_, nullptr, nullptr);
    if (c < 0) return;
    char buf[256];
    (void)!read(c, buf, sizeof(buf));  // the command: its content does not matter
    const std::string reply = "$" + std::to_string(size_) + "\r\n" + Value() + "\r\n";
    const size_t piece = (reply.size() + pieces_ - 1) / pieces_;
    for (int i = 0; i < pieces_ && !done_; ++i) {
      if (i == stop_after_) {
        while (!done_) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        break;
      }
      const size_t at = i * piece;
      if (at >= reply.size()) break;
      (void)!write(c, reply.data() + at, std::min(piece, reply.size() - at));
      std::this_thread::sleep_for(std::chrono::milliseconds(gap_ms_));
    }
    close(c);
  }

  const size_t size_;
  const int pieces_, gap_ms_, stop_after_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

double MillisSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                   start)
      .count();
}

TEST(RedisConnectionIdleTimeout, AReplyThatKeepsFlowingIsReadWholePastTheTimeout) {
  // 60 pieces 50 ms apart: ~3 s of reply, 2 s of idle timeout and of
  // deadline. (With 4 ms gaps and 100 ms of timeout, a loaded machine that
  // kept the node's thread off a CPU for 100 ms failed the read: 10 of 10
  // runs at nice 19 beside 4 busy loops.) The reply still outlasts both, so
  // a deadline that bounded the whole reply, or an idle timeout counted from
  // the wait's start only, still fails it.
  TricklingNode node(1 << 20, 60, 50, /*stop_after=*/-1);
  ASSERT_OK_AND_ASSIGN(auto c,
                       RedisConnection::Connect("127.0.0.1", node.port(), 1000, ""));
  c->set_idle_timeout_nanos(2'000'000'000);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_OK_AND_ASSIGN(RedisReplyPtr reply,
                       c->Call({"GET", "k"}, RedisNowNanos() + 2'000'000'000));
  EXPECT_GT(MillisSince(start), 2500) << "the reply did take longer than the timeout";
  ASSERT_EQ(reply->type, REDIS_REPLY_STRING);
  EXPECT_TRUE(std::string(reply->str, reply->len) == node.Value());
}

TEST(RedisConnectionIdleTimeout, ANodeThatFallsSilentHalfwayFailsWithinTheTimeout) {
  TricklingNode node(1 << 20, 100, 3, /*stop_after=*/30);
  ASSERT_OK_AND_ASSIGN(auto c,
                       RedisConnection::Connect("127.0.0.1", node.port(), 1000, ""));
  c->set_idle_timeout_nanos(50'000'000);
  const auto start = std::chrono::steady_clock::now();
  StatusOr<RedisReplyPtr> reply = c->Call({"GET", "k"}, RedisNowNanos() + 50'000'000);
  EXPECT_TRUE(reply.status().IsUnavailable()) << reply.status().ToString();
  // ~90 ms of pieces, then 50 ms of silence; generous for a loaded machine
  // (1 s was overrun once in 10 runs at nice 19 beside 4 busy loops).
  EXPECT_LT(MillisSince(start), 5000);
  EXPECT_TRUE(c->broken());
}

TEST(RedisConnectionIdleTimeout, WithoutAnIdleTimeoutTheDeadlineBoundsTheWholeReply) {
  TricklingNode node(1 << 20, 100, 3, /*stop_after=*/-1);
  ASSERT_OK_AND_ASSIGN(auto c,
                       RedisConnection::Connect("127.0.0.1", node.port(), 1000, ""));
  StatusOr<RedisReplyPtr> reply = c->Call({"GET", "k"}, RedisNowNanos() + 50'000'000);
  EXPECT_TRUE(reply.status().IsUnavailable()) << "a 300 ms reply under a 50 ms deadline";
}

}  // namespace
}  // namespace prefixkv
