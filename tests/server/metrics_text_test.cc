// RenderMetrics: the exact exposition of a known snapshot, every counter in
// the sample named for it, label escaping, the strict format check on a full
// snapshot, and docs/metrics.md against the family table.
#include "metrics_text.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>
#include <string_view>

#include "commands.h"
#include "prefixkv/prefix_token_fields.h"
#include "prefixkv/tier_counter_fields.h"
#include "prefixkv/version.h"
#include "tests/server/exposition_check.h"
#include "tests/support/test_util.h"

namespace prefixkv::server {
namespace {

using testing::ParseExposition;
using testing::PromExposition;

// Every TierCounters field under the metric suffix it is rendered as.
const std::vector<std::pair<std::string, uint64_t TierCounters::*>> kFields = {
    {"blocks", &TierCounters::entries},
    {"bytes", &TierCounters::bytes},
    {"pinned_bytes", &TierCounters::pinned_bytes},
    {"external_bytes", &TierCounters::external_bytes},
    {"hits_total", &TierCounters::hits},
    {"misses_total", &TierCounters::misses},
    {"inserts_total", &TierCounters::inserts},
    {"removes_total", &TierCounters::removes},
    {"evictions_total", &TierCounters::evictions},
    {"spills_total", &TierCounters::spills},
    {"checksum_failures_total", &TierCounters::corruptions},
    {"io_errors_total", &TierCounters::io_errors},
};

// Counters with distinct values from `*next` on.
TierCounters Distinct(uint64_t* next) {
  TierCounters c;
  for (const auto& [suffix, field] : kFields) c.*field = (*next)++;
  return c;
}

// Hot and SSD tiers, a model with a quota and restores, the raw keys, a
// memory charge: every family has samples.
EngineStats FullSnapshot() {
  uint64_t next = 1;
  EngineStats s;
  s.hot_capacity_bytes = 1 << 20;
  s.hot = Distinct(&next);
  s.dirty_blocks = next++;
  s.has_ssd = true;
  s.ssd_capacity_bytes = 1 << 30;
  s.ssd = Distinct(&next);
  s.ssd_queued_blocks = next++;
  s.ssd_write_back_failed_blocks = next++;
  s.ssd_write_back_failures = next++;
  s.ssd_read_ahead_reads = next++;
  s.ssd_read_ahead_served = next++;
  s.ssd_read_ahead_stale = next++;
  s.ssd_read_ahead_unused = next++;
  s.ssd_read_ahead_bytes = next++;
  for (const char* name : {"llama-3", "values", "sessions"}) {
    EngineOwnerStats o;
    o.name = name;
    o.hot = Distinct(&next);
    o.ssd = Distinct(&next);
    s.owners.push_back(o);
  }
  s.owners[0].hot_quota_bytes = 4096;
  RestoreLatencyStats latency;
  latency.counts[3] = 2;
  latency.counts.back() = 1;
  latency.sum_micros = 1234567;
  s.owners[0].restore_latency = latency;
  s.owners[0].prefix_tokens = PrefixTokenCounters{};
  for (const PrefixTokenField& f : kPrefixTokenFields) {
    s.owners[0].prefix_tokens.value().*f.field = next++;
  }
  s.has_remote = true;
  s.remote_describe = "remote: redis cluster 127.0.0.1:7000 (3 masters)";
  for (uint64_t RemoteCounters::*f :
       {&RemoteCounters::hits, &RemoteCounters::misses, &RemoteCounters::corruptions,
        &RemoteCounters::errors, &RemoteCounters::bytes_read,
        &RemoteCounters::bytes_written, &RemoteCounters::writes, &RemoteCounters::dropped,
        &RemoteCounters::write_failures, &RemoteCounters::over_quota,
        &RemoteCounters::rewrites_skipped, &RemoteCounters::queued_blocks,
        &RemoteCounters::queued_bytes}) {
    s.remote.*f = next++;
  }
  s.remote.available = true;
  s.advisor.sampling_rate = 0.25;
  s.advisor.points = {{"hot", 0.5, 512, 4, 0.125}, {"ssd", 2, 8192, 64, 0.75}};
  s.events = {.enabled = true,
              .persistent = true,
              .head_seq = 900,
              .first_seq = 100,
              .events = 801,
              .bytes = 801 * 89,
              .retention_bytes = 64 << 20,
              .retention_ms = 86'400'000,
              .appended = 850,
              .trimmed = 49,
              .reconciled = 2,
              .write_errors = 1,
              .append_waits = 3};
  return s;
}

ServerStats SomeServerStats() {
  return {.connected_clients = 3,
          .total_connections_received = 17,
          .rejected_connections = 2,
          .total_commands_processed = 1001,
          .protocol_errors = 5,
          .idle_disconnections = 4,
          .auth_failures = 6,
          .auth_throttled = 10,
          .out_of_memory = 8,
          .client_buffer_bytes = 9};
}

// SomeServerStats plus two commands, one with calls of every kind: every
// command family has samples.
ServerStats FullServerStats() {
  ServerStats s = SomeServerStats();
  CommandStats get{.name = "get", .calls = 5, .failed_calls = 1, .rejected_calls = 2};
  get.latency.counts[0] = 3;  // <= 10 us
  get.latency.counts[7] = 2;  // <= 2.5 ms
  get.latency.sum_micros = 4321;
  s.commands.push_back(get);
  s.commands.push_back({.name = "pkv.get"});
  return s;
}

TEST(MetricsText, RendersAKnownSnapshotExactly) {
  EngineStats s;
  s.hot_capacity_bytes = 65536;
  uint64_t next = 10;
  s.hot = Distinct(&next);
  s.dirty_blocks = 7;
  s.memory_mapped_bytes = 6 << 20;
  s.memory_regions = 2;
  EngineOwnerStats model;
  model.name = "m\"1\\";  // quote and backslash escaped in the label
  model.hot = s.hot;
  model.hot_quota_bytes = 32768;
  RestoreLatencyStats latency;
  latency.counts[0] = 1;   // <= 10 us
  latency.counts[6] = 2;   // <= 1 ms
  latency.counts[14] = 1;  // > 1 s
  latency.sum_micros = 2001605;
  model.restore_latency = latency;
  model.prefix_tokens = PrefixTokenCounters{.query_tokens = 96,
                                            .hit_tokens = 64,
                                            .restored_tokens_hot = 48,
                                            .restored_tokens_ssd = 16,
                                            .restored_tokens_remote = 0,
                                            .shape_refused_stores = 2,
                                            .shape_refused_tokens = 8};
  s.owners.push_back(model);

  const std::string expected =
      R"(# HELP prefixkv_tier_capacity_bytes Capacity of the tier in charged bytes
# TYPE prefixkv_tier_capacity_bytes gauge
prefixkv_tier_capacity_bytes{tier="hot"} 65536
# HELP prefixkv_tier_blocks Blocks resident, whole tier
# TYPE prefixkv_tier_blocks gauge
prefixkv_tier_blocks{tier="hot"} 10
# HELP prefixkv_tier_bytes Charged bytes of resident blocks plus external charges (hot: payload and per-entry overhead; ssd: payload), whole tier
# TYPE prefixkv_tier_bytes gauge
prefixkv_tier_bytes{tier="hot"} 11
# HELP prefixkv_tier_pinned_bytes Charged bytes of blocks pinned by readers (hot), whole tier
# TYPE prefixkv_tier_pinned_bytes gauge
prefixkv_tier_pinned_bytes{tier="hot"} 12
# HELP prefixkv_tier_external_bytes Bytes charged for memory held outside the blocks, such as live sessions' KV (hot), whole tier
# TYPE prefixkv_tier_external_bytes gauge
prefixkv_tier_external_bytes{tier="hot"} 13
# HELP prefixkv_tier_hits_total Reads that found the block, whole tier
# TYPE prefixkv_tier_hits_total counter
prefixkv_tier_hits_total{tier="hot"} 14
# HELP prefixkv_tier_misses_total Reads that did not find the block (damaged blocks included), whole tier
# TYPE prefixkv_tier_misses_total counter
prefixkv_tier_misses_total{tier="hot"} 15
# HELP prefixkv_tier_inserts_total Blocks stored, new or replacing one, whole tier
# TYPE prefixkv_tier_inserts_total counter
prefixkv_tier_inserts_total{tier="hot"} 16
# HELP prefixkv_tier_removes_total Blocks removed explicitly, whole tier
# TYPE prefixkv_tier_removes_total counter
prefixkv_tier_removes_total{tier="hot"} 17
# HELP prefixkv_tier_evictions_total Blocks removed to make room, whole tier
# TYPE prefixkv_tier_evictions_total counter
prefixkv_tier_evictions_total{tier="hot"} 18
# HELP prefixkv_tier_spills_total Evicted blocks handed to the next tier (hot: to the SSD write-back), whole tier
# TYPE prefixkv_tier_spills_total counter
prefixkv_tier_spills_total{tier="hot"} 19
# HELP prefixkv_tier_checksum_failures_total Blocks that failed their checksum or decoding when read, whole tier
# TYPE prefixkv_tier_checksum_failures_total counter
prefixkv_tier_checksum_failures_total{tier="hot"} 20
# HELP prefixkv_tier_io_errors_total Failed reads or writes of the medium, whole tier
# TYPE prefixkv_tier_io_errors_total counter
prefixkv_tier_io_errors_total{tier="hot"} 21
# HELP prefixkv_hot_dirty_blocks Hot blocks not yet written to the SSD tier
# TYPE prefixkv_hot_dirty_blocks gauge
prefixkv_hot_dirty_blocks 7
# HELP prefixkv_memory_mapped_bytes Bytes of the regions the engine's memory resource has mapped (hot blocks, SSD reads, restore plans)
# TYPE prefixkv_memory_mapped_bytes gauge
prefixkv_memory_mapped_bytes 6291456
# HELP prefixkv_memory_regions Regions the engine's memory resource has mapped
# TYPE prefixkv_memory_regions gauge
prefixkv_memory_regions 2
# HELP prefixkv_owner_hot_quota_bytes Most hot bytes the owner may hold (owners with a quota only)
# TYPE prefixkv_owner_hot_quota_bytes gauge
prefixkv_owner_hot_quota_bytes{owner="m\"1\\"} 32768
# HELP prefixkv_owner_blocks Blocks resident, per owner of the hot budget
# TYPE prefixkv_owner_blocks gauge
prefixkv_owner_blocks{tier="hot",owner="m\"1\\"} 10
# HELP prefixkv_owner_bytes Charged bytes of resident blocks plus external charges (hot: payload and per-entry overhead; ssd: payload), per owner of the hot budget
# TYPE prefixkv_owner_bytes gauge
prefixkv_owner_bytes{tier="hot",owner="m\"1\\"} 11
# HELP prefixkv_owner_pinned_bytes Charged bytes of blocks pinned by readers (hot), per owner of the hot budget
# TYPE prefixkv_owner_pinned_bytes gauge
prefixkv_owner_pinned_bytes{tier="hot",owner="m\"1\\"} 12
# HELP prefixkv_owner_external_bytes Bytes charged for memory held outside the blocks, such as live sessions' KV (hot), per owner of the hot budget
# TYPE prefixkv_owner_external_bytes gauge
prefixkv_owner_external_bytes{tier="hot",owner="m\"1\\"} 13
# HELP prefixkv_owner_hits_total Reads that found the block, per owner of the hot budget
# TYPE prefixkv_owner_hits_total counter
prefixkv_owner_hits_total{tier="hot",owner="m\"1\\"} 14
# HELP prefixkv_owner_misses_total Reads that did not find the block (damaged blocks included), per owner of the hot budget
# TYPE prefixkv_owner_misses_total counter
prefixkv_owner_misses_total{tier="hot",owner="m\"1\\"} 15
# HELP prefixkv_owner_inserts_total Blocks stored, new or replacing one, per owner of the hot budget
# TYPE prefixkv_owner_inserts_total counter
prefixkv_owner_inserts_total{tier="hot",owner="m\"1\\"} 16
# HELP prefixkv_owner_removes_total Blocks removed explicitly, per owner of the hot budget
# TYPE prefixkv_owner_removes_total counter
prefixkv_owner_removes_total{tier="hot",owner="m\"1\\"} 17
# HELP prefixkv_owner_evictions_total Blocks removed to make room, per owner of the hot budget
# TYPE prefixkv_owner_evictions_total counter
prefixkv_owner_evictions_total{tier="hot",owner="m\"1\\"} 18
# HELP prefixkv_owner_spills_total Evicted blocks handed to the next tier (hot: to the SSD write-back), per owner of the hot budget
# TYPE prefixkv_owner_spills_total counter
prefixkv_owner_spills_total{tier="hot",owner="m\"1\\"} 19
# HELP prefixkv_owner_checksum_failures_total Blocks that failed their checksum or decoding when read, per owner of the hot budget
# TYPE prefixkv_owner_checksum_failures_total counter
prefixkv_owner_checksum_failures_total{tier="hot",owner="m\"1\\"} 20
# HELP prefixkv_owner_io_errors_total Failed reads or writes of the medium, per owner of the hot budget
# TYPE prefixkv_owner_io_errors_total counter
prefixkv_owner_io_errors_total{tier="hot",owner="m\"1\\"} 21
# HELP prefixkv_restore_duration_seconds Time of Engine::Restore calls per model
# TYPE prefixkv_restore_duration_seconds histogram
prefixkv_restore_duration_seconds_bucket{owner="m\"1\\",le="0.00001"} 1
prefixkv_restore_duration_seconds_bucket{owner="m\"1\\",le="0.000025"} 1
prefixkv_restore_duration_seconds_bucket{owner="m\"1\\",le="0.00005"} 1
prefixkv_restore_duration_seconds_bucket{owner="m\"1\\",le="0.0001"} 1
prefixkv_restore_duration_seconds_bucket{owner="m\"1\\",le="0.00025"} 1
prefixkv_restore_duration_seconds_bucket{owner="m\"1\\",le="0.0005"} 1
prefixkv_restore_duration_seconds_bucket{owner="m\"1\\",le="0.001"} 3
prefixkv_restore_duration_seconds_bucket{owner="m\"1\\",le="0.0025"} 3
prefixkv_restore_duration_seconds_bucket{owner="m\"1\\",le="0.005"} 3
prefixkv_restore_duration_seconds_bucket{owner="m\"1\\",le="0.01"} 3
prefixkv_restore_duration_seconds_bucket{owner="m\"1\\",le="0.025"} 3
prefixkv_restore_duration_seconds_bucket{owner="m\"1\\",le="0.05"} 3
prefixkv_restore_duration_seconds_bucket{owner="m\"1\\",le="0.1"} 3
prefixkv_restore_duration_seconds_bucket{owner="m\"1\\",le="1"} 3
prefixkv_restore_duration_seconds_bucket{owner="m\"1\\",le="+Inf"} 4
prefixkv_restore_duration_seconds_sum{owner="m\"1\\"} 2.001605
prefixkv_restore_duration_seconds_count{owner="m\"1\\"} 4
# HELP prefixkv_prefix_cache_queries_total Prefix cache queries in tokens: tokens asked in a match, per model
# TYPE prefixkv_prefix_cache_queries_total counter
prefixkv_prefix_cache_queries_total{owner="m\"1\\"} 96
# HELP prefixkv_prefix_cache_hits_total Prefix cache hits in tokens: tokens a match found cached, per model
# TYPE prefixkv_prefix_cache_hits_total counter
prefixkv_prefix_cache_hits_total{owner="m\"1\\"} 64
# HELP prefixkv_restored_tokens_total Tokens restored, per model and the tier their blocks came from
# TYPE prefixkv_restored_tokens_total counter
prefixkv_restored_tokens_total{tier="hot",owner="m\"1\\"} 48
prefixkv_restored_tokens_total{tier="ssd",owner="m\"1\\"} 16
prefixkv_restored_tokens_total{tier="remote",owner="m\"1\\"} 0
# HELP prefixkv_shape_refused_stores_total Stores refused for holding other layer shapes than the model's spec, per model
# TYPE prefixkv_shape_refused_stores_total counter
prefixkv_shape_refused_stores_total{owner="m\"1\\"} 2
# HELP prefixkv_shape_refused_tokens_total Matched tokens a restore refused because a block of them held other layer shapes than the model's spec, per model
# TYPE prefixkv_shape_refused_tokens_total counter
prefixkv_shape_refused_tokens_total{owner="m\"1\\"} 8
# HELP prefixkv_server_connected_clients Open RESP connections
# TYPE prefixkv_server_connected_clients gauge
prefixkv_server_connected_clients 3
# HELP prefixkv_server_client_buffer_bytes Heap bytes held by the buffers of open RESP connections
# TYPE prefixkv_server_client_buffer_bytes gauge
prefixkv_server_client_buffer_bytes 9
# HELP prefixkv_server_connections_received_total RESP connections accepted
# TYPE prefixkv_server_connections_received_total counter
prefixkv_server_connections_received_total 17
# HELP prefixkv_server_rejected_connections_total RESP connections refused over the client limit
# TYPE prefixkv_server_rejected_connections_total counter
prefixkv_server_rejected_connections_total 2
# HELP prefixkv_server_commands_processed_total RESP commands executed
# TYPE prefixkv_server_commands_processed_total counter
prefixkv_server_commands_processed_total 1001
# HELP prefixkv_server_protocol_errors_total RESP connections closed for malformed input
# TYPE prefixkv_server_protocol_errors_total counter
prefixkv_server_protocol_errors_total 5
# HELP prefixkv_server_idle_disconnections_total RESP connections closed for being idle
# TYPE prefixkv_server_idle_disconnections_total counter
prefixkv_server_idle_disconnections_total 4
# HELP prefixkv_server_auth_failures_total Failed AUTH (and HELLO AUTH) attempts
# TYPE prefixkv_server_auth_failures_total counter
prefixkv_server_auth_failures_total 6
# HELP prefixkv_server_auth_throttled_total AUTH attempts refused unchecked over the server-wide budget
# TYPE prefixkv_server_auth_throttled_total counter
prefixkv_server_auth_throttled_total 10
# HELP prefixkv_server_out_of_memory_refusals_total RESP requests refused because an allocation failed
# TYPE prefixkv_server_out_of_memory_refusals_total counter
prefixkv_server_out_of_memory_refusals_total 8
)";
  const std::string text = RenderMetrics(s, SomeServerStats());
  // First the build, whose compiler label depends on the build; then the rest.
  const std::regex build_info(
      std::string("# HELP prefixkv_build_info Always 1; the labels name the version and "
                  "compiler of this build\n"
                  "# TYPE prefixkv_build_info gauge\n"
                  "prefixkv_build_info\\{version=\"") +
      PREFIXKV_VERSION_STRING + "\",compiler=\"(gcc|clang) [^\"\\n]+\"\\} 1\n");
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(text, m, build_info, std::regex_constants::match_continuous))
      << text.substr(0, 300);
  EXPECT_EQ(text.substr(m.length()), expected);
  EXPECT_OK(ParseExposition(text).status());
}

