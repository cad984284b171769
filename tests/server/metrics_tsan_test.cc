// Scrapes race the data path: two RESP clients write and read (evictions,
// write-back to SSD) while a scraper fetches /metrics over and over; every
// scrape is well-formed and no counter ever goes down between two scrapes;
// then the server stops with a scraper connected. Run under ThreadSanitizer.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <thread>

#include "tests/server/exposition_check.h"
#include "tests/server/http_client.h"
#include "tests/server/server_fixture.h"
#include "tests/support/rocksdb_tsan_suppressions.h"

namespace prefixkv {
namespace {

class MetricsTsan : public testing::ServerFixture {};

TEST_F(MetricsTsan, ScrapesRaceCommandsAndNoCounterGoesDown) {
  options_.metrics_port = 0;
  StartServer(/*hot_capacity_bytes=*/256 << 10);
  const int rounds = std::getenv("PREFIXKV_LONG") != nullptr ? 2000 : 200;
  std::atomic<bool> writers_done{false};
  std::vector<std::thread> writers;
  for (int w = 0; w < 2; ++w) {
    writers.emplace_back([&, w] {
      auto c = Connect();
      const std::string value(4096, static_cast<char>('a' + w));
      for (int i = 0; i < rounds; ++i) {
        const std::string key = "k" + std::to_string(w) + "-" + std::to_string(i % 100);
        EXPECT_EQ(c->Call({"SET", key, value}).str, "OK");
        EXPECT_EQ(c->Call({"GET", key}).str, value);
      }
    });
  }
  std::map<std::string, double> last;  // counter series -> value
  int scrapes = 0;
  testing::HttpConnection http(server_->metrics_port());
  auto scrape_once = [&] {
    testing::HttpResponse r = http.Request("GET", "/metrics");
    ASSERT_EQ(r.status, 200);
    ASSERT_OK_AND_ASSIGN(testing::PromExposition e, testing::ParseExposition(r.body));
    for (const testing::PromFamily& f : e.families) {
      if (f.type != "counter") continue;
      for (const testing::PromSample& s : f.samples) {
        std::string series = s.name;
        for (const auto& [k, v] : s.labels) series += "," + k + "=" + v;
        EXPECT_GE(s.value, last[series]) << series << " went down";
        last[series] = s.value;
      }
    }
    ++scrapes;
  };
  std::thread done_flag([&] {
    for (auto& t : writers) t.join();
    writers_done = true;
  });
  while (!writers_done) scrape_once();
  done_flag.join();
  scrape_once();
  EXPECT_GT(scrapes, 1);
  EXPECT_GT(last["prefixkv_tier_evictions_total,tier=hot"], 0);
  EXPECT_GE(last["prefixkv_server_commands_processed_total"], 4.0 * rounds);
  server_->Stop();  // with the scraper's keep-alive connection open
  EXPECT_TRUE(http.ReadsEof());
}

}  // namespace
}  // namespace prefixkv
