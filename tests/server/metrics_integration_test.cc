// `prefixkv serve --metrics-port 0` scraped with a real HTTP client (curl):
// every line passes the strict exposition-format check (and promtool's, when
// installed), every tier and owner counter equals what INFO reports over the
// RESP port at the same moment, a served restore (PKV.MATCH + PKV.GET) is in
// the restore histogram and token counters, the build and process families
// are there, every family is in docs/metrics.md, other paths and methods are
// refused, and the listener goes away with the server on SIGTERM.
#include <gtest/gtest.h>

#include <chrono>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "prefixkv/version.h"
#include "tests/server/exposition_check.h"
#include "tests/server/serve_process.h"
#include "tests/server/server_fixture.h"

namespace prefixkv {
namespace {

using testing::PromExposition;

// INFO's counter names and the metric suffixes they are rendered as.
const std::map<std::string, std::string> kInfoToMetric = {
    {"entries", "blocks"},
    {"bytes", "bytes"},
    {"pinned_bytes", "pinned_bytes"},
    {"external_bytes", "external_bytes"},
    {"hits", "hits_total"},
    {"misses", "misses_total"},
    {"inserts", "inserts_total"},
    {"removes", "removes_total"},
    {"evictions", "evictions_total"},
    {"spills", "spills_total"},
    {"corruptions", "checksum_failures_total"},
    {"io_errors", "io_errors_total"},
};

struct Info {
  std::map<std::string, uint64_t> fields;                            // "name:value" lines
  std::map<std::string, std::map<std::string, std::string>> owners;  // by name
};

Info ParseInfo(const std::string& text) {
  Info info;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    size_t colon = line.find(':');
    if (line.empty() || line[0] == '#' || colon == std::string::npos) continue;
    const std::string key = line.substr(0, colon), value = line.substr(colon + 1);
    if (key.rfind("owner", 0) == 0 && value.rfind("name=", 0) == 0) {
      std::map<std::string, std::string> kv;
      std::istringstream parts(value);
      std::string part;
      while (std::getline(parts, part, ',')) {
        size_t eq = part.find('=');
        kv[part.substr(0, eq)] = part.substr(eq + 1);
      }
      info.owners[kv["name"]] = kv;
    } else if (!value.empty() &&
               value.find_first_not_of("0123456789") == std::string::npos) {
      info.fields[key] = std::stoull(value);
    }
  }
  return info;
}

class MetricsIntegration : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(std::system("command -v curl >/dev/null 2>&1"), 0)
        << "curl is needed (Debian package curl; tools/run test installs it)";
    serve_ = std::make_unique<testing::ServeProcess>(
        dir_.str() + "/data",
        std::vector<std::string>{"--metrics-port", "0", "--hot-capacity-bytes", "64K"});
    ASSERT_NE(serve_->port(), 0) << "prefixkv serve did not start";
    const std::string line = serve_->NextLine();
    const std::string prefix = "metrics on http://127.0.0.1:";
    ASSERT_EQ(line.rfind(prefix, 0), 0u) << line;
    url_ = "http://127.0.0.1:" + std::to_string(std::atoi(line.c_str() + prefix.size()));
  }

  // `curl -i URL/metrics`: the status line and headers, then the body.
  std::pair<std::string, std::string> Scrape() {
    std::string out =
        testing::ShellOutput("curl -sS -i --max-time 10 " + url_ + "/metrics");
    size_t end = out.find("\r\n\r\n");
    if (end == std::string::npos) return {out, ""};
    return {out.substr(0, end + 2), out.substr(end + 4)};
  }
  std::string StatusOf(const std::string& curl_args) {
    return testing::ShellOutput("curl -s -o /dev/null --max-time 10 -w '%{http_code}' " +
                                curl_args);
  }

  testing::TempDir dir_;
  std::unique_ptr<testing::ServeProcess> serve_;
  std::string url_;
};