TEST(MetricsText, EveryTierAndOwnerCounterIsTheSampleNamedForIt) {
  const EngineStats s = FullSnapshot();
  ASSERT_OK_AND_ASSIGN(PromExposition e,
                       ParseExposition(RenderMetrics(s, SomeServerStats())));
  for (const auto& [suffix, field] : kFields) {
    const std::string tier_name = "prefixkv_tier_" + suffix;
    EXPECT_EQ(e.Value(tier_name, {{"tier", "hot"}}), s.hot.*field) << tier_name;
    EXPECT_EQ(e.Value(tier_name, {{"tier", "ssd"}}), s.ssd.*field) << tier_name;
    const std::string owner_name = "prefixkv_owner_" + suffix;
    for (const EngineOwnerStats& o : s.owners) {
      EXPECT_EQ(e.Value(owner_name, {{"tier", "hot"}, {"owner", o.name}}), o.hot.*field)
          << owner_name << " " << o.name;
      EXPECT_EQ(e.Value(owner_name, {{"tier", "ssd"}, {"owner", o.name}}), o.ssd.*field)
          << owner_name << " " << o.name;
    }
  }
  EXPECT_EQ(e.Value("prefixkv_tier_capacity_bytes", {{"tier", "hot"}}), 1 << 20);
  EXPECT_EQ(e.Value("prefixkv_tier_capacity_bytes", {{"tier", "ssd"}}), 1 << 30);
  EXPECT_EQ(e.Value("prefixkv_hot_dirty_blocks"), s.dirty_blocks);
  EXPECT_EQ(e.Value("prefixkv_ssd_write_back_queue_blocks"), s.ssd_queued_blocks);
  EXPECT_EQ(e.Value("prefixkv_ssd_write_back_failed_blocks"),
            s.ssd_write_back_failed_blocks);
  EXPECT_EQ(e.Value("prefixkv_ssd_write_back_failures_total"), s.ssd_write_back_failures);
  EXPECT_EQ(e.Value("prefixkv_ssd_read_ahead_reads_total"), s.ssd_read_ahead_reads);
  EXPECT_EQ(e.Value("prefixkv_ssd_read_ahead_served_total"), s.ssd_read_ahead_served);
  EXPECT_EQ(e.Value("prefixkv_ssd_read_ahead_discarded_total", {{"reason", "stale"}}),
            s.ssd_read_ahead_stale);
  EXPECT_EQ(e.Value("prefixkv_ssd_read_ahead_discarded_total", {{"reason", "unused"}}),
            s.ssd_read_ahead_unused);
  EXPECT_EQ(e.Value("prefixkv_ssd_read_ahead_bytes_total"), s.ssd_read_ahead_bytes);
  EXPECT_EQ(e.Value("prefixkv_owner_hot_quota_bytes", {{"owner", "llama-3"}}), 4096);
  EXPECT_EQ(e.Value("prefixkv_owner_hot_quota_bytes", {{"owner", "values"}}),
            std::nullopt);
  // The histogram: cumulative buckets, exact decimal seconds.
  EXPECT_EQ(e.Value("prefixkv_restore_duration_seconds_bucket",
                    {{"owner", "llama-3"}, {"le", "0.00005"}}),
            0);
  EXPECT_EQ(e.Value("prefixkv_restore_duration_seconds_bucket",
                    {{"owner", "llama-3"}, {"le", "0.0001"}}),
            2);
  EXPECT_EQ(e.Value("prefixkv_restore_duration_seconds_bucket",
                    {{"owner", "llama-3"}, {"le", "+Inf"}}),
            3);
  EXPECT_EQ(e.Value("prefixkv_restore_duration_seconds_sum", {{"owner", "llama-3"}}),
            1.234567);
  EXPECT_EQ(e.Value("prefixkv_restore_duration_seconds_count", {{"owner", "values"}}),
            std::nullopt);  // not a model
  const ServerStats server = SomeServerStats();
  EXPECT_EQ(e.Value("prefixkv_server_connected_clients"), server.connected_clients);
  EXPECT_EQ(e.Value("prefixkv_server_client_buffer_bytes"), server.client_buffer_bytes);
  EXPECT_EQ(e.Value("prefixkv_server_connections_received_total"),
            server.total_connections_received);
  EXPECT_EQ(e.Value("prefixkv_server_rejected_connections_total"),
            server.rejected_connections);
  EXPECT_EQ(e.Value("prefixkv_server_commands_processed_total"),
            server.total_commands_processed);
  EXPECT_EQ(e.Value("prefixkv_server_protocol_errors_total"), server.protocol_errors);
  EXPECT_EQ(e.Value("prefixkv_server_idle_disconnections_total"),
            server.idle_disconnections);
  EXPECT_EQ(e.Value("prefixkv_server_auth_failures_total"), server.auth_failures);
  EXPECT_EQ(e.Value("prefixkv_server_auth_throttled_total"), server.auth_throttled);
  EXPECT_EQ(e.Value("prefixkv_server_out_of_memory_refusals_total"),
            server.out_of_memory);
}

