// Trace replay on the Mooncake synthetic trace (tests/data): the published
// infinite-capacity hit ratios, equality with an independent LRU simulation,
// the SSD tier recovering every hot-only miss, and the line parser's errors.
#include "tools/replay/trace_replay.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <list>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "tests/support/fake_remote_store.h"
#include "tests/support/test_util.h"
#include "tests/tools/trace_data.h"
#include "tools/replay/advise_replay.h"
#include "tools/replay/routed_replay.h"

namespace prefixkv::replay {
namespace {

constexpr uint32_t kTraceBlockTokens = 512;

const std::vector<TraceRequest>& Trace() { return testing_data::MooncakeTrace(); }

ReplayReport RunReplay(const ReplayConfig& config) {
  StatusOr<std::unique_ptr<ReplayTiers>> tiers = ReplayTiers::Open(config);
  EXPECT_OK(tiers);
  if (!tiers.ok()) return {};
  TraceReplayer replayer(tiers->get(), config.block_tokens);
  EXPECT_OK(replayer.ReplayAll(Trace()));
  return replayer.Report();
}

// The independent model: ids identify prefixes (equal ids, equal prefixes),
// one LRU list of at most `capacity_blocks` ids. Touch the hit prefix in
// order, then touch or insert every later block in order, evicting the least
// recently touched.
struct SimpleLru {
  explicit SimpleLru(size_t capacity_blocks) : capacity(capacity_blocks) {}
  void Touch(uint64_t id) { order.splice(order.begin(), order, where.at(id)); }
  void Insert(uint64_t id) {
    if (order.size() == capacity) {
      where.erase(order.back());
      order.pop_back();
    }
    order.push_front(id);
    where[id] = order.begin();
  }
  size_t capacity;
  std::list<uint64_t> order;  // front: most recent
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> where;
};

ReplayReport RunNodes(const ReplayConfig& config, int nodes) {
  std::vector<std::unique_ptr<ReplayTiers>> opened;
  std::vector<ReplayTiers*> tiers;
  for (int i = 0; i < nodes; ++i) {
    StatusOr<std::unique_ptr<ReplayTiers>> t = ReplayTiers::Open(config);
    EXPECT_OK(t);
    if (!t.ok()) return {};
    tiers.push_back(t->get());
    opened.push_back(std::move(t).value());
  }
  TraceReplayer replayer(tiers, config.block_tokens);
  EXPECT_OK(replayer.ReplayAll(Trace()));
  return replayer.Report();
}

TEST(TraceReplay, TwoNodesSharingARemoteTierHitExactlyAsOneNode) {
  // Requests alternate between two nodes; without sharing, a conversation's
  // next turn usually lands where its prefix is not.
  const ReplayReport one = RunReplay({});
  const ReplayReport apart = RunNodes({}, 2);
  EXPECT_LT(apart.token_hit_ratio(), one.token_hit_ratio() - 0.05);
  auto state = std::make_shared<testing::FakeRemoteState>();
  ReplayConfig shared;
  shared.remote = "fake";
  shared.remote_write = RemoteWriteMode::kAlways;
  shared.remote_store_factory = [state] {
    return std::make_unique<testing::FakeRemoteStore>(state);
  };
  const ReplayReport both = RunNodes(shared, 2);
  // Unlimited RAM and every block shared at once: the same hits as one node.
  EXPECT_EQ(both.hit_blocks, one.hit_blocks);
  EXPECT_EQ(both.hit_tokens, one.hit_tokens);
  ASSERT_EQ(both.tiers.size(), 2u);
  EXPECT_EQ(both.tiers[1].name, "remote");
  EXPECT_GT(both.tiers[1].block_hits, 0u);
  EXPECT_EQ(both.tiers[0].block_hits + both.tiers[1].block_hits, both.hit_blocks);
  EXPECT_EQ(state->size(), one.blocks - one.hit_blocks) << "every distinct block, once";
}

TEST(TraceReplay, UnlimitedCapacityGivesThePublishedHitRatios) {
  ReplayReport r = RunReplay({});
  EXPECT_EQ(r.requests, 3993u);
  EXPECT_EQ(r.blocks, 121877u);
  EXPECT_NEAR(r.token_hit_ratio(), 0.651, 0.0005);
  EXPECT_NEAR(r.block_hit_ratio(), 0.640, 0.0005);
  ASSERT_EQ(r.tiers.size(), 1u);  // no SSD directory: hot only
  EXPECT_EQ(r.tiers[0].block_hits, r.hit_blocks);
  EXPECT_EQ(r.tiers[0].evictions, 0u);
  EXPECT_EQ(r.tiers[0].entries, 121877u - r.hit_blocks);
}

TEST(TraceReplay, HotOnlyLruEqualsAnIndependentLruSimulation) {
  ReplayConfig config;
  config.hot.tokens = 3'000'000;
  config.ssd.tokens = 0;
  config.policy = EvictionPolicyKind::kLru;
  ReplayReport r = RunReplay(config);

  SimpleLru lru(3'000'000 / kTraceBlockTokens);
  uint64_t hit_blocks = 0, hit_tokens = 0;
  for (const TraceRequest& req : Trace()) {
    size_t hit = 0;
    while (hit < req.hash_ids.size() && lru.where.count(req.hash_ids[hit])) {
      lru.Touch(req.hash_ids[hit++]);
    }
    for (size_t i = hit; i < req.hash_ids.size(); ++i) {
      lru.where.count(req.hash_ids[i]) ? lru.Touch(req.hash_ids[i])
                                       : lru.Insert(req.hash_ids[i]);
    }
    hit_blocks += hit;
    hit_tokens += std::min<uint64_t>(hit * kTraceBlockTokens, req.input_length);
  }
  EXPECT_EQ(r.hit_blocks, hit_blocks);
  EXPECT_EQ(r.hit_tokens, hit_tokens);
  ASSERT_EQ(r.tiers.size(), 1u);
  EXPECT_GT(r.tiers[0].evictions, 0u)
      << "the capacity must bind for this test to mean anything";
  EXPECT_EQ(r.tiers[0].entries, lru.order.size());
  EXPECT_LT(r.token_hit_ratio(), 0.651);
}

TEST(TraceReplay, SsdTierTurnsHotOnlyMissesIntoHits) {
  testing::TempDir dir;
  ReplayConfig config;
  config.bytes_per_token = 1;  // small payloads keep the test fast
  config.hot.tokens = 3'000'000;
  config.ssd.tokens = 50'000'000;
  config.ssd_path = dir.str();
  ReplayReport tiered = RunReplay(config);

  ReplayConfig unlimited;
  unlimited.bytes_per_token = 1;
  ReplayReport best = RunReplay(unlimited);
  EXPECT_EQ(tiered.hit_tokens, best.hit_tokens);
  EXPECT_EQ(tiered.hit_blocks, best.hit_blocks);
  ASSERT_EQ(tiered.tiers.size(), 2u);
  EXPECT_GT(tiered.tiers[1].block_hits, 0u);
  EXPECT_GT(tiered.tiers[0].evictions, 0u);
}

// The SSD write model of a replay with an LRU hot tier of `hot_blocks` and an
// unlimited SSD tier, each block one of `payload` bytes: a Put drops the SSD
// copy (write-back: RAM holds the newer bytes) and makes the hot copy dirty; a
// dirty victim is written unless a budget of `budget_per_day` bytes (a bucket
// of 60 s, on the trace's timestamps) is spent and the block has no child in
// RAM or on SSD; an SSD hit is promoted clean.
struct SsdWriteModel {
  SsdWriteModel(size_t hot_blocks, uint64_t payload, uint64_t budget_per_day)
      : lru(hot_blocks),
        payload(payload),
        budget(budget_per_day),
        units(static_cast<SsdAdmissionUnits>(budget_per_day) * 60 * 1'000'000'000) {}
  static constexpr uint64_t kRoot = ~uint64_t{0};
  void Hot(uint64_t id, bool dirty) {
    if (lru.where.count(id)) {
      lru.Touch(id);
      dirty_[id] = dirty_[id] || dirty;
      return;
    }
    std::optional<uint64_t> victim;
    if (lru.order.size() == lru.capacity) victim = lru.order.back();
    lru.Insert(id);
    ++hot_children[parent.at(id)];
    dirty_[id] = dirty;
    if (!victim) return;
    --hot_children[parent.at(*victim)];
    if (dirty_[*victim]) Evict(*victim);
    dirty_.erase(*victim);
  }
  void Evict(uint64_t id) {
    const SsdAdmissionUnits need =
        static_cast<SsdAdmissionUnits>(payload) * 86400 * 1'000'000'000;
    const bool allowed = budget == 0 || units >= need;
    if (!allowed && hot_children[id] == 0 && ssd_children[id] == 0) {
      ++skipped;
      return;
    }
    if (budget != 0) units -= need;
    ++written;
    forced += allowed ? 0 : 1;
    ssd.insert(id);
    ++ssd_children[parent.at(id)];
  }
  void Request(const TraceRequest& req) {
    if (budget != 0 && req.timestamp_ms * 1'000'000 > now) {
      const SsdAdmissionUnits cap =
          static_cast<SsdAdmissionUnits>(budget) * 60 * 1'000'000'000;
      units = std::min(cap, units + static_cast<SsdAdmissionUnits>(
                                        req.timestamp_ms * 1'000'000 - now) *
                                        budget);
      now = req.timestamp_ms * 1'000'000;
    }
    uint64_t p = kRoot;
    for (uint64_t id : req.hash_ids) parent.emplace(id, p), p = id;
    size_t hit = 0;
    for (; hit < req.hash_ids.size(); ++hit) {
      const uint64_t id = req.hash_ids[hit];
      if (lru.where.count(id)) {
        lru.Touch(id);
      } else if (ssd.count(id)) {
        ++ssd_hits;
        Hot(id, /*dirty=*/false);
      } else {
        break;
      }
    }
    for (size_t i = hit; i < req.hash_ids.size(); ++i) {
      const uint64_t id = req.hash_ids[i];
      if (ssd.erase(id)) --ssd_children[parent.at(id)];
      Hot(id, /*dirty=*/true);
    }
  }
  SimpleLru lru;
  const uint64_t payload, budget;
  SsdAdmissionUnits units;
  uint64_t now = 0;
  std::unordered_map<uint64_t, uint64_t> parent;
  std::unordered_map<uint64_t, bool> dirty_;
  std::unordered_map<uint64_t, int64_t> hot_children, ssd_children;
  std::unordered_set<uint64_t> ssd;
  uint64_t written = 0, forced = 0, skipped = 0, ssd_hits = 0;
};

// Replay's SSD counters (written, forced, skipped, bytes per SSD hit) equal
// the model's on the Mooncake trace, writing every victim and under a budget
// small enough that both skips and forced writes happen.
TEST(TraceReplay, SsdWritesAndSkipsEqualASimpleModel) {
  for (uint64_t budget_per_day : {uint64_t{0}, uint64_t{10'000'000}}) {
    SCOPED_TRACE(budget_per_day);
    testing::TempDir dir;
    ReplayConfig config;
    config.bytes_per_token = 1;  // 512-byte payloads keep the test fast
    config.hot.tokens = 1'000'000;
    config.ssd_path = dir.str();  // unsized: unlimited
    config.policy = EvictionPolicyKind::kLru;
    if (budget_per_day > 0) {
      config.ssd_admission = SsdAdmissionKind::kBudget;
      config.ssd_write_budget_bytes_per_day = budget_per_day;
    }
    // The first 2,000 requests (of 3,993) keep the test short.
    const std::vector<TraceRequest> head(Trace().begin(), Trace().begin() + 2000);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<ReplayTiers> tiers, ReplayTiers::Open(config));
    TraceReplayer replayer(tiers.get(), config.block_tokens);
    ASSERT_OK(replayer.ReplayAll(head));
    const ReplayReport r = replayer.Report();
    SsdWriteModel model(1'000'000 / kTraceBlockTokens, kTraceBlockTokens, budget_per_day);
    for (const TraceRequest& req : head) model.Request(req);
    EXPECT_EQ(r.ssd_admission.written_blocks, model.written);
    EXPECT_EQ(r.ssd_admission.written_bytes, model.written * kTraceBlockTokens);
    EXPECT_EQ(r.ssd_admission.forced_blocks, model.forced);
    EXPECT_EQ(r.ssd_admission.skipped_blocks, model.skipped);
    EXPECT_EQ(r.ssd_hit_blocks, model.ssd_hits);
    EXPECT_DOUBLE_EQ(r.ssd_bytes_written_per_hit(),
                     double(model.written * kTraceBlockTokens) / double(model.ssd_hits));
    if (budget_per_day > 0) {
      EXPECT_GT(model.skipped, 100u);
      EXPECT_GT(model.forced, 100u);
    } else {
      EXPECT_EQ(model.skipped, 0u);
    }
  }
}

// Under a write budget the engine's clock is the trace's, in nanoseconds: a
// timestamp past 2^64 ns (a microsecond trace read as milliseconds) wrapped
// into another time and refilled the budget for the wrong window.
TEST(TraceReplay, ATimestampPastTheBudgetClocksReachIsRefused) {
  for (bool budget : {false, true}) {
    SCOPED_TRACE(budget);
    testing::TempDir dir;
    ReplayConfig config;
    config.bytes_per_token = 1;
    config.ssd_path = dir.str();
    if (budget) {
      config.ssd_admission = SsdAdmissionKind::kBudget;
      config.ssd_write_budget_bytes_per_day = 10'000'000;
    }
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<ReplayTiers> tiers, ReplayTiers::Open(config));
    TraceReplayer replayer(tiers.get(), config.block_tokens);
    TraceRequest request{
        .timestamp_ms = 18'446'744'073'709, .input_length = 512, .hash_ids = {1}};
    ASSERT_OK(replayer.Replay(request));           // the last millisecond the clock holds
    request.timestamp_ms = 1'733'550'000'000'000;  // microseconds since 1970
    const Status s = replayer.Replay(request);
    if (!budget) {
      EXPECT_OK(s);  // nothing reads the time
      continue;
    }
    EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
    EXPECT_NE(s.ToString().find("timestamp 1733550000000000 ms"), std::string::npos)
        << s.ToString();
  }
}

// The capacity advisor (docs/eviction.md, "The capacity advisor"): its
// estimate against a full replay at each size, within 0.02 token hit ratio.
// CI: the Mooncake trace, hot sizes 1/4x, 1x and 4x of 3M tokens. With
// PREFIXKV_LONG=1: every trace we hold (the docs trace generated), hot and
// SSD (3M hot + 50M SSD) at 1/4x..8x; SSD points below 1x are printed, not
// checked: the SSD tier then holds fewer blocks than its nominal size (its
// segments' reclaim headroom), which an LRU model of that size overstates.
// Routed replay (routed_replay.h): round-robin is the unrouted multi-node
// replay, the comparison is one node with N times the capacity.
TEST(RoutedReplay, RoundRobinIsTheUnroutedReplayAndOneNodeHasNTimesTheCapacity) {
  ReplayConfig node;
  node.hot.tokens = 3'000'000;
  node.ssd.tokens = 0;
  node.advisor_max_keys = 0;
  RoutedReplayConfig c;
  c.node = node;
  c.nodes = 4;
  c.router = RouterKind::kRoundRobin;
  ASSERT_OK_AND_ASSIGN(RoutedReplayReport r, RunRoutedReplay(Trace(), c));
  EXPECT_EQ(r.routed.hit_tokens, RunNodes(node, 4).hit_tokens);
  ReplayConfig big = node;
  big.hot.tokens = 12'000'000;
  EXPECT_EQ(r.one_node.hit_tokens, RunReplay(big).hit_tokens);
  // Round-robin: every node takes a quarter of the requests.
  EXPECT_LT(r.max_over_mean_requests(), 1.01);
  uint64_t requests = 0;
  for (const NodeLoad& l : r.loads) requests += l.requests;
  EXPECT_EQ(requests, Trace().size());
}

// Seven conversations of four blocks in turn, six rounds: round-robin over
// four nodes sends each to every node (7 and 4 are coprime) and no node holds
// the 28 blocks; one node with four times the capacity holds them all; the
// prefix router, knowing from the events where each conversation lives, sends
// it there again.
std::vector<TraceRequest> Conversations() {
  std::vector<TraceRequest> trace;
  for (uint64_t round = 0; round < 6; ++round) {
    for (uint64_t c = 0; c < 7; ++c) {
      TraceRequest r;
      r.input_length = 4 * 16;
      for (uint64_t b = 0; b < 4; ++b) r.hash_ids.push_back(c * 100 + b);
      trace.push_back(r);
    }
  }
  return trace;
}

// A capacity in tokens far above any cache (here "unlimited" by accident of
// size) wrapped: the hot tier's bytes (blocks x charge per block) past 2^64
// gave a tier of about one block (so did 2^62 + 64 tokens, each node of the
// routed replay below), and the routed replay's one node (N x the tokens) a
// capacity of 16 blocks at 4 nodes. Both replays reported those small
// caches' hit ratios. Saturated, they hold all.
TEST(TraceReplay, HugeCapacitiesSaturateInsteadOfWrappingToSmallOnes) {
  const std::vector<TraceRequest> trace = Conversations();
  ReplayConfig unlimited;
  unlimited.block_tokens = 16;
  unlimited.ssd.tokens = 0;
  unlimited.advisor_max_keys = 0;
  auto hit_tokens = [&](const ReplayConfig& c) -> uint64_t {
    StatusOr<std::unique_ptr<ReplayTiers>> tiers = ReplayTiers::Open(c);
    EXPECT_OK(tiers);
    if (!tiers.ok()) return 0;
    TraceReplayer replayer(tiers->get(), c.block_tokens);
    EXPECT_OK(replayer.ReplayAll(trace));
    return replayer.Report().hit_tokens;
  };
  // 7 conversations, every round after the first a whole hit.
  const uint64_t all = hit_tokens(unlimited);
  EXPECT_EQ(all, 7u * 5 * 64);
  ReplayConfig wraps = unlimited;
  const uint64_t charge = HotEntryCharge(16 * unlimited.bytes_per_token);
  wraps.hot.tokens = (UINT64_MAX / charge + 2) * 16;
  EXPECT_EQ(hit_tokens(wraps), all);
  RoutedReplayConfig c;
  c.node = unlimited;
  c.node.hot.tokens = (uint64_t{1} << 62) + 4 * 16;
  c.nodes = 4;
  c.router = RouterKind::kRoundRobin;
  ASSERT_OK_AND_ASSIGN(RoutedReplayReport r, RunRoutedReplay(trace, c));
  EXPECT_EQ(r.one_node.hit_tokens, all);
  // Each node as if unlimited (round-robin moves the conversations around).
  c.node.hot.tokens.reset();
  ASSERT_OK_AND_ASSIGN(RoutedReplayReport u, RunRoutedReplay(trace, c));
  EXPECT_EQ(r.routed.hit_tokens, u.routed.hit_tokens);
  EXPECT_GT(u.routed.hit_tokens, 0u);
}

TEST(TraceReplay, EnginesKeepNoEventLog) {
  testing::TempDir dir;
  ReplayConfig config;
  config.bytes_per_token = 1;
  config.hot.tokens = 1000;
  config.ssd.tokens = 10000;
  config.ssd_path = dir.str();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ReplayTiers> tiers, ReplayTiers::Open(config));
  EXPECT_FALSE(tiers->engine().EventLogStats().enabled);
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "events"));
}

