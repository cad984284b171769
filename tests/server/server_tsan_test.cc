// Many clients at once on several I/O threads, over an engine whose small hot
// tier evicts (write-back to the SSD tier) and promotes all the time, while
// other clients store, match and read prefix-cache blocks: every client reads
// its own writes, shared keys only ever hold a value some client wrote, the
// engine audits clean, and every command is counted exactly once in the
// per-command statistics read meanwhile. Built and run under ThreadSanitizer
// by `tools/run test`.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include "prefixkv/advanced/engine_internals.h"
#include "prefixkv/advanced/ssd_tier.h"
#include "prefixkv/tier_counter_fields.h"
#include "tests/server/server_fixture.h"
#include "tests/support/rocksdb_tsan_suppressions.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

using testing::RespClient;

class ServerConcurrencyTest : public testing::ServerFixture {};

std::string ValueFor(int client, int i, size_t size) {
  std::string v = "c" + std::to_string(client) + "-" + std::to_string(i) + "-";
  v.resize(size, static_cast<char>('a' + (client + i) % 26));
  return v;
}

// What the clients store as prefix-cache blocks: the chains of one
// conversation of a hybrid model, each from the root with its own real tip.
struct Blocks {
  std::string root;
  std::vector<std::vector<std::string>> chains;  // chains[k]: k + 1 blocks
  std::string prompt;                            // the longest chain's tokens
};

// PKV.PUT of a random chain, PKV.MATCH of the prompt, or PKV.STATS.
void BlockOp(RespClient& c, const Blocks& blocks, std::mt19937_64& rng,
             std::atomic<int>* failures) {
  switch (rng() % 3) {
    case 0: {
      testing::Reply r =
          c.Call(testing::PutArgs(blocks.chains[rng() % blocks.chains.size()]));
      if (r.type != '*') {
        fprintf(stderr, "PKV.PUT failed: %s\n", r.str.c_str());
        ++*failures;
      }
      break;
    }
    case 1: {
      testing::Reply m = c.Call({"PKV.MATCH", blocks.root, "4", blocks.prompt});
      if (m.type != '*' || m.elems.size() != 2) ++*failures;
      break;
    }
    default:
      if (c.Call({"PKV.STATS"}).type != '*') ++*failures;
  }
}

// One client's workload; failures are counted, not asserted, off the main thread.
void ClientLoop(uint16_t port, int id, uint64_t seed, int ops, const Blocks* blocks,
                std::atomic<int>* failures) {
  RespClient c(port);
  std::mt19937_64 rng(seed + id);
  std::vector<std::string> mine(8);  // last value written to own key j ("" = none)
  for (int i = 0; i < ops; ++i) {
    int j = static_cast<int>(rng() % mine.size());
    std::string key = "own:" + std::to_string(id) + ":" + std::to_string(j);
    switch (rng() % 6) {
      case 0:
      case 1: {
        std::string v = ValueFor(id, i, 64 + rng() % 6000);
        if (c.Call({"SET", key, v}).str != "OK") ++*failures;
        mine[j] = v;
        break;
      }
      case 2: {
        testing::Reply r = c.Call({"GET", key});
        if (mine[j].empty() ? !r.null : r.str != mine[j]) ++*failures;
        break;
      }
      case 3: {
        testing::Reply r = c.Call({"DEL", key});
        if (r.integer != (mine[j].empty() ? 0 : 1)) ++*failures;
        mine[j].clear();
        break;
      }
      case 4: {  // shared keys: any value, but always a whole one
        std::string shared = "shared:" + std::to_string(rng() % 4);
        if (rng() % 2) {
          if (c.Call({"SET", shared, ValueFor(id, i, 1000)}).str != "OK") ++*failures;
        } else {
          testing::Reply r = c.Call({"GET", shared});
          if (!r.null && (r.str.size() != 1000 || r.str[0] != 'c')) ++*failures;
        }
        break;
      }
      default:
        BlockOp(c, *blocks, rng, failures);
        break;
    }
  }
}