// INFO, PKV.STATS, Python and the audits name TierCounters fields by the
// table's `name`, the metrics by its `metric`: both schemes as documented
// (docs/protocol.md, docs/metrics.md), every field once, with its own value.
TEST(TierCounterFields, BothNamingSchemesAreTheDocumentedOnes) {
  const std::vector<std::string> info_names = {
      "entries", "bytes",       "pinned_bytes", "hits",
      "misses",  "inserts",     "removes",      "evictions",
      "spills",  "corruptions", "io_errors",    "external_bytes"};
  uint64_t next = 1;
  const TierCounters c = Distinct(&next);
  std::vector<std::pair<std::string, uint64_t>> shown;
  ForEachCounter(c,
                 [&](std::string_view name, uint64_t v) { shown.emplace_back(name, v); });
  ASSERT_EQ(shown.size(), info_names.size());
  for (size_t i = 0; i < shown.size(); ++i) {
    EXPECT_EQ(shown[i].first, info_names[i]);
    EXPECT_EQ(shown[i].second, c.*kTierCounterFields[i].field) << info_names[i];
  }
  for (const auto& [suffix, member] : kFields) {
    const auto field =
        member;  // a lambda may not capture a structured binding (clang 14)
    const auto row =
        std::find_if(std::begin(kTierCounterFields), std::end(kTierCounterFields),
                     [&](const TierCounterField& f) { return f.field == field; });
    ASSERT_NE(row, std::end(kTierCounterFields)) << suffix;
    EXPECT_EQ(row->metric, suffix);
    EXPECT_EQ(row->counter, suffix.ends_with("_total")) << suffix;
  }
}