// Four nodes of 8 blocks of 16 tokens in RAM (32 in all), one request each
// in flight, prefix routing.
RoutedReplayConfig FourSmallNodes() {
  RoutedReplayConfig c;
  c.node.block_tokens = 16;
  c.node.hot.tokens = 8 * 16;
  c.node.ssd.tokens = 0;
  c.node.advisor_max_keys = 0;
  c.nodes = 4;
  c.in_flight_per_node = 1;
  return c;
}

TEST(RoutedReplay, PrefixRoutingFollowsTheNodesEvents) {
  RoutedReplayConfig c = FourSmallNodes();
  const std::vector<TraceRequest> trace = Conversations();
  ASSERT_OK_AND_ASSIGN(RoutedReplayReport prefix, RunRoutedReplay(trace, c));
  c.router = RouterKind::kRoundRobin;
  ASSERT_OK_AND_ASSIGN(RoutedReplayReport rr, RunRoutedReplay(trace, c));
  EXPECT_GT(prefix.events, 0u);
  // All but the last request's (still on their way when the trace ends).
  EXPECT_GT(prefix.router.events, prefix.events * 9 / 10);
  EXPECT_GT(prefix.router.routed_by_prefix, 20u);
  // Five of six rounds hit in full, as on the one big node.
  EXPECT_DOUBLE_EQ(prefix.one_node.token_hit_ratio(), 5.0 / 6);
  EXPECT_DOUBLE_EQ(prefix.routed.token_hit_ratio(), 5.0 / 6);
  EXPECT_LT(rr.routed.token_hit_ratio(), 0.3);
  EXPECT_LE(prefix.max_over_mean_tokens(), 1.35);
  // Events that arrive after the whole trace: the router knows nothing.
  c.router = RouterKind::kPrefix;
  c.event_delay_requests = trace.size();
  ASSERT_OK_AND_ASSIGN(RoutedReplayReport late, RunRoutedReplay(trace, c));
  EXPECT_EQ(late.router.routed_by_prefix, 0u);
  EXPECT_LT(late.routed.token_hit_ratio(), 0.5);
}

