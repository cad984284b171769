// The metrics HTTP listener of an in-process Server (ServerOptions::
// metrics_port): GET /metrics answers the engine's counters in the text
// format; other paths 404, other methods 405, oversized requests 400 and a
// close; keep-alive; slow and idle clients neither keep a scrape out nor stay
// past the request timeout; Stop() closes idle scrapers; a taken port fails
// Start.
#include "metrics_http.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "tests/server/exposition_check.h"
#include "tests/server/http_client.h"
#include "tests/server/server_fixture.h"

namespace prefixkv {
namespace {

using testing::HttpConnection;
using testing::HttpResponse;

class MetricsHttp : public testing::ServerFixture {
 protected:
  void SetUp() override {
    options_.metrics_port = 0;
    StartServer();
    ASSERT_NE(server_->metrics_port(), 0);
    ASSERT_NE(server_->metrics_port(), server_->port());
  }
};

TEST(MetricsHttpOff, NoListenerUnlessAMetricsPortIsSet) {
  testing::TempDir dir;
  ASSERT_OK_AND_ASSIGN(auto engine, Engine::Open({.hot_capacity_bytes = 1 << 20}));
  Server server({}, engine.get());
  ASSERT_OK(server.Start());
  EXPECT_EQ(server.metrics_port(), 0);
}

TEST_F(MetricsHttp, GetMetricsAnswersTheEngineCountersInTheTextFormat) {
  auto c = Connect();
  for (int i = 0; i < 5; ++i)
    ASSERT_EQ(c->Call({"SET", "k" + std::to_string(i), "v"}).str, "OK");
  ASSERT_TRUE(c->Call({"GET", "k1"}).str == "v");
  ASSERT_TRUE(c->Call({"GET", "nope"}).null);

  HttpConnection http(server_->metrics_port());
  ASSERT_TRUE(http.connected());
  HttpResponse r = http.Request("GET", "/metrics");
  ASSERT_EQ(r.status, 200) << r.headers;
  EXPECT_NE(r.headers.find("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"),
            std::string::npos)
      << r.headers;
  ASSERT_OK_AND_ASSIGN(testing::PromExposition e, testing::ParseExposition(r.body));
  const EngineStats s = engine_->Stats();
  EXPECT_EQ(e.Value("prefixkv_tier_blocks", {{"tier", "hot"}}), 5);
  // The memory resource's regions (the arena may have mapped one ahead since
  // the scrape; it does not unmap here).
  EXPECT_GT(e.Value("prefixkv_memory_mapped_bytes").value_or(0), 0);
  EXPECT_LE(e.Value("prefixkv_memory_mapped_bytes").value_or(0), s.memory_mapped_bytes);
  EXPECT_GE(e.Value("prefixkv_memory_regions").value_or(0), 1);
  EXPECT_LE(e.Value("prefixkv_memory_regions").value_or(0), s.memory_regions);
  EXPECT_EQ(e.Value("prefixkv_tier_inserts_total", {{"tier", "hot"}}), s.hot.inserts);
  EXPECT_EQ(e.Value("prefixkv_owner_hits_total", {{"tier", "hot"}, {"owner", "values"}}),
            OwnerHot("values").hits);
  EXPECT_EQ(e.Value("prefixkv_owner_bytes", {{"tier", "hot"}, {"owner", "values"}}),
            OwnerHot("values").bytes);
  EXPECT_EQ(e.Value("prefixkv_hot_dirty_blocks"), s.dirty_blocks);
  EXPECT_EQ(e.Value("prefixkv_server_connected_clients"), 1);  // HTTP is not RESP
  EXPECT_EQ(e.Value("prefixkv_server_commands_processed_total"), 7);
  // A query string is ignored.
  EXPECT_EQ(http.Request("GET", "/metrics?name[]=x").status, 200);
}

TEST_F(MetricsHttp, OtherPathsAre404AndOtherMethods405) {
  HttpConnection http(server_->metrics_port());
  EXPECT_EQ(http.Request("GET", "/").status, 404);
  EXPECT_EQ(http.Request("GET", "/metricsx").status, 404);
  EXPECT_EQ(http.Request("POST", "/other").status, 404);
  HttpResponse post = http.Request("POST", "/metrics");
  EXPECT_EQ(post.status, 405);
  EXPECT_NE(post.headers.find("Allow: GET\r\n"), std::string::npos) << post.headers;
  EXPECT_EQ(http.Request("PUT", "/metrics").status, 405);
  EXPECT_EQ(http.Request("DELETE", "/metrics").status, 405);
  HttpResponse head = http.Request("HEAD", "/metrics");
  EXPECT_EQ(head.status, 405);
  EXPECT_EQ(head.body, "");
  EXPECT_EQ(http.Request("GET", "/metrics").status, 200);  // still open: keep-alive
}

TEST_F(MetricsHttp, PipelinedRequestsAreAnsweredInOrderOnOneConnection) {
  HttpConnection http(server_->metrics_port());
  http.Send(
      "GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n"
      "GET /nope HTTP/1.1\r\nHost: a\r\n\r\n"
      "GET /metrics HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(http.Read().status, 200);
  EXPECT_EQ(http.Read().status, 404);
  EXPECT_EQ(http.Read().status, 200);
  EXPECT_TRUE(http.ReadsEof());  // Connection: close honoured
}

TEST_F(MetricsHttp, ARequestOverTheLimitIs400AndClosesTheConnection) {
  HttpConnection http(server_->metrics_port());
  const std::string big(server::MetricsHttpServer::kMaxRequestBytes, 'a');
  http.Send("GET /metrics HTTP/1.1\r\nHost: a\r\nX-Big: " + big + "\r\n\r\n");
  HttpResponse r = http.Read();
  EXPECT_EQ(r.status, 400) << r.headers;
  EXPECT_TRUE(http.ReadsEof());
  // A garbled request line too.
  HttpConnection garbled(server_->metrics_port());
  garbled.Send("NOT HTTP\r\n\r\n");
  EXPECT_EQ(garbled.Read().status, 400);
  EXPECT_TRUE(garbled.ReadsEof());
  // The listener goes on.
  EXPECT_EQ(HttpConnection(server_->metrics_port()).Request("GET", "/metrics").status,
            200);
}

TEST_F(MetricsHttp, StopClosesIdleScrapersPromptly) {
  HttpConnection idle(server_->metrics_port());
  ASSERT_TRUE(idle.connected());
  HttpConnection kept(server_->metrics_port());
  ASSERT_EQ(kept.Request("GET", "/metrics").status, 200);
  server_->Stop();  // promptly: MetricsHttpTimeouts.StopDoesNotWaitForIdleScrapers
  EXPECT_TRUE(idle.ReadsEof());
  EXPECT_TRUE(kept.ReadsEof());
  EXPECT_FALSE(HttpConnection(server_->metrics_port()).connected());
}

// 64 idle or slow clients used to fill the listener (64 connections at most,
// 30 s each): a scrape was closed unanswered until they timed out. Now at the
// limit (16) the connection that has waited longest for a request is closed
// to make room, and the scrape is answered at once. The request timeout is an
// hour here, so a scrape that had to wait for a slot would get no answer
// within the client's read timeout (10 s): no elapsed time is compared (a
// 2 s bound here once depended on the machine's load).
TEST(MetricsHttpLimits, IdleAndSlowClientsDoNotKeepAScrapeOut) {
  server::MetricsHttpServer metrics([] { return std::string("up 1\n"); },
                                    {.request_timeout = std::chrono::hours(1)});
  ASSERT_OK(metrics.Start("127.0.0.1", 0));
  std::vector<std::unique_ptr<HttpConnection>> slow;
  for (int i = 0; i < 64; ++i) {
    slow.push_back(std::make_unique<HttpConnection>(metrics.port()));
    ASSERT_TRUE(slow.back()->connected()) << i;
    if (i % 2 == 1) slow.back()->Send("GET /metr");  // begun, never finished
  }
  for (int scrape = 0; scrape < 3; ++scrape) {
    HttpConnection http(metrics.port());
    EXPECT_EQ(http.Request("GET", "/metrics").status, 200) << scrape;
  }
  EXPECT_TRUE(slow.front()->ReadsEof());  // the oldest made room
  EXPECT_GE(metrics.evicted_connections(), 64u - 16u);
}

// Stop closes idle scrapers rather than wait for their request or its
// timeout (an hour here): a Stop that waited would still be running when
// the bound below (a failure's, far above any load's delay) runs out.
TEST(MetricsHttpLimits, StopDoesNotWaitForIdleScrapers) {
  server::MetricsHttpServer metrics([] { return std::string("up 1\n"); },
                                    {.request_timeout = std::chrono::hours(1)});
  ASSERT_OK(metrics.Start("127.0.0.1", 0));
  auto idle = std::make_unique<HttpConnection>(metrics.port());
  auto kept = std::make_unique<HttpConnection>(metrics.port());
  ASSERT_TRUE(idle->connected());
  ASSERT_EQ(kept->Request("GET", "/metrics").status, 200);
  std::future<void> stopping = std::async(std::launch::async, [&] { metrics.Stop(); });
  const bool stopped =
      stopping.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  EXPECT_TRUE(stopped) << "Stop waits for idle scrapers";
  if (!stopped) {  // close them from this side so the waiting Stop returns
    idle.reset();
    kept.reset();
    return;
  }
  EXPECT_TRUE(idle->ReadsEof());
  EXPECT_TRUE(kept->ReadsEof());
}

// A request must arrive whole within request_timeout, however it trickles in
// (a byte every 40 ms would renew a timeout per read forever): such a
// connection and an idle one are closed at the deadline, never before it,
// and a prompt request is answered meanwhile. The dribbler goes on for up to
// 10 s (a timeout renewed per byte keeps it open that long; a loaded machine
// does not delay a 300 ms deadline to 10 s), not a tight 1.2 s as it did.
TEST(MetricsHttpTimeouts, ARequestMustArriveWithinTheRequestTimeout) {
  server::MetricsHttpServer metrics([] { return std::string("up 1\n"); },
                                    {.request_timeout = std::chrono::milliseconds(300)});
  ASSERT_OK(metrics.Start("127.0.0.1", 0));
  const auto start = std::chrono::steady_clock::now();
  HttpConnection idle(metrics.port());
  HttpConnection dribbler(metrics.port());
  const std::string request = "GET /metrics HTTP/1.1\r\nHost: a\r\nX-Slow: ";
  for (size_t i = 0; !dribbler.ClosedByServer() &&
                     std::chrono::steady_clock::now() - start < std::chrono::seconds(10);
       ++i) {
    dribbler.TrySend(std::string(1, i < request.size() ? request[i] : 'x'));
    if (i == 2) {  // served while the slow ones are open
      EXPECT_EQ(HttpConnection(metrics.port()).Request("GET", "/metrics").status, 200);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(40));
  }
  EXPECT_TRUE(dribbler.ClosedByServer()) << "a request trickling in renews its timeout";
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(300));
  EXPECT_TRUE(idle.ReadsEof());
  EXPECT_EQ(metrics.evicted_connections(), 0u);  // timed out, not evicted
}

// At the limit with every connection being answered (clients that asked for a
// large response and do not read it), the oldest is cut for the new one.
TEST(MetricsHttpTimeouts, AtTheLimitTheOldestResponseIsCutForANewScrape) {
  const std::string body(16 << 20, 'x');  // more than the socket buffers hold
  std::atomic<int> rendered{0};
  server::MetricsHttpServer metrics(
      [&] {
        rendered += 1;
        return body;
      },
      {.max_connections = 2});
  ASSERT_OK(metrics.Start("127.0.0.1", 0));
  HttpConnection first(metrics.port());
  HttpConnection second(metrics.port());
  first.Send("GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n");
  second.Send("GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n");
  // Both being answered: each request was read and rendered (the metrics
  // thread then starts its response before it accepts another connection).
  // (A fixed 200 ms sleep here could end first on a loaded machine.)
  ASSERT_TRUE(testing::WaitUntil([&] { return rendered.load() >= 2; }));
  HttpConnection scrape(metrics.port());
  HttpResponse r = scrape.Request("GET", "/metrics");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body.size(), body.size());
  EXPECT_EQ(metrics.evicted_connections(), 1u);
  EXPECT_EQ(first.Read().status, 0);  // cut: its response never completes
}

TEST_F(MetricsHttp, AMetricsPortInUseFailsStart) {
  ServerOptions options;
  options.metrics_port = server_->metrics_port();  // taken by the fixture's server
  Server second(options, engine_.get());
  Status s = second.Start();
  EXPECT_TRUE(s.IsIOError()) << s.ToString();
}

}  // namespace
}  // namespace prefixkv