// Every process_* family has a sample.
ProcessStats SomeProcessStats() {
  return {.cpu_seconds = 12.5,
          .open_fds = 42,
          .max_fds = 1024,
          .virtual_memory_bytes = 1 << 30,
          .resident_memory_bytes = 1 << 25,
          .start_time_seconds = 1733350000.25};
}

TEST(MetricsText, AFullSnapshotWritesEveryDeclaredFamilyInOrderWithItsLabels) {
  const ProcessStats process = SomeProcessStats();
  ASSERT_OK_AND_ASSIGN(
      PromExposition e,
      ParseExposition(RenderMetrics(FullSnapshot(), FullServerStats(), &process)));
  const std::vector<MetricFamilyInfo>& declared = MetricFamilies();
  ASSERT_EQ(e.families.size(), declared.size());
  for (size_t i = 0; i < declared.size(); ++i) {
    const testing::PromFamily& f = e.families[i];
    EXPECT_EQ(f.name, declared[i].name);
    EXPECT_EQ(f.type, MetricTypeName(declared[i].type)) << f.name;
    EXPECT_EQ(f.help, declared[i].help) << f.name;
    for (const testing::PromSample& sample : f.samples) {
      std::vector<std::string> names;
      for (const auto& [k, v] : sample.labels) names.push_back(k);
      std::vector<std::string> want = declared[i].labels;
      if (!sample.name.ends_with("_bucket")) std::erase(want, "le");
      EXPECT_EQ(names, want) << sample.name;
    }
  }
}