// An event's due request (request + 1 + delay) wrapped past 2^64 for a delay
// near it (prefix replay --event-delay-requests 18446744073709551615, "the
// router never hears a node"): the events reached the router at once and the
// replay reported zero-delay figures (0.592 token hit ratio on Mooncake at 4
// x 3M instead of 0.258) as those of the delay asked for. The due request
// saturates: such events never arrive, as any delay past the trace.
TEST(RoutedReplay, ADelayNearTwoToTheSixtyFourNeverDeliversTheEvents) {
  RoutedReplayConfig c = FourSmallNodes();
  const std::vector<TraceRequest> trace = Conversations();
  for (uint64_t delay : {UINT64_MAX, UINT64_MAX - 3, UINT64_MAX - trace.size()}) {
    c.event_delay_requests = delay;
    ASSERT_OK_AND_ASSIGN(RoutedReplayReport r, RunRoutedReplay(trace, c));
    EXPECT_GT(r.events, 0u) << delay;
    EXPECT_EQ(r.router.events, 0u) << delay;
    EXPECT_EQ(r.router.routed_by_prefix, 0u) << delay;
  }
}

TEST(RoutedReplay, RefusesABadConfiguration) {
  RoutedReplayConfig c;
  c.nodes = 0;
  EXPECT_TRUE(RunRoutedReplay(Trace(), c).status().IsInvalidArgument());
  c.nodes = 2;
  c.in_flight_per_node = 0;
  EXPECT_TRUE(RunRoutedReplay(Trace(), c).status().IsInvalidArgument());
  c.in_flight_per_node = 1;
  c.node.remote = "redis://127.0.0.1:1";
  EXPECT_TRUE(RunRoutedReplay(Trace(), c).status().IsInvalidArgument());
  EXPECT_TRUE(ParseRouterKind("nearest").status().IsInvalidArgument());
  ASSERT_OK_AND_ASSIGN(RouterKind k, ParseRouterKind("round-robin"));
  EXPECT_EQ(k, RouterKind::kRoundRobin);
}