TEST_F(ServerConcurrencyTest, ClientsOnSeveralThreadsReadTheirOwnWrites) {
  options_.io_threads = 3;
  StartServer(/*hot_capacity_bytes=*/64 << 10);  // a few blocks: constant eviction
  const uint64_t seed = testing::TestSeed("ServerConcurrency");
  const int ops = static_cast<int>(testing::Iterations(300, 5000));
  Blocks blocks;
  const NamespaceSpec spec = testing::HybridSpec();
  blocks.root = Connect()->Call(testing::RegisterArgs(spec)).str;
  for (size_t k = 1; k <= 6; ++k) {
    blocks.chains.push_back(testing::EncodedStore(spec, testing::Tokens(k)));
  }
  blocks.prompt = testing::TokenBlob(testing::Tokens(6));
  std::atomic<int> failures{0};
  std::vector<std::thread> clients;
  for (int id = 0; id < 6; ++id) {
    clients.emplace_back(ClientLoop, server_->port(), id, seed, ops, &blocks, &failures);
  }
  // Connections that come and go while the others work (their INFO renders
  // the per-command counters the others are adding to), and a reader of
  // Server::stats().
  clients.emplace_back([&] {
    for (int i = 0; i < 30; ++i) {
      RespClient c(server_->port());
      if (c.Call({"INFO", "everything"}).type != '$') ++failures;
    }
  });
  std::atomic<bool> done{false};
  std::thread stats_reader([&] {
    while (!done.load()) {
      if (server_->stats().commands.empty()) ++failures;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  for (auto& t : clients) t.join();
  done = true;
  stats_reader.join();
  EXPECT_EQ(failures.load(), 0);
  // Every command the clients sent ran and was counted once, none failed.
  uint64_t client_calls = 0;
  for (const CommandStats& c : server_->stats().commands) {
    EXPECT_EQ(c.failed_calls, 0u) << c.name;
    EXPECT_EQ(c.rejected_calls, 0u) << c.name;
    EXPECT_EQ(c.calls, c.latency.count()) << c.name;
    if (c.name == "info") {
      EXPECT_EQ(c.calls, 30u);
    }
    for (const char* name : {"set", "get", "del", "pkv.put", "pkv.match", "pkv.stats"}) {
      if (c.name == name) client_calls += c.calls;
    }
  }
  EXPECT_EQ(client_calls, 6u * static_cast<uint64_t>(ops));
  EXPECT_GT(engine_->Stats().hot.evictions, 0u);
  ASSERT_OK_AND_ASSIGN(EngineAudit audit, engine_->Audit());
  EXPECT_TRUE(audit.ok()) << (audit.findings.empty() ? "orphans"
                                                     : audit.findings[0].what + ": " +
                                                           audit.findings[0].detail);
}

// The KV event log under concurrency: appenders on several threads (SETs and
// DELs over RESP, and puts through the engine, whose small hot tier evicts
// to the SSD tier), a reader tailing Engine::Events, an XREAD BLOCK client,
// snapshots, and the log's writer thread (small segments: it creates, drops
// and checkpoints them all the time). Every reader sees consecutive numbers
// in order (a resnapshot when retention passed it).
TEST_F(ServerConcurrencyTest, EventLogAppendersReadersAndWriterThread) {
  options_.io_threads = 2;
  engine_options_.event_retention_bytes = 256 << 10;  // segments of 32 KiB
  StartServer(/*hot_capacity_bytes=*/64 << 10);
  const int ops = static_cast<int>(testing::Iterations(400, 5000));
  std::atomic<int> failures{0};
  std::atomic<bool> done{false};
  std::vector<std::thread> appenders;
  for (int id = 0; id < 2; ++id) {
    appenders.emplace_back([&, id] {
      RespClient c(server_->port());
      for (int i = 0; i < ops; ++i) {
        const std::string key = "r" + std::to_string(id) + ":" + std::to_string(i % 50);
        if (c.Call({i % 3 == 2 ? "DEL" : "SET", key, std::string(600, 'v')}).type == '-')
          ++failures;
      }
    });
    appenders.emplace_back([&, id] {
      for (int i = 0; i < ops; ++i) {
        const std::string key = "e" + std::to_string(id) + ":" + std::to_string(i % 50);
        if (!engine_->PutValue(key, SharedBytes::Copy(std::string(900, 'w'))).ok())
          ++failures;
      }
    });
  }
  // Applies a page: consecutive numbers after the last one seen.
  const auto follow = [&](uint64_t* last, const std::vector<uint64_t>& seqs) {
    for (uint64_t seq : seqs) {
      if (*last != 0 && seq != *last + 1) {
        fprintf(stderr, "event %llu after %llu\n", static_cast<unsigned long long>(seq),
                static_cast<unsigned long long>(*last));
        ++failures;
      }
      *last = seq;
    }
  };
  std::atomic<int> resnapshots{0};
  std::thread reader([&] {
    uint64_t last = 0;
    while (!done.load()) {
      StatusOr<KvEventPage> page = engine_->Events(last + 1, 256, /*wait_ms=*/5);
      if (page.status().IsOutOfRange()) {
        ++resnapshots;
        StatusOr<KvEventSnapshot> snap = engine_->EventSnapshot();
        if (!snap.ok()) ++failures;
        last = snap.ok() ? snap->seq : 0;
        continue;
      }
      if (!page.ok()) ++failures;
      std::vector<uint64_t> seqs;
      for (const KvEvent& e : page->events) seqs.push_back(e.seq);
      follow(&last, seqs);
    }
  });
  std::thread xreader([&] {
    RespClient c(server_->port());
    std::string last = "0";
    uint64_t last_seq = 0;
    while (!done.load()) {
      testing::Reply r = c.Call(
          {"XREAD", "BLOCK", "5", "COUNT", "256", "STREAMS", "prefixkv:events", last});
      if (r.type == '-') {  // RESNAPSHOT: start over at the log's first event
        last = "0";
        last_seq = 0;
        continue;
      }
      if (r.type != '*' || r.elems.empty()) continue;  // timed out
      std::vector<uint64_t> seqs;
      for (const testing::Reply& entry : r.elems[0].elems[1].elems) {
        last = entry.elems[0].str;
        seqs.push_back(std::stoull(last.substr(0, last.find('-'))));
      }
      follow(&last_seq, seqs);
    }
  });
  for (auto& t : appenders) t.join();
  done = true;
  reader.join();
  xreader.join();
  EXPECT_EQ(failures.load(), 0);
  const KvEventLogStats s = engine_->EventLogStats();
  EXPECT_GT(s.trimmed, 0u);  // segments were dropped meanwhile
  EXPECT_EQ(s.write_errors, 0u);
  // The log's key sets equal the engine's tiers after it all.
  ASSERT_OK(engine_->Flush());
  ASSERT_OK_AND_ASSIGN(KvEventSnapshot snap, engine_->EventSnapshot());
  size_t on_ssd = 0;
  EngineSsdTier(*engine_)->ForEach([&](const BlockMeta&, uint64_t) { ++on_ssd; });
  EXPECT_EQ(snap.ssd.size(), on_ssd);
}

// Whether every byte of every tensor of `layers` is `byte` (a prompt's layers
// are filled with its own byte: another prompt's bytes show as another byte).
bool AllBytesAre(const std::vector<LayerState>& layers, uint8_t byte) {
  for (const LayerState& layer : layers) {
    for (const Tensor& t : layer.tensors) {
      for (char c : t.bytes().view()) {
        if (static_cast<uint8_t>(c) != byte) return false;
      }
    }
  }
  return true;
}

// Engine::Stats copies the hot budget's and the SSD tier's totals and owner
// counters under one lock each (6d54c06, f43f104), and the value walks wait
// for the hot tier's hand-overs (af87b6c): here under ThreadSanitizer, while
// other threads store and restore prompts (each filled with its own byte),
// SET/GET/DEL values, count the values, flush and charge memory, over a hot tier of a few
// blocks that spills to the SSD tier all the time. Every scrape's hot owners add up to
// its hot totals and its SSD owners to no more than the SSD totals; every restore and GET
// hands back the bytes stored under its own name.
TEST_F(ServerConcurrencyTest, StatsScrapesRaceStoresRestoresValuesAndSpills) {
  StartServer(/*hot_capacity_bytes=*/64 << 10);
  const uint64_t seed = testing::TestSeed("StatsScrapesRace");
  const int ops = static_cast<int>(testing::Iterations(150, 3000));
  ASSERT_OK_AND_ASSIGN(Namespace ns, engine_->RegisterModel(testing::KvOnlySpec()));
  std::atomic<int> failures{0};
  std::atomic<int> running{3};
  auto fail = [&](const std::string& what) {
    fprintf(stderr, "%s\n", what.c_str());
    ++failures;
  };
  std::vector<std::thread> workers;
  // Prompts p = 0..7 of 3 blocks, each with tokens of its own and layers of byte p + 1.
  workers.emplace_back([&] {
    std::mt19937_64 rng(seed);
    for (int i = 0; i < ops; ++i) {
      const int p = static_cast<int>(rng() % 8);
      std::vector<int32_t> tokens = testing::Tokens(3);
      for (int32_t& t : tokens) t += 1000 * p;
      const uint8_t byte = static_cast<uint8_t>(p + 1);
      if (rng() % 2 == 0) {
        LayerState kv = testing::KvLayer(static_cast<int64_t>(tokens.size()));
        for (Tensor& t : kv.tensors) t = Tensor::Filled(DType::kFloat32, t.shape(), byte);
        if (auto s = engine_->Store(ns, tokens, {kv, kv}); !s.ok())
          fail(s.status().ToString());
        continue;
      }
      StatusOr<MatchResult> m = engine_->Match(ns, tokens);
      if (!m.ok()) {
        fail(m.status().ToString());
        continue;
      }
      StatusOr<RestoreResult> r = engine_->Restore(*m);
      if (!r.ok()) {
        fail(r.status().ToString());
      } else if (!AllBytesAre(r->layers, byte)) {
        fail("prompt " + std::to_string(p) + " restored another prompt's bytes");
      }
    }
    --running;
  });
  workers.emplace_back([&] {  // values: each key's last SET, or none after a DEL
    std::mt19937_64 rng(seed + 1);
    std::vector<std::string> mine(32);  // up to 32 x 8000 bytes: past the hot tier
    for (int i = 0; i < ops; ++i) {
      const size_t j = rng() % mine.size();
      const std::string key = "v" + std::to_string(j);
      switch (rng() % 4) {
        case 0:
        case 1: {
          std::string v = ValueFor(static_cast<int>(j), i, 2000 + rng() % 6000);
          if (engine_->PutValue(key, SharedBytes::Copy(v)).ok())
            mine[j] = std::move(v);
          else
            fail("SET " + key);
          break;
        }
        case 2: {
          StatusOr<SharedBytes> got = engine_->GetValue(key);
          if (mine[j].empty() ? !got.status().IsNotFound()
                              : !got.ok() || got->view() != mine[j]) {
            fail("GET " + key + " is not its last SET");
          }
          break;
        }
        default: {
          StatusOr<bool> deleted = engine_->DeleteValue(key);
          if (!deleted.ok() || *deleted != !mine[j].empty()) fail("DEL " + key);
          mine[j].clear();
        }
      }
    }
    --running;
  });
  workers.emplace_back([&] {  // DBSIZE's walk (hot, hand-overs, SSD), a flush, a charge
    std::shared_ptr<MemoryCharge> charge = *engine_->OpenMemoryCharge("sessions");
    for (int i = 0; i < ops / 10; ++i) {
      if (StatusOr<uint64_t> n = engine_->CountValues(); !n.ok() || *n > 32) {
        fail("DBSIZE");
      }
      if (Status s = engine_->Flush(); !s.ok()) fail(s.ToString());
      uint64_t shortfall = 0;
      if (charge->Charge(16 << 10, &shortfall).ok()) (void)charge->Uncharge(16 << 10);
    }
    --running;
  });
  int scrapes = 0;
  while (running.load() > 0) {
    const EngineStats s = engine_->Stats();
    TierCounters hot, ssd;
    for (const EngineOwnerStats& o : s.owners) {
      AddTierCounters(&hot, o.hot);
      AddTierCounters(&ssd, o.ssd);
    }
    if (!(hot == s.hot)) fail("a scrape's hot owners do not add up to its totals");
    if (ssd.bytes > s.ssd.bytes || ssd.entries > s.ssd.entries) {
      fail("a scrape's SSD owners hold more than the SSD tier");
    }
    ++scrapes;
  }
  for (auto& t : workers) t.join();
  EXPECT_EQ(failures.load(), 0) << "seed " << seed;
  EXPECT_GT(scrapes, 1);
  EXPECT_GT(engine_->Stats().hot.evictions, 0u);
  ASSERT_OK(engine_->Flush());
  EXPECT_GT(engine_->Stats().ssd.entries, 0u) << "nothing spilled to the SSD tier";
}

TEST_F(ServerConcurrencyTest, StopsGracefullyWhileClientsAreBusy) {
  options_.io_threads = 2;
  StartServer();
  std::atomic<int> acknowledged{0};
  std::array<std::atomic<int>, 4> acknowledged_by{};  // per client
  std::vector<std::thread> clients;
  for (int id = 0; id < 4; ++id) {
    clients.emplace_back([&, id] {
      RespClient c(server_->port());
      for (int i = 0; i < 100000; ++i) {
        std::string key = "k" + std::to_string(id) + ":" + std::to_string(i);
        if (c.Call({"SET", key, "v"}).str != "OK") return;  // the server stopped
        ++acknowledged_by[id];
        ++acknowledged;
      }
    });
  }
  while (acknowledged.load() < 200) std::this_thread::yield();
  server_->Stop();
  for (auto& t : clients) t.join();
  // Every acknowledged SET is in the tiers: each client's first and last. A
  // client may have had none acknowledged (the others reached 200 first).
  for (int id = 0; id < 4; ++id) {
    const int n = acknowledged_by[id].load();
    if (n == 0) continue;
    EXPECT_TRUE(engine_->ContainsValue("k" + std::to_string(id) + ":0")) << id;
    EXPECT_TRUE(
        engine_->ContainsValue("k" + std::to_string(id) + ":" + std::to_string(n - 1)))
        << id;
  }
  ASSERT_OK(engine_->Flush());
  EXPECT_GE(engine_->Stats().ssd.entries, static_cast<uint64_t>(acknowledged.load()));
}

}  // namespace
}  // namespace prefixkv