// Each command's three counters and its latency histogram (cumulative
// buckets, exact seconds), a command never called included.
TEST(MetricsText, RendersEveryCommandsCountersAndLatency) {
  const std::string text = RenderMetrics(EngineStats{}, FullServerStats());
  const size_t start = text.find("# HELP prefixkv_command_calls_total");
  ASSERT_NE(start, std::string::npos) << text;
  std::string expected =
      R"(# HELP prefixkv_command_calls_total RESP commands run, per command
# TYPE prefixkv_command_calls_total counter
prefixkv_command_calls_total{command="get"} 5
prefixkv_command_calls_total{command="pkv.get"} 0
# HELP prefixkv_command_failed_calls_total RESP commands that ran and answered an error, per command
# TYPE prefixkv_command_failed_calls_total counter
prefixkv_command_failed_calls_total{command="get"} 1
prefixkv_command_failed_calls_total{command="pkv.get"} 0
# HELP prefixkv_command_rejected_calls_total RESP commands refused before running (arity, AUTH, admin permission), per command
# TYPE prefixkv_command_rejected_calls_total counter
prefixkv_command_rejected_calls_total{command="get"} 2
prefixkv_command_rejected_calls_total{command="pkv.get"} 0
# HELP prefixkv_command_duration_seconds Time inside the server of RESP commands that ran, per command
# TYPE prefixkv_command_duration_seconds histogram
)";
  const char* les[] = {"0.00001", "0.000025", "0.00005", "0.0001", "0.00025",
                       "0.0005",  "0.001",    "0.0025",  "0.005",  "0.01",
                       "0.025",   "0.05",     "0.1",     "1",      "+Inf"};
  for (const char* command : {"get", "pkv.get"}) {
    const bool get = std::string_view(command) == "get";
    for (size_t i = 0; i < std::size(les); ++i) {
      const int cumulative = !get ? 0 : i < 7 ? 3 : 5;
      expected += std::string("prefixkv_command_duration_seconds_bucket{command=\"") +
                  command + "\",le=\"" + les[i] + "\"} " + std::to_string(cumulative) +
                  "\n";
    }
    expected += std::string("prefixkv_command_duration_seconds_sum{command=\"") +
                command + "\"} " + (get ? "0.004321" : "0") + "\n";
    expected += std::string("prefixkv_command_duration_seconds_count{command=\"") +
                command + "\"} " + (get ? "5" : "0") + "\n";
  }
  EXPECT_EQ(text.substr(start), expected);
  EXPECT_OK(ParseExposition(text).status());
}