TEST(CapacityAdvisor, EstimatesAreWithinTwoHundredthsOfFullReplays) {
  const bool long_run = testing::Iterations(0, 1) == 1;
  std::vector<std::pair<std::string, std::vector<TraceRequest>>> traces;
  traces.emplace_back("mooncake", Trace());
  testing::TempDir dir;
  if (long_run) {
    traces.emplace_back("agent", *testing_data::LoadTrace("agent_synthetic_trace.jsonl"));
    traces.emplace_back("chat", *testing_data::LoadTrace("chat_synthetic_trace.jsonl"));
    const std::string docs = dir.str() + "/docs.jsonl";
    const std::string gen = "python3 " + std::string(PREFIXKV_SOURCE_DIR) +
                            "/tools/gen_chat_trace.py --shape docs --requests 6000 > " +
                            docs;
    ASSERT_EQ(std::system(gen.c_str()), 0) << gen;
    StatusOr<std::vector<TraceRequest>> t = ReadTrace(docs);
    ASSERT_OK(t);
    traces.emplace_back("docs", std::move(t).value());
  }
  for (const auto& [name, trace] : traces) {
    AdviseConfig config;
    config.hot_tokens = 3'000'000;
    config.ssd_tokens = long_run ? 50'000'000 : 0;
    config.bytes_per_token = 1;  // small payloads keep the SSD replays fast
    if (!long_run) config.advisor.factors = {0.25, 1, 4};
    const AdvisorReport report = AdviseTrace(trace, config);
    StatusOr<std::vector<double>> replayed =
        ReplayPoints(trace, config, report, dir.str() + "/" + name);
    ASSERT_OK(replayed);
    ASSERT_EQ(replayed->size(), report.points.size());
    for (size_t i = 0; i < replayed->size(); ++i) {
      const AdvisorPoint& p = report.points[i];
      std::printf("%-8s %-3s %5.2fx estimated %.4f replayed %.4f\n", name.c_str(),
                  p.tier.c_str(), p.factor, p.hit_ratio, (*replayed)[i]);
      if (p.tier == "ssd" && p.factor < 1) continue;
      EXPECT_NEAR(p.hit_ratio, (*replayed)[i], 0.02)
          << name << " " << p.tier << " at " << p.factor << "x";
    }
  }
}