TEST_F(MetricsIntegration, ScrapedMetricsAreWellFormedAndAgreeWithInfo) {
  testing::RespClient c(serve_->port());
  ASSERT_TRUE(c.connected());
  // Raw keys past the 64 KiB hot budget (evictions, write-back to SSD), a
  // model's blocks, hits on both tiers and misses.
  const std::string value(4096, 'v');
  for (int i = 0; i < 40; ++i) {
    ASSERT_EQ(c.Call({"SET", "key" + std::to_string(i), value}).str, "OK");
  }
  const NamespaceSpec spec = testing::KvOnlySpec();
  ASSERT_FALSE(c.Call(testing::RegisterArgs(spec)).IsError());
  ASSERT_FALSE(c.Call(testing::PutArgs(testing::EncodedStore(spec, testing::Tokens(3))))
                   .IsError());
  EXPECT_EQ(c.Call({"GET", "key0"}).str, value);   // from SSD
  EXPECT_EQ(c.Call({"GET", "key39"}).str, value);  // from RAM
  EXPECT_TRUE(c.Call({"GET", "absent"}).null);
  EXPECT_TRUE(c.Call({"GET"}).IsError());                  // a rejected call
  EXPECT_TRUE(c.Call({"PKV.GET", "zz", "zz"}).IsError());  // a failed one
  // A served restore: PKV.MATCH of 5 tokens (one block found), then PKV.GET
  // of the matched block.
  const std::string root = NamespaceRoot(spec)->ToHex();
  const testing::Reply match =
      c.Call({"PKV.MATCH", root, "4", testing::TokenBlob(testing::Tokens(1))});
  ASSERT_EQ(match.elems.size(), 2u) << match.str;
  ASSERT_EQ(match.elems[1].elems.size(), 1u) << match.str;
  EXPECT_EQ(c.Call({"PKV.GET", root, match.elems[1].elems[0].str}).type, '$');

  // Wait until the write-back queue is empty: nothing changes any more. Up
  // to 30 s (as testing::WaitUntil): a loaded machine may take more than the
  // 10 s this once allowed, and an empty queue ends the wait at once.
  std::string headers, body;
  PromExposition e;
  for (int i = 0; i < 600; ++i) {
    std::tie(headers, body) = Scrape();
    ASSERT_OK_AND_ASSIGN(e, testing::ParseExposition(body));
    if (e.Value("prefixkv_ssd_write_back_queue_blocks") == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(headers.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << headers;
  EXPECT_NE(headers.find("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"),
            std::string::npos)
      << headers;
  const testing::Reply reply = c.Call({"INFO"});
  ASSERT_EQ(reply.type, '$') << reply.str;
  const Info info = ParseInfo(reply.str);

  // The tiers, whole.
  size_t compared = 0;
  for (const char* tier : {"hot", "ssd"}) {
    const std::string t(tier);
    EXPECT_EQ(e.Value("prefixkv_tier_capacity_bytes", {{"tier", t}}),
              info.fields.at(t + "_capacity_bytes"));
    for (const auto& [field, metric] : kInfoToMetric) {
      ASSERT_TRUE(info.fields.count(t + "_" + field)) << t << "_" << field;
      EXPECT_EQ(e.Value("prefixkv_tier_" + metric, {{"tier", t}}),
                info.fields.at(t + "_" + field))
          << t << " " << field;
      ++compared;
    }
  }
  EXPECT_EQ(e.Value("prefixkv_hot_dirty_blocks"), info.fields.at("hot_dirty_blocks"));
  EXPECT_EQ(e.Value("prefixkv_ssd_write_back_queue_blocks"),
            info.fields.at("ssd_queued_blocks"));
  EXPECT_EQ(e.Value("prefixkv_ssd_write_back_failed_blocks"),
            info.fields.at("ssd_write_back_failed_blocks"));
  EXPECT_EQ(e.Value("prefixkv_ssd_write_back_failures_total"),
            info.fields.at("ssd_write_back_failures"));
  EXPECT_EQ(info.fields.at("ssd_write_back_failing"), 0u);
  EXPECT_EQ(e.Value("prefixkv_ssd_read_ahead_reads_total"),
            info.fields.at("ssd_read_ahead_reads"));
  EXPECT_EQ(e.Value("prefixkv_ssd_read_ahead_bytes_total"),
            info.fields.at("ssd_read_ahead_bytes"));
  // Each owner's share of the hot tier ("# Owners"), and its SSD share, whose
  // sum is the SSD tier's (a fresh directory: every owner is of this run).
  ASSERT_EQ(info.owners.size(), 2u);  // "values" and the model
  std::map<std::string, double> ssd_sum;
  for (const auto& [name, kv] : info.owners) {
    for (const auto& [field, metric] : kInfoToMetric) {
      EXPECT_EQ(e.Value("prefixkv_owner_" + metric, {{"tier", "hot"}, {"owner", name}}),
                std::stoull(kv.at(field)))
          << name << " " << field;
      ++compared;
      std::optional<double> ssd =
          e.Value("prefixkv_owner_" + metric, {{"tier", "ssd"}, {"owner", name}});
      ASSERT_TRUE(ssd.has_value()) << name << " " << metric;
      ssd_sum[metric] += *ssd;
    }
  }
  for (const auto& [field, metric] : kInfoToMetric) {
    EXPECT_EQ(ssd_sum[metric], info.fields.at("ssd_" + field)) << metric;
  }
  EXPECT_EQ(compared, 2 * kInfoToMetric.size() * 2);
  // Not vacuous: the traffic moved the counters that matter.
  EXPECT_GT(info.fields.at("hot_evictions"), 0u);
  EXPECT_GT(info.fields.at("hot_spills"), 0u);
  EXPECT_GT(info.fields.at("ssd_entries"), 0u);
  EXPECT_GT(info.fields.at("ssd_hits"), 0u);
  EXPECT_GT(info.fields.at("hot_misses"), 0u);
  EXPECT_GT(std::stoull(info.owners.at(spec.model).at("entries")), 0u);
  // The server's counters (a command is counted once it has run: INFO is not
  // in its own count).
  EXPECT_EQ(e.Value("prefixkv_server_connected_clients"),
            info.fields.at("connected_clients"));
  EXPECT_EQ(e.Value("prefixkv_server_connections_received_total"),
            info.fields.at("total_connections_received"));
  EXPECT_EQ(e.Value("prefixkv_server_commands_processed_total"),
            info.fields.at("total_commands_processed"));
  EXPECT_EQ(e.Value("prefixkv_server_auth_failures_total"),
            info.fields.at("auth_failures"));
  EXPECT_EQ(e.Value("prefixkv_server_auth_throttled_total"),
            info.fields.at("auth_throttled"));
  EXPECT_EQ(e.Value("prefixkv_server_out_of_memory_refusals_total"),
            info.fields.at("out_of_memory_refusals"));
  // Each command's counters and total time, as INFO commandstats has them
  // (INFO itself ran since the scrape: it is the one line that differs).
  std::map<std::string, std::map<std::string, std::string>> cmdstats;
  {
    std::istringstream in(c.Call({"INFO", "commandstats"}).str);
    std::string line;
    while (std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.rfind("cmdstat_", 0) != 0) continue;
      const size_t colon = line.find(':');
      std::istringstream parts(line.substr(colon + 1));
      std::string part;
      auto& fields = cmdstats[line.substr(8, colon - 8)];
      while (std::getline(parts, part, ',')) {
        const size_t eq = part.find('=');
        fields[part.substr(0, eq)] = part.substr(eq + 1);
      }
    }
  }
  for (const char* command : {"set", "get", "pkv.register", "pkv.put", "pkv.get"}) {
    ASSERT_TRUE(cmdstats.count(command)) << command;
  }
  EXPECT_EQ(cmdstats.at("get").at("rejected_calls"), "1");
  EXPECT_EQ(cmdstats.at("pkv.get").at("failed_calls"), "1");
  size_t commands_compared = 0;
  const testing::PromFamily* calls = e.Find("prefixkv_command_calls_total");
  ASSERT_NE(calls, nullptr);
  for (const testing::PromSample& sample : calls->samples) {
    const std::string name = sample.Label("command").value_or("");
    if (name == "info") continue;
    const testing::PromLabels labels = {{"command", name}};
    if (!cmdstats.count(name)) {  // never called: zero everywhere
      EXPECT_EQ(sample.value, 0) << name;
      EXPECT_EQ(e.Value("prefixkv_command_rejected_calls_total", labels), 0) << name;
      continue;
    }
    const auto& f = cmdstats.at(name);
    EXPECT_EQ(sample.value, std::stoull(f.at("calls"))) << name;
    EXPECT_EQ(e.Value("prefixkv_command_failed_calls_total", labels),
              std::stoull(f.at("failed_calls")))
        << name;
    EXPECT_EQ(e.Value("prefixkv_command_rejected_calls_total", labels),
              std::stoull(f.at("rejected_calls")))
        << name;
    EXPECT_EQ(e.Value("prefixkv_command_duration_seconds_count", labels),
              std::stoull(f.at("calls")))
        << name;
    const std::optional<double> sum =
        e.Value("prefixkv_command_duration_seconds_sum", labels);
    ASSERT_TRUE(sum.has_value()) << name;
    EXPECT_NEAR(*sum * 1e6, static_cast<double>(std::stoull(f.at("usec"))), 0.5) << name;
    ++commands_compared;
  }
  EXPECT_EQ(commands_compared, cmdstats.size() - 1);  // every line but INFO's

  // The served restore is in the model's restore histogram (a few
  // microseconds at least: a real clock) and its 4 tokens in the restored
  // tokens, from whichever tier PKV.MATCH found the block in; the token
  // counters are INFO's Owners fields.
  EXPECT_EQ(e.Value("prefixkv_restore_duration_seconds_count", {{"owner", spec.model}}),
            1);
  EXPECT_GT(e.Value("prefixkv_restore_duration_seconds_sum", {{"owner", spec.model}}), 0);
  double restored = 0;
  for (const char* tier : {"hot", "ssd", "remote"}) {
    const std::optional<double> v = e.Value("prefixkv_restored_tokens_total",
                                            {{"tier", tier}, {"owner", spec.model}});
    ASSERT_TRUE(v.has_value()) << tier;
    EXPECT_EQ(*v,
              std::stoull(
                  info.owners.at(spec.model).at(std::string("restored_tokens_") + tier)))
        << tier;
    restored += *v;
  }
  EXPECT_EQ(restored, 4);
  EXPECT_EQ(e.Value("prefixkv_prefix_cache_queries_total", {{"owner", spec.model}}), 4);
  EXPECT_EQ(e.Value("prefixkv_prefix_cache_hits_total", {{"owner", spec.model}}), 4);
  EXPECT_EQ(info.owners.at(spec.model).at("prefix_query_tokens"), "4");
  EXPECT_EQ(info.owners.at(spec.model).at("prefix_hit_tokens"), "4");
  // The build and the process.
  const testing::PromFamily* build = e.Find("prefixkv_build_info");
  ASSERT_NE(build, nullptr);
  ASSERT_EQ(build->samples.size(), 1u);
  EXPECT_EQ(build->samples[0].Label("version"), PREFIXKV_VERSION_STRING);
  EXPECT_EQ(build->samples[0].value, 1);
  EXPECT_GT(e.Value("process_resident_memory_bytes").value_or(0), 1 << 20);
  EXPECT_GE(e.Value("process_virtual_memory_bytes").value_or(0),
            e.Value("process_resident_memory_bytes").value_or(0));
  EXPECT_GT(e.Value("process_open_fds").value_or(0), 3);  // the listeners at least
  EXPECT_GE(e.Value("process_max_fds").value_or(0),
            e.Value("process_open_fds").value_or(0));
  EXPECT_GE(e.Value("process_cpu_seconds_total").value_or(-1), 0);
  const double now = static_cast<double>(std::time(nullptr));
  EXPECT_LE(e.Value("process_start_time_seconds").value_or(0), now + 1);
  EXPECT_GT(e.Value("process_start_time_seconds").value_or(0), now - 600);

  // Every family scraped is documented.
  std::ifstream doc(std::string(PREFIXKV_SOURCE_DIR) + "/docs/metrics.md");
  const std::string doc_text((std::istreambuf_iterator<char>(doc)),
                             std::istreambuf_iterator<char>());
  for (const testing::PromFamily& f : e.families) {
    EXPECT_NE(doc_text.find("| `" + f.name + "` | " + f.type + " |"), std::string::npos)
        << f.name << " is not in docs/metrics.md";
  }
}

// Prometheus' own checker (`promtool check metrics`, Debian's prometheus
// package) on a scrape where every kind of family has samples: it parses the
// text and lints names, types, help and units.
TEST_F(MetricsIntegration, PromtoolChecksTheScrapeClean) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "promtool not installed (Debian package prometheus): "
                    "`promtool check metrics` not run";
  }
  testing::RespClient c(serve_->port());
  ASSERT_TRUE(c.connected());
  const NamespaceSpec spec = testing::KvOnlySpec();
  ASSERT_FALSE(c.Call(testing::RegisterArgs(spec)).IsError());
  const std::vector<std::string> records =
      testing::EncodedStore(spec, testing::Tokens(2));
  ASSERT_FALSE(c.Call(testing::PutArgs(records)).IsError());
  const std::string root = NamespaceRoot(spec)->ToHex();
  const testing::Reply match =
      c.Call({"PKV.MATCH", root, "4", testing::TokenBlob(testing::Tokens(2))});
  ASSERT_EQ(match.elems.size(), 2u) << match.str;
  for (const testing::Reply& key : match.elems[1].elems) {
    EXPECT_EQ(c.Call({"PKV.GET", root, key.str}).type, '$');
  }
  // A model name that is not UTF-8 (a RESP argument is bytes) is an owner
  // label too: Prometheus refused the whole scrape over it.
  NamespaceSpec not_utf8 = spec;
  not_utf8.model = "m\xff";
  ASSERT_FALSE(c.Call(testing::RegisterArgs(not_utf8)).IsError());
  const std::string body = Scrape().second;
  ASSERT_OK(testing::ParseExposition(body).status());
  ASSERT_NE(body.find("prefixkv_restored_tokens_total{"), std::string::npos);
  ASSERT_NE(body.find("process_open_fds "), std::string::npos);
  const std::string path = dir_.str() + "/metrics.txt";
  std::ofstream(path) << body;
  const std::string out =
      testing::ShellOutput("promtool check metrics < " + path + " 2>&1; echo \"rc=$?\"");
  EXPECT_EQ(out, "rc=0\n") << out;
}

TEST_F(MetricsIntegration, OtherPathsAndMethodsAreRefusedAndSigtermStopsTheListener) {
  EXPECT_EQ(StatusOf(url_ + "/"), "404");
  EXPECT_EQ(StatusOf(url_ + "/metrics/x"), "404");
  EXPECT_EQ(StatusOf("-X POST " + url_ + "/metrics"), "405");
  EXPECT_EQ(StatusOf("-H 'X-Big: " + std::string(9000, 'a') + "' " + url_ + "/metrics"),
            "400");
  EXPECT_EQ(StatusOf(url_ + "/metrics"), "200");
  EXPECT_EQ(serve_->StopWith(SIGTERM), 0);
  EXPECT_EQ(StatusOf(url_ + "/metrics"), "000");  // nothing listens any more
}

}  // namespace
}  // namespace prefixkv