TEST(MetricsText, EveryRemoteCounterIsTheSampleNamedForIt) {
  const EngineStats s = FullSnapshot();
  ASSERT_OK_AND_ASSIGN(PromExposition e,
                       ParseExposition(RenderMetrics(s, SomeServerStats())));
  const RemoteCounters& r = s.remote;
  EXPECT_EQ(e.Value("prefixkv_remote_available"), 1);
  EXPECT_EQ(e.Value("prefixkv_remote_hits_total"), r.hits);
  EXPECT_EQ(e.Value("prefixkv_remote_misses_total"), r.misses);
  EXPECT_EQ(e.Value("prefixkv_remote_checksum_failures_total"), r.corruptions);
  EXPECT_EQ(e.Value("prefixkv_remote_errors_total"), r.errors);
  EXPECT_EQ(e.Value("prefixkv_remote_read_bytes_total"), r.bytes_read);
  EXPECT_EQ(e.Value("prefixkv_remote_written_bytes_total"), r.bytes_written);
  EXPECT_EQ(e.Value("prefixkv_remote_writes_total"), r.writes);
  EXPECT_EQ(e.Value("prefixkv_remote_dropped_total"), r.dropped);
  EXPECT_EQ(e.Value("prefixkv_remote_write_failures_total"), r.write_failures);
  EXPECT_EQ(e.Value("prefixkv_remote_over_quota_total"), r.over_quota);
  EXPECT_EQ(e.Value("prefixkv_remote_rewrites_skipped_total"), r.rewrites_skipped);
  EXPECT_EQ(e.Value("prefixkv_remote_queue_blocks"), r.queued_blocks);
  EXPECT_EQ(e.Value("prefixkv_remote_queue_bytes"), r.queued_bytes);
  // Without a remote tier, no remote family has a sample.
  EngineStats local = s;
  local.has_remote = false;
  EXPECT_EQ(RenderMetrics(local, SomeServerStats()).find("prefixkv_remote_"),
            std::string::npos);
}