// Live: the engine's advisor sees the replay's Gets and Puts through the
// model's TierStack and estimates the hot tier at 1x and 4x from them.
TEST(CapacityAdvisor, TheEngineEstimatesFromTheTrafficItsStackSees) {
  ReplayConfig config;
  config.hot.tokens = 3'000'000;
  StatusOr<std::unique_ptr<ReplayTiers>> tiers = ReplayTiers::Open(config);
  ASSERT_OK(tiers);
  TraceReplayer replayer(tiers->get(), config.block_tokens);
  ASSERT_OK(replayer.ReplayAll(Trace()));
  const double at_1x = replayer.Report().token_hit_ratio();
  config.hot.tokens = 12'000'000;
  const double at_4x = RunReplay(config).token_hit_ratio();

  const AdvisorReport r = (*tiers)->engine().AdvisorStats();
  ASSERT_EQ(r.points.size(), 6u);  // hot only
  EXPECT_GT(r.references, 1000u);
  EXPECT_EQ(r.points[2].factor, 1);
  EXPECT_EQ(r.points[2].capacity_blocks, 3'000'000u / 512);
  EXPECT_NEAR(r.points[2].hit_ratio, at_1x, 0.02);
  EXPECT_EQ(r.points[4].factor, 4);
  EXPECT_NEAR(r.points[4].hit_ratio, at_4x, 0.02);
}

TEST(TraceReader, ParsesALineWithAnyKeyOrderAndExtraKeys) {
  StatusOr<TraceRequest> r = ParseTraceLine(
      R"( {"hash_ids": [3, 4,5], "note": "x", "input_length": 1500, "timestamp": 12.5,)"
      R"( "flag": true, "output_length": 7} )");
  ASSERT_OK(r);
  EXPECT_EQ(r->hash_ids, (std::vector<uint64_t>{3, 4, 5}));
  EXPECT_EQ(r->input_length, 1500u);
  EXPECT_EQ(r->output_length, 7u);
  EXPECT_EQ(r->timestamp_ms, 12u);
}

TEST(TraceReader, RejectsMalformedLinesWithoutCrashing) {
  for (const char* line :
       {"", "{", "[]", R"({"input_length": 5})", R"({"hash_ids": [1]})",
        R"({"input_length": -5, "hash_ids": []})",
        R"({"input_length": 5, "hash_ids": [1.5]})",
        R"({"input_length": 5, "hash_ids": [1,]})",
        R"({"input_length": 99999999999999999999999, "hash_ids": []})",
        R"({"input_length": 5, "hash_ids": []} x)", R"({"input_length" 5})"}) {
    EXPECT_TRUE(ParseTraceLine(line).status().IsInvalidArgument()) << line;
  }
}