TEST(MetricsText, OwnerNamesAreEscapedAndParseBack) {
  EngineStats s;
  s.hot_capacity_bytes = 1;
  EngineOwnerStats o;
  o.name = "a\"b\\c\nd";
  s.owners.push_back(o);
  const std::string text = RenderMetrics(s, {});
  EXPECT_NE(text.find(R"(owner="a\"b\\c\nd")"), std::string::npos) << text;
  ASSERT_OK_AND_ASSIGN(PromExposition e, ParseExposition(text));
  EXPECT_EQ(e.Value("prefixkv_owner_blocks", {{"tier", "hot"}, {"owner", o.name}}), 0);
}

// A model name is any bytes PKV.REGISTER was sent, but Prometheus refuses a
// whole scrape with a label value that is not UTF-8 ("invalid label value";
// promtool check metrics too): every metric was lost while such a model was
// registered. Bytes outside UTF-8 are written \xHH, so two such names stay
// two series; valid UTF-8 (é) is written as it is.
TEST(MetricsText, OwnerNamesThatAreNotUtf8StillParseAsTwoSeries) {
  EngineStats s;
  s.hot_capacity_bytes = 1;
  for (const char* name : {"a\xff", "a\xfe\xc3", "caf\xc3\xa9"}) {
    EngineOwnerStats o;
    o.name = name;
    s.owners.push_back(o);
  }
  const std::string text = RenderMetrics(s, {});
  ASSERT_OK_AND_ASSIGN(PromExposition e, ParseExposition(text));
  for (const char* label : {R"(a\xff)", R"(a\xfe\xc3)", "caf\xc3\xa9"}) {
    SCOPED_TRACE(label);
    EXPECT_EQ(e.Value("prefixkv_owner_blocks", {{"tier", "hot"}, {"owner", label}}), 0);
  }
}

TEST(MetricsText, NoTierMeansNoSamplesOfIt) {
  const std::string text = RenderMetrics(EngineStats{}, {});  // closed engine
  EXPECT_EQ(text.find("tier="), std::string::npos) << text;
  EXPECT_EQ(text.find("prefixkv_hot_dirty_blocks"), std::string::npos);
  ASSERT_OK_AND_ASSIGN(PromExposition e, ParseExposition(text));
  EXPECT_EQ(e.families.size(), 11u);                    // the build's and the server's
  EXPECT_EQ(text.find("process_"), std::string::npos);  // no ProcessStats given
}

// Each model's token counters: queries and hits per model, restored tokens
// per model and tier; owners that are not models have none.
TEST(MetricsText, TokenCountersAreTheSamplesNamedForThem) {
  const EngineStats s = FullSnapshot();
  ASSERT_OK_AND_ASSIGN(PromExposition e,
                       ParseExposition(RenderMetrics(s, SomeServerStats())));
  const PrefixTokenCounters& t = *s.owners[0].prefix_tokens;
  const std::string model = s.owners[0].name;
  EXPECT_EQ(e.Value("prefixkv_prefix_cache_queries_total", {{"owner", model}}),
            t.query_tokens);
  EXPECT_EQ(e.Value("prefixkv_prefix_cache_hits_total", {{"owner", model}}),
            t.hit_tokens);
  EXPECT_EQ(
      e.Value("prefixkv_restored_tokens_total", {{"tier", "hot"}, {"owner", model}}),
      t.restored_tokens_hot);
  EXPECT_EQ(
      e.Value("prefixkv_restored_tokens_total", {{"tier", "ssd"}, {"owner", model}}),
      t.restored_tokens_ssd);
  EXPECT_EQ(
      e.Value("prefixkv_restored_tokens_total", {{"tier", "remote"}, {"owner", model}}),
      t.restored_tokens_remote);
  EXPECT_EQ(e.Value("prefixkv_prefix_cache_queries_total", {{"owner", "values"}}),
            std::nullopt);
  ASSERT_NE(e.Find("prefixkv_restored_tokens_total"), nullptr);
  EXPECT_EQ(e.Find("prefixkv_restored_tokens_total")->samples.size(), 3u);
}

// The process collector's families under the client libraries' names,
// types and help texts, values exact (fractions kept).
TEST(MetricsText, ProcessFamiliesAreTheClientLibrariesOnes) {
  const ProcessStats p = SomeProcessStats();
  ASSERT_OK_AND_ASSIGN(PromExposition e,
                       ParseExposition(RenderMetrics(EngineStats{}, {}, &p)));
  EXPECT_EQ(e.Value("process_cpu_seconds_total"), 12.5);
  ASSERT_EQ(e.families.size(), 11u + 6);  // the build's, the server's, the process's
  EXPECT_EQ(e.Find("process_cpu_seconds_total")->type, "counter");
  EXPECT_EQ(e.Find("process_cpu_seconds_total")->help,
            "Total user and system CPU time spent in seconds.");
  EXPECT_EQ(e.Value("process_open_fds"), 42);
  EXPECT_EQ(e.Value("process_max_fds"), 1024);
  EXPECT_EQ(e.Value("process_virtual_memory_bytes"), 1 << 30);
  EXPECT_EQ(e.Value("process_resident_memory_bytes"), 1 << 25);
  EXPECT_EQ(e.Value("process_start_time_seconds"), 1733350000.25);
  for (const char* gauge :
       {"process_open_fds", "process_max_fds", "process_virtual_memory_bytes",
        "process_resident_memory_bytes", "process_start_time_seconds"}) {
    ASSERT_NE(e.Find(gauge), nullptr) << gauge;
    EXPECT_EQ(e.Find(gauge)->type, "gauge") << gauge;
  }
}

// /proc/<pid>/stat's fields count from after the last ')': a command name
// with spaces and parentheses in it shifts nothing.
TEST(ProcessStats, ParsesStatWhateverTheCommandName) {
  const std::string stat =
      "4242 (pkv) (x) y) S 1 4242 4242 0 -1 4194560 500 0 0 0 250 125 0 0 20 0 7 0 "
      "360000 2147483648 5000 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0\n";
  const std::string proc_stat = "cpu  1 2 3 4\nintr 5\nbtime 1733000000\nprocesses 9\n";
  ASSERT_OK_AND_ASSIGN(ProcessStats p, ParseProcessStat(stat, proc_stat, 100, 4096));
  EXPECT_EQ(p.cpu_seconds, 3.75);  // (250 + 125) ticks
  EXPECT_EQ(p.virtual_memory_bytes, 2147483648u);
  EXPECT_EQ(p.resident_memory_bytes, 5000u * 4096);
  EXPECT_EQ(p.start_time_seconds, 1733003600.0);  // btime + 360000 ticks
}

TEST(ProcessStats, MalformedTextsAreCorruptionNotACrash) {
  const std::string btime = "btime 1733000000\n";
  EXPECT_TRUE(ParseProcessStat("", btime, 100, 4096).status().IsCorruption());
  EXPECT_TRUE(
      ParseProcessStat("1 (x) S 1 2 3", btime, 100, 4096).status().IsCorruption());
  const std::string good = "1 (x) S 1 1 1 0 -1 0 0 0 0 0 1 1 0 0 20 0 1 0 1 4096 1 0\n";
  EXPECT_OK(ParseProcessStat(good, btime, 100, 4096).status());
  std::string bad = good;
  bad.replace(bad.find(" 4096 "), 6, " 4x96 ");
  EXPECT_TRUE(ParseProcessStat(bad, btime, 100, 4096).status().IsCorruption());
  EXPECT_TRUE(ParseProcessStat(good, "cpu 1 2\n", 100, 4096).status().IsCorruption());
  EXPECT_FALSE(ParseProcessStat(good, btime, 0, 4096).ok());
}

// This very process, read from /proc: one more descriptor open is one more
// process_open_fds; it started before now and after the machine booted.
TEST(ProcessStats, ReadsThisProcess) {
  ASSERT_OK_AND_ASSIGN(ProcessStats before, ReadProcessStats());
  const int fd = ::open("/dev/null", O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_OK_AND_ASSIGN(ProcessStats after, ReadProcessStats());
  ::close(fd);
  EXPECT_EQ(after.open_fds, before.open_fds + 1);
  rlimit limit{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  EXPECT_EQ(after.max_fds, static_cast<uint64_t>(limit.rlim_cur));
  EXPECT_GT(after.resident_memory_bytes, 0u);
  EXPECT_GE(after.virtual_memory_bytes, after.resident_memory_bytes);
  EXPECT_GE(after.cpu_seconds, before.cpu_seconds);
  const double now = static_cast<double>(::time(nullptr));
  EXPECT_LE(after.start_time_seconds, now + 1);
  EXPECT_GT(after.start_time_seconds, now - 24 * 3600.0);  // a test runs for seconds
}

// The capacity advisor's curve: one sample per point, by tier and size.
TEST(MetricsText, TheAdvisorsPointsAreSamplesByTierAndCapacity) {
  const std::string text = RenderMetrics(FullSnapshot(), FullServerStats());
  EXPECT_NE(text.find("prefixkv_advisor_hit_ratio{tier=\"hot\",capacity_bytes=\"512\"} "
                      "0.125\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("prefixkv_advisor_hit_ratio{tier=\"ssd\",capacity_bytes=\"8192\"} "
                      "0.75\n"),
            std::string::npos);
  EXPECT_NE(text.find("prefixkv_advisor_sampling_rate 0.25\n"), std::string::npos);
  // No advisor (or no points yet): no family.
  EXPECT_EQ(RenderMetrics(EngineStats{}, FullServerStats()).find("prefixkv_advisor"),
            std::string::npos);
}

// docs/metrics.md's table: one row per family, in order, with its type and
// labels ("| `name` | type | `a`, `b` | meaning |", "—" for no labels).
TEST(MetricsText, TheDocListsEveryFamilyWithItsTypeAndLabels) {
  std::ifstream in(std::string(PREFIXKV_SOURCE_DIR) + "/docs/metrics.md");
  ASSERT_TRUE(in.good());
  const std::regex row(
      R"(^\| `((?:prefixkv|process)_[a-z_]+)` \| ([a-z]+) \| ([^|]+) \| [^|]+ \|$)");
  std::vector<std::string> rows;
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (!std::regex_match(line, m, row)) continue;
    std::string labels = m[3].str();
    labels.erase(std::remove(labels.begin(), labels.end(), '`'), labels.end());
    rows.push_back(m[1].str() + " " + m[2].str() + " " + labels);
  }
  std::vector<std::string> want;
  for (const MetricFamilyInfo& f : MetricFamilies()) {
    std::string labels;
    for (const std::string& l : f.labels) labels += (labels.empty() ? "" : ", ") + l;
    want.push_back(f.name + " " + std::string(MetricTypeName(f.type)) + " " +
                   (labels.empty() ? "—" : labels));
  }
  EXPECT_EQ(rows, want);
}

}  // namespace
}  // namespace prefixkv::server