// A request key given twice: "hash_ids" twice was read as both arrays end to
// end ([1, 2, 3] here), which no JSON reader does, and replayed as such.
TEST(TraceReader, ARequestKeyGivenTwiceIsAnError) {
  for (const char* line :
       {R"({"input_length": 1024, "hash_ids": [1, 2], "hash_ids": [3]})",
        R"({"input_length": 1, "hash_ids": [1], "input_length": 2})",
        R"({"timestamp": 1, "hash_ids": [1], "input_length": 2,)"
        R"( "timestamp": 1})"}) {
    const Status s = ParseTraceLine(line).status();
    EXPECT_TRUE(s.IsInvalidArgument()) << line;
    EXPECT_NE(s.message().find("duplicate key"), std::string::npos) << s.ToString();
  }
  // Keys the reader skips may repeat.
  EXPECT_OK(ParseTraceLine(R"({"input_length": 1, "hash_ids": [1], "x": 1, "x": 2})"));
}

TEST(TraceReader, NamesTheLineOfTheFirstBadRequest) {
  testing::TempDir dir;
  const std::string path = dir.str() + "/t.jsonl";
  std::ofstream(path) << R"({"input_length": 5, "hash_ids": [1]})"
                      << "\n\n"
                      << R"({"input_length": 5, "hash_ids": [1, oops]})"
                      << "\n";
  StatusOr<std::vector<TraceRequest>> t = ReadTrace(path);
  ASSERT_TRUE(t.status().IsInvalidArgument());
  EXPECT_NE(t.status().message().find("t.jsonl:3: column"), std::string::npos)
      << t.status().ToString();
  EXPECT_TRUE(ReadTrace(dir.str() + "/missing.jsonl").status().IsNotFound());
}

// A trace whose input_length values add up past 2^64 - 1 (here a -1 written
// unsigned, then 2) wrapped the replay's prompt-token sum: prefixkv replay
// reported input_tokens 1, hit_tokens 2, a token hit ratio of 2, exit 0. The
// reader now names the line; a sum of exactly 2^64 - 1 is still read.
TEST(TraceReader, PromptTokensAddingUpPast64BitsAreAnErrorNotARatioAboveOne) {
  testing::TempDir dir;
  const std::string path = dir.str() + "/t.jsonl";
  std::ofstream(path) << R"({"input_length": 18446744073709551615, "hash_ids": [1]})"
                      << "\n"
                      << R"({"input_length": 2, "hash_ids": [1]})"
                      << "\n";
  StatusOr<std::vector<TraceRequest>> t = ReadTrace(path);
  ASSERT_TRUE(t.status().IsInvalidArgument()) << t.status().ToString();
  EXPECT_NE(t.status().message().find("t.jsonl:2: input_length 2"), std::string::npos)
      << t.status().ToString();
  std::ofstream(path) << R"({"input_length": 18446744073709551613, "hash_ids": [1]})"
                      << "\n"
                      << R"({"input_length": 2, "hash_ids": [1]})"
                      << "\n";
  ASSERT_OK_AND_ASSIGN(std::vector<TraceRequest> ok, ReadTrace(path));
  EXPECT_EQ(ok.size(), 2u);
}

// A directory read as "reading DIR failed" (IOError: replay and advise exit
// 1, where a path that cannot be read is a usage error); an empty trace, or
// one of blank lines, was read as no request, and replay and advise reported
// zeros as their result with exit 0.
TEST(TraceReader, ADirectoryOrATraceWithoutRequestsIsRefused) {
  testing::TempDir dir;
  StatusOr<std::vector<TraceRequest>> d = ReadTrace(dir.str());
  EXPECT_TRUE(d.status().IsNotFound()) << d.status().ToString();
  EXPECT_NE(d.status().message().find("is a directory"), std::string::npos)
      << d.status().ToString();
  const std::string path = dir.str() + "/t.jsonl";
  for (const char* text : {"", "\n  \n\t\n"}) {
    std::ofstream(path) << text;
    StatusOr<std::vector<TraceRequest>> t = ReadTrace(path);
    EXPECT_TRUE(t.status().IsInvalidArgument()) << t.status().ToString();
    EXPECT_NE(t.status().message().find("holds no request"), std::string::npos)
        << t.status().ToString();
  }
}

}  // namespace
}  // namespace prefixkv::replay
