// Engines sharing a remote tier (an in-memory store standing in for the Redis
// Cluster; remote_cluster_integration_test runs the real one): what node A
// stores, node B matches and restores; on_spill and always write modes; a
// down or damaged store costs misses, never a failed request or wrong bytes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>

#include "prefixkv/advanced/engine_internals.h"
#include "prefixkv/advanced/remote_tier.h"
#include "prefixkv/advanced/ssd_tier.h"
#include "prefixkv/namespace_spec.h"
#include "tests/engine/engine_test_util.h"
#include "tests/support/fake_remote_store.h"

namespace prefixkv {
namespace {

using testing::FakeRemoteState;
using testing::FakeRemoteStore;
using testing::kBlockTokens;
using testing::KvLayers;
using testing::KvSpec;
using testing::Tokens;

class EngineRemoteTest : public ::testing::Test {
 public:
  EngineOptions Node(const std::string& name, RemoteWriteMode mode,
                     uint64_t hot_bytes = 16 << 20, bool on_disk = true) {
    EngineOptions o = testing::Quiet({});
    if (on_disk) o.data_dir = (dir_.path() / name).string();
    o.hot_capacity_bytes = hot_bytes;
    o.remote = "fake";
    o.remote_write = mode;
    o.log = log_.Sink();
    return o;
  }
  // Opens a node whose remote tier is the fake store.
  std::unique_ptr<Engine> Open(const EngineOptions& o, EngineHooks hooks = {}) {
    hooks.remote_store_factory = [state = state_] {
      return std::make_unique<FakeRemoteStore>(state);
    };
    StatusOr<std::unique_ptr<Engine>> e = OpenEngine(o, std::move(hooks));
    EXPECT_OK(e);
    return e.ok() ? std::move(e).value() : nullptr;
  }

  // Nodes "a" and "b" on the remote store (writing every block), `spec`
  // registered on each, in node_a_ and node_b_.
  void OpenNodes(const NamespaceSpec& spec, const ModelOptions& options = {}) {
    node_a_.first = Open(Node("a", RemoteWriteMode::kAlways));
    node_b_.first = Open(Node("b", RemoteWriteMode::kAlways));
    ASSERT_NE(node_a_.first, nullptr);
    ASSERT_NE(node_b_.first, nullptr);
    ASSERT_OK_AND_ASSIGN(node_a_.second, node_a_.first->RegisterModel(spec, options));
    ASSERT_OK_AND_ASSIGN(node_b_.second, node_b_.first->RegisterModel(spec, options));
  }

  // OpenNodes with a model with partial tails; `tokens` stored on A and
  // flushed to the store.
  void StoreOnNodeA(const std::vector<int32_t>& tokens) {
    ModelOptions tail;
    tail.store_partial_tail = true;
    ASSERT_NO_FATAL_FAILURE(OpenNodes(KvSpec(), tail));
    ASSERT_OK(
        node_a_.first->Store(node_a_.second, tokens, KvLayers(2, tokens.size(), rng_))
            .status());
    ASSERT_OK(node_a_.first->Flush());
  }

  // What the node damaged on disk and in the cluster holds (DamagedNode).
  struct DamagedBlock {
    std::unique_ptr<Engine> node;
    Namespace ns;
    BlockKey key;
    std::string record;
  };
  using ClusterDamage =
      std::function<void(const std::string& store_key, const BlockKey&)>;
  void OpenWithABlockDamagedOnDiskAndInTheCluster(const std::vector<int32_t>& tokens,
                                                  DamagedBlock* out,
                                                  const ClusterDamage& damage = {});
  // A restore on such a node refuses the cluster's copy: a corruption and a
  // miss, logged, the value deleted.
  void ExpectARestoreRefusesTheClustersCopy(const ClusterDamage& damage);

  std::shared_ptr<FakeRemoteState> state_ = std::make_shared<FakeRemoteState>();
  testing::LogLines log_;
  testing::TempDir dir_;
  std::mt19937_64 rng_{testing::TestSeed("EngineRemoteTest")};
  // Last: closed before the log and the directory they use.
  std::pair<std::unique_ptr<Engine>, Namespace> node_a_, node_b_;
};

// A sliding-window model: a KVCache layer and a rotating window of 4
// positions (its state valid only at the tip, docs/prefix_cache.md).
NamespaceSpec WindowSpec() {
  NamespaceSpec spec = KvSpec("window-model");
  spec.layer_types = {"KVCache", "RotatingKVCache"};
  return spec;
}

// Its layers after `tokens` positions: random KV rows and a random window.
std::vector<LayerState> WindowLayers(int64_t tokens, std::mt19937_64& rng) {
  std::vector<LayerState> layers = KvLayers(2, tokens, rng);
  LayerState& window = layers[1];
  window.cache_type = "RotatingKVCache";
  window.meta = RotatingMeta{0, 4, tokens, tokens % 4}.ToStrings();
  for (Tensor& t : window.tensors)
    t = testing::RandomTensor(rng, DType::kFloat32, {1, 2, 4, 8});
  return layers;
}

TEST_F(EngineRemoteTest, NodeBRestoresWhatNodeAStoredByteForByte) {
  ASSERT_NO_FATAL_FAILURE(OpenNodes(KvSpec()));
  auto& [a, na] = node_a_;
  auto& [b, nb] = node_b_;
  const std::vector<int32_t> tokens = Tokens(10 * kBlockTokens + 2);
  const std::vector<LayerState> layers = KvLayers(2, tokens.size(), rng_);
  ASSERT_OK(a->Store(na, tokens, layers).status());
  ASSERT_OK(a->Flush());  // the remote write queue drained
  EXPECT_EQ(state_->size(), 10u) << "full blocks only (no partial tail for this model)";

  const uint64_t calls = state_->get_calls;
  ASSERT_OK_AND_ASSIGN(MatchResult m, b->Match(nb, tokens));
  EXPECT_EQ(m.tiers, std::vector<TierLevel>(10, TierLevel::kRemote));
  EXPECT_EQ(state_->get_calls - calls, 1u) << "10 blocks in one batch";
  ASSERT_OK_AND_ASSIGN(RestoreResult r, b->Restore(m));
  EXPECT_EQ(r.restored_tokens, 10u * kBlockTokens);
  EXPECT_EQ(r.blocks_from_remote, 10u);
  EXPECT_EQ(r.tokens_from_remote, 10u * kBlockTokens);
  EXPECT_EQ(r.blocks_from_hot + r.blocks_from_ssd, 0u);
  ASSERT_OK_AND_ASSIGN(RestoreResult whole, a->Restore(*a->Match(na, tokens)));
  EXPECT_EQ(r.layers, whole.layers) << "node B's restore equals node A's own";

  // The blocks are now local on B: the next match asks nobody.
  const uint64_t calls2 = state_->get_calls;
  ASSERT_OK_AND_ASSIGN(MatchResult again, b->Match(nb, tokens));
  EXPECT_EQ(again.tiers, std::vector<TierLevel>(10, TierLevel::kHot));
  EXPECT_EQ(state_->get_calls, calls2) << "no full block after the local ones to ask for";
  const EngineStats s = b->Stats();
  EXPECT_TRUE(s.has_remote);
  EXPECT_EQ(s.remote.hits, 10u);
  EXPECT_TRUE(s.remote.available);
}

TEST_F(EngineRemoteTest, APartialTailComesFromTheRemoteTierToo) {
  // A 1-token tail: Match tries the longer candidate (2 tokens) first.
  const std::vector<int32_t> tokens = Tokens(3 * kBlockTokens + 1);
  StoreOnNodeA(tokens);
  auto& [b, nb] = node_b_;
  std::vector<int32_t> longer = tokens;
  longer.push_back(77);  // the next turn's prompt goes on past the tail
  const uint64_t calls = state_->get_calls;
  ASSERT_OK_AND_ASSIGN(MatchResult m, b->Match(nb, longer));
  EXPECT_EQ(m.tokens.size(), tokens.size());
  EXPECT_EQ(m.tiers, std::vector<TierLevel>(4, TierLevel::kRemote));
  // The 3 full blocks and every tail candidate after them in one round trip.
  EXPECT_EQ(state_->get_calls - calls, 1u);
  ASSERT_OK_AND_ASSIGN(RestoreResult r, b->Restore(m));
  EXPECT_EQ(r.tokens_from_remote, tokens.size());
  // Everything is local on B now, the tail too: the next match asks nobody.
  const uint64_t calls2 = state_->get_calls;
  ASSERT_OK_AND_ASSIGN(MatchResult again, b->Match(nb, longer));
  EXPECT_EQ(again.tokens.size(), tokens.size());
  EXPECT_EQ(state_->get_calls, calls2);
}

// A long prompt the cluster holds to its end costs one round trip, and a
// chain that ends inside the prompt one more for its tail candidates.
TEST_F(EngineRemoteTest, ALongRemoteChainIsOneRoundTripAndAnEarlyEndOneMore) {
  const std::vector<int32_t> tokens = Tokens(100 * kBlockTokens + 3);
  StoreOnNodeA(tokens);
  auto& [b, nb] = node_b_;
  ModelOptions tail;
  tail.store_partial_tail = true;
  uint64_t calls = state_->get_calls;
  ASSERT_OK_AND_ASSIGN(MatchResult m, b->Match(nb, tokens));
  EXPECT_EQ(m.tokens.size(), tokens.size());
  EXPECT_EQ(state_->get_calls - calls, 1u) << "100 blocks and the tail in one batch";

  // Another prompt sharing 60 blocks: the chain ends inside it (local now on
  // B up to 60 blocks), so a third node asks once for the chain and once more
  // for the tail candidates after block 60.
  auto c = Open(Node("c", RemoteWriteMode::kAlways));
  ASSERT_OK_AND_ASSIGN(Namespace nc, c->RegisterModel(KvSpec(), tail));
  std::vector<int32_t> other(tokens.begin(), tokens.begin() + 60 * kBlockTokens);
  for (int32_t t = 0; t < 10 * static_cast<int32_t>(kBlockTokens) + 2; ++t)
    other.push_back(5000 + t);
  calls = state_->get_calls;
  ASSERT_OK_AND_ASSIGN(MatchResult m2, c->Match(nc, other));
  EXPECT_EQ(m2.tokens.size(), 60u * kBlockTokens);
  EXPECT_EQ(state_->get_calls - calls, 2u);
}

TEST_F(EngineRemoteTest, OnSpillWritesWhatTheSsdTierEvictsAndNothingBefore) {
  EngineOptions o = Node("a", RemoteWriteMode::kOnSpill, /*hot_bytes=*/0);
  o.ssd_capacity_bytes = 64 << 10;
  EngineHooks hooks;
  hooks.configure_ssd = [](SsdTierOptions& s) { s.segment_bytes = 16 << 10; };
  auto a = Open(o, std::move(hooks));
  ASSERT_NE(a, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace ns, a->RegisterModel(KvSpec()));
  const std::vector<int32_t> first = Tokens(4 * kBlockTokens);
  ASSERT_OK(a->Store(ns, first, KvLayers(2, first.size(), rng_)).status());
  ASSERT_OK(a->Flush());
  EXPECT_EQ(state_->size(), 0u) << "nothing evicted yet, nothing written remotely";
  for (int32_t c = 1; c <= 20; ++c) {  // other conversations push the first one out
    const std::vector<int32_t> t = Tokens(4 * kBlockTokens, 1000 * c);
    ASSERT_OK(a->Store(ns, t, KvLayers(2, t.size(), rng_)).status());
  }
  ASSERT_OK(a->Flush());
  const EngineStats s = a->Stats();
  EXPECT_GT(s.ssd.evictions, 0u);
  EXPECT_EQ(s.remote.writes, state_->size());
  EXPECT_GT(state_->size(), 0u);
  // The first conversation left the SSD tier and is served from the remote one.
  ASSERT_OK_AND_ASSIGN(MatchResult m, a->Match(ns, first));
  EXPECT_EQ(m.tokens.size(), first.size());
  EXPECT_EQ(m.tiers.front(), TierLevel::kRemote);
}

TEST_F(EngineRemoteTest, WithoutAnSsdTierTheHotTiersVictimsGoRemote) {
  auto a = Open(Node("a", RemoteWriteMode::kOnSpill, /*hot_bytes=*/24 << 10,
                     /*on_disk=*/false));
  ASSERT_NE(a, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace ns, a->RegisterModel(KvSpec()));
  for (int32_t c = 0; c < 20; ++c) {
    const std::vector<int32_t> t = Tokens(4 * kBlockTokens, 1000 * c);
    ASSERT_OK(a->Store(ns, t, KvLayers(2, t.size(), rng_)).status());
  }
  ASSERT_OK(a->Flush());
  const EngineStats s = a->Stats();
  EXPECT_GT(s.hot.evictions, 0u);
  EXPECT_EQ(state_->size(), s.hot.evictions);
}

TEST_F(EngineRemoteTest, BlocksRestoredFromTheClusterAreNotWrittenBackWhenEvicted) {
  auto a = Open(Node("a", RemoteWriteMode::kAlways));
  auto b = Open(Node("b", RemoteWriteMode::kOnSpill, /*hot_bytes=*/24 << 10,
                     /*on_disk=*/false));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace na, a->RegisterModel(KvSpec()));
  ASSERT_OK_AND_ASSIGN(Namespace nb, b->RegisterModel(KvSpec()));
  std::vector<std::vector<int32_t>> chains;
  for (int32_t c = 0; c < 20; ++c) {
    chains.push_back(Tokens(4 * kBlockTokens, 1000 * c));
    ASSERT_OK(
        a->Store(na, chains.back(), KvLayers(2, chains.back().size(), rng_)).status());
  }
  EngineRemoteTier(*a)->Flush();
  const size_t written = state_->size();
  ASSERT_EQ(written, 80u);
  // B restores every chain from the cluster; its small hot tier evicts them.
  for (const std::vector<int32_t>& t : chains) {
    ASSERT_OK_AND_ASSIGN(MatchResult m, b->Match(nb, t));
    ASSERT_OK_AND_ASSIGN(RestoreResult r, b->Restore(m));
    EXPECT_EQ(r.tokens_from_remote, t.size());
  }
  EngineRemoteTier(*b)->Flush();
  const EngineStats s = b->Stats();
  ASSERT_GT(s.hot.evictions, 0u);
  EXPECT_EQ(s.remote.writes, 0u) << "the cluster holds them all";
  EXPECT_EQ(s.remote.rewrites_skipped, s.hot.evictions);
  EXPECT_EQ(state_->size(), written);
}

TEST_F(EngineRemoteTest, ADownStoreNeverFailsALocalRequest) {
  state_->down = true;
  auto a = Open(Node("a", RemoteWriteMode::kAlways));
  ASSERT_NE(a, nullptr) << "the engine opens without its remote tier";
  EXPECT_FALSE(a->Stats().remote.available);
  ASSERT_OK_AND_ASSIGN(Namespace ns, a->RegisterModel(KvSpec()));
  const std::vector<int32_t> tokens = Tokens(5 * kBlockTokens);
  const std::vector<LayerState> layers = KvLayers(2, tokens.size(), rng_);
  ASSERT_OK(a->Store(ns, tokens, layers).status());
  std::vector<int32_t> longer = tokens;
  for (int i = 0; i < 8; ++i) longer.push_back(500 + i);
  ASSERT_OK_AND_ASSIGN(MatchResult m, a->Match(ns, longer));
  EXPECT_EQ(m.tokens.size(), tokens.size()) << "local blocks; the remote ones are misses";
  ASSERT_OK_AND_ASSIGN(RestoreResult r, a->Restore(m));
  EXPECT_EQ(r.layers, layers);
  ASSERT_OK(a->Flush());
  ASSERT_OK(a->Close());
  EXPECT_EQ(log_.Count("remote tier unavailable"), 1);
}

// Node A stores six blocks and writes them to the store; `damage` changes the
// store's value of the fourth (`store_key`, block key `fourth`). Node B's
// match then ends before it, and B's restore equals A's restore of the three
// intact blocks, byte for byte. Returns node B.
std::unique_ptr<Engine> ExpectTheMatchEndsBeforeADamagedFourthBlock(
    EngineRemoteTest& t,
    const std::function<void(const std::string& store_key, const BlockKey& fourth)>&
        damage) {
  auto a = t.Open(t.Node("a", RemoteWriteMode::kAlways));
  auto b = t.Open(t.Node("b", RemoteWriteMode::kAlways));
  Namespace na = a->RegisterModel(KvSpec()).value();
  Namespace nb = b->RegisterModel(KvSpec()).value();
  const std::vector<int32_t> tokens = Tokens(6 * kBlockTokens);
  EXPECT_OK(a->Store(na, tokens, KvLayers(2, tokens.size(), t.rng_)).status());
  EXPECT_OK(a->Flush());
  const MatchResult on_a = a->Match(na, tokens).value();
  damage(EngineRemoteTier(*a)->StoreKey(on_a.keys[3]), on_a.keys[3]);
  const MatchResult m = b->Match(nb, tokens).value();
  EXPECT_EQ(m.keys.size(), 3u) << "blocks 0-2 only";
  const RestoreResult r = b->Restore(m).value();
  EXPECT_EQ(r.restored_tokens, 3u * kBlockTokens);
  const std::vector<int32_t> three(tokens.begin(), tokens.begin() + 3 * kBlockTokens);
  const RestoreResult on_a_three = a->Restore(*a->Match(na, three)).value();
  EXPECT_EQ(r.layers, on_a_three.layers) << "the intact blocks, byte for byte";
  return b;
}

TEST_F(EngineRemoteTest, ADamagedRemoteBlockEndsTheMatchBeforeItAndIsCounted) {
  auto b = ExpectTheMatchEndsBeforeADamagedFourthBlock(
      *this, [&](const std::string& store_key, const BlockKey&) {
        state_->FlipByte(store_key, 200);
      });
  EXPECT_EQ(b->Stats().remote.corruptions, 1u);
}

// Flips a tensor byte of the record stored at `store_key` and seals it in a
// sound envelope again, as a node writing damaged bytes would.
void DamageTheRecordInsideItsEnvelope(FakeRemoteState& state,
                                      const std::string& store_key, const BlockKey& key) {
  std::lock_guard<std::mutex> lock(state.mu);
  std::string& value = state.values.at(store_key);
  ASSERT_OK_AND_ASSIGN(RemoteTier::Decoded d, RemoteTier::DecodeEnvelope(key, value));
  std::string record(d.payload.view());
  record.back() ^= 0x40;  // a tensor byte
  value = RemoteTier::EncodeEnvelope(d.meta, record);
}

// A value whose envelope checks out but whose record is damaged (written that
// way by another node): the record's own checksum is verified before the
// block is stored locally, so the match ends before it. Local copies are
// restored without that check (block_io.cc); without this one the damaged
// bytes would be restored from B's hot tier.
TEST_F(EngineRemoteTest, ARemoteRecordDamagedInsideASoundEnvelopeIsNeverRestored) {
  ExpectTheMatchEndsBeforeADamagedFourthBlock(
      *this, [&](const std::string& store_key, const BlockKey& fourth) {
        DamageTheRecordInsideItsEnvelope(*state_, store_key, fourth);
      });
}

// The same value seen in the counters and the cluster: B's match refuses
// it, so it is a corruption and a miss, not a hit (blocks 0-2 and 4-5 read
// back intact, the 5th and 6th past the break), it is logged, and it is
// deleted (a node that computes the block again writes it over nothing).
TEST_F(EngineRemoteTest, ARemoteRecordDamagedInsideASoundEnvelopeIsACountedCorruption) {
  std::string damaged_key;
  auto b = ExpectTheMatchEndsBeforeADamagedFourthBlock(
      *this, [&](const std::string& store_key, const BlockKey& fourth) {
        DamageTheRecordInsideItsEnvelope(*state_, store_key, fourth);
        damaged_key = store_key;
      });
  ASSERT_NE(b, nullptr);
  ASSERT_OK(b->Flush());
  const RemoteCounters c = b->Stats().remote;
  EXPECT_EQ(c.corruptions, 1u);
  EXPECT_EQ(c.hits, 5u) << "blocks 0-2 and 4-5: the 4th is no hit";
  EXPECT_EQ(log_.Count("refused by its reader"), 1);
  std::lock_guard<std::mutex> lock(state_->mu);
  EXPECT_EQ(state_->values.count(damaged_key), 0u) << "the damaged value is deleted";
}

// A data directory written before its spec keyed the layer shapes keeps its
// blocks (docs/format.md §5.1) but never reads or writes the remote tier under
// the old root: other nodes' old namespaces there may hold other shapes.
TEST_F(EngineRemoteTest, ANamespaceAdoptedFromBeforeShapesStaysOutOfTheRemoteTier) {
  ModelOptions tail;
  tail.store_partial_tail = true;
  const NamespaceSpec legacy = KvSpec();
  NamespaceSpec shaped = legacy;
  shaped.layer_shapes = ParseLayerShapes("2x8,2x8").value();
  const std::vector<int32_t> tokens = Tokens(4 * kBlockTokens);
  {
    auto old = Open(Node("a", RemoteWriteMode::kAlways));
    ASSERT_NE(old, nullptr);
    ASSERT_OK_AND_ASSIGN(Namespace ns, old->RegisterModel(legacy, tail));
    ASSERT_OK(old->Store(ns, tokens, KvLayers(2, tokens.size(), rng_)).status());
    ASSERT_OK(old->Close());
  }
  auto remote_values = [&] {
    std::lock_guard<std::mutex> lock(state_->mu);
    return state_->values.size();
  };
  const size_t legacy_remote = remote_values();
  EXPECT_GT(legacy_remote, 0u);
  auto a = Open(Node("a", RemoteWriteMode::kAlways));
  ASSERT_NE(a, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace adopted, a->RegisterModel(shaped, tail));
  EXPECT_EQ(adopted.root, NamespaceRoot(legacy).value());
  // The spec without shapes could store other shapes there: refused.
  StatusOr<Namespace> unshaped = a->RegisterModel(legacy, tail);
  EXPECT_TRUE(unshaped.status().IsInvalidArgument()) << unshaped.status().ToString();
  EXPECT_NE(unshaped.status().message().find("serves layer shapes 2x8,2x8"),
            std::string::npos)
      << unshaped.status().ToString();
  ASSERT_OK_AND_ASSIGN(MatchResult m, a->Match(adopted, tokens));
  EXPECT_EQ(m.matched_tokens(), tokens.size());  // from its own SSD tier
  const std::vector<int32_t> more = Tokens(6 * kBlockTokens, 1000);
  ASSERT_OK(a->Store(adopted, more, KvLayers(2, more.size(), rng_)).status());
  ASSERT_OK(a->Flush());
  EXPECT_EQ(remote_values(), legacy_remote);  // nothing written back
  // A fresh node takes the new root: the old remote blocks are not its.
  auto b = Open(Node("b", RemoteWriteMode::kAlways));
  ASSERT_NE(b, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace fresh, b->RegisterModel(shaped, tail));
  EXPECT_EQ(fresh.root, NamespaceRoot(shaped).value());
  ASSERT_OK_AND_ASSIGN(MatchResult none, b->Match(fresh, tokens));
  EXPECT_EQ(none.matched_tokens(), 0u);
}

// The same after a restart, before the adopted model is registered again:
// another model's stores make the SSD tier evict the adopted namespace's
// blocks, and on_spill hands the victims to the remote tier. They must stay
// local there too (the namespace is kept out of the remote tier from the
// open on, by its manifest), or a node of the legacy spec under the same
// root (whose blocks may have other shapes) would restore them.
TEST_F(EngineRemoteTest, AnAdoptedNamespaceStaysOutOfTheRemoteTierBeforeItIsRegistered) {
  const NamespaceSpec legacy = KvSpec();
  NamespaceSpec shaped = legacy;
  shaped.layer_shapes = ParseLayerShapes("2x8,2x8").value();
  const BlockKey adopted_root = NamespaceRoot(legacy).value();
  EngineOptions o = Node("a", RemoteWriteMode::kOnSpill, /*hot_bytes=*/0);
  o.ssd_capacity_bytes = 64 << 10;
  const auto small_segments = [] {
    EngineHooks hooks;
    hooks.configure_ssd = [](SsdTierOptions& s) { s.segment_bytes = 16 << 10; };
    return hooks;
  };
  const std::vector<int32_t> tokens = Tokens(4 * kBlockTokens);
  {
    auto old = Open(o, small_segments());  // a directory of the legacy spec
    ASSERT_NE(old, nullptr);
    ASSERT_OK_AND_ASSIGN(Namespace ns, old->RegisterModel(legacy));
    ASSERT_OK(old->Store(ns, tokens, KvLayers(2, tokens.size(), rng_)).status());
    ASSERT_OK(old->Close());
  }
  {
    auto a = Open(o, small_segments());  // adopted by the shaped spec
    ASSERT_NE(a, nullptr);
    ASSERT_OK_AND_ASSIGN(Namespace ns, a->RegisterModel(shaped));
    ASSERT_EQ(ns.root, adopted_root);
    ASSERT_OK(a->Close());
  }
  EXPECT_EQ(state_->size(), 0u) << "nothing evicted so far";
  auto a = Open(o, small_segments());  // restarted: another model stores first
  ASSERT_NE(a, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace other, a->RegisterModel(KvSpec("other-model")));
  for (int32_t c = 1; c <= 20; ++c) {
    const std::vector<int32_t> t = Tokens(4 * kBlockTokens, 1000 * c);
    ASSERT_OK(a->Store(other, t, KvLayers(2, t.size(), rng_)).status());
  }
  ASSERT_OK(a->Flush());
  ASSERT_GT(a->Stats().ssd.evictions, 0u);
  ASSERT_GT(state_->size(), 0u) << "the other model's victims went remote";
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    size_t adopted_blocks = 0;
    for (const auto& [key, value] : state_->values) {
      ASSERT_GE(value.size(), 56u) << key;
      const BlockKey ns =
          BlockKey::DecodeFrom(reinterpret_cast<const uint8_t*>(value.data()) + 40);
      if (ns == adopted_root) ++adopted_blocks;
      EXPECT_EQ(ns, other.root) << key;
    }
    EXPECT_EQ(adopted_blocks, 0u) << "blocks of the adopted namespace written remotely";
  }
  // A node of the legacy spec (same root) finds none of them.
  auto b = Open(Node("b", RemoteWriteMode::kOnSpill));
  ASSERT_NE(b, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace nb, b->RegisterModel(legacy));
  ASSERT_EQ(nb.root, adopted_root);
  ASSERT_OK_AND_ASSIGN(MatchResult m, b->Match(nb, tokens));
  EXPECT_EQ(m.matched_tokens(), 0u);
}

// ExplainMiss on a node whose local tiers miss what another node stored: the
// remote tier holds it, and a Match would fetch it (looked up without
// counting). Once fetched, no miss; a prompt nobody stored is not in-remote.
TEST_F(EngineRemoteTest, ExplainMissSaysTheRemoteTierHoldsWhatTheLocalTiersMiss) {
  const std::vector<int32_t> tokens = Tokens(6 * kBlockTokens + 2);
  StoreOnNodeA(tokens);
  Engine& b = *node_b_.first;
  const RemoteCounters before = b.Stats().remote;
  ASSERT_OK_AND_ASSIGN(MissExplanation m, b.ExplainMiss(KvSpec(), tokens));
  EXPECT_EQ(m.kind, MissKind::kInRemote) << m.reason;
  EXPECT_EQ(MissKindName(m.kind), "in-remote");
  EXPECT_EQ(m.cached_blocks, 0u);
  EXPECT_EQ(m.first_missed_block, 0);
  EXPECT_EQ(m.remote_blocks, 7u) << "six full blocks and the 2-token tail";
  EXPECT_EQ(m.restorable_with_remote_tokens, tokens.size());
  EXPECT_NE(m.reason.find("the remote tier holds it and 6 block(s) after it"),
            std::string::npos)
      << m.reason;
  const RemoteCounters after = b.Stats().remote;
  EXPECT_EQ(after.hits, before.hits);
  EXPECT_EQ(after.misses, before.misses);
  ASSERT_OK_AND_ASSIGN(MatchResult match, b.Match(node_b_.second, tokens));
  EXPECT_EQ(match.matched_tokens(), m.restorable_with_remote_tokens);
  ASSERT_OK_AND_ASSIGN(MissExplanation fetched, b.ExplainMiss(KvSpec(), tokens));
  EXPECT_EQ(fetched.kind, MissKind::kNone) << fetched.reason;
  EXPECT_EQ(fetched.restorable_tokens, tokens.size()) << fetched.reason;
  ASSERT_OK_AND_ASSIGN(MissExplanation nobody,
                       b.ExplainMiss(KvSpec(), Tokens(3 * kBlockTokens, 5000)));
  EXPECT_NE(nobody.kind, MissKind::kInRemote) << nobody.reason;
  EXPECT_EQ(nobody.remote_blocks, 0u);
}

// A sliding-window conversation another node stored with its partial tail:
// the cluster holds the full blocks as interior placeholders and the tail as
// the tip, its window real. A Match fetches the chain and the tail, and the
// restore gives every token; ExplainMiss counted full blocks only, so it
// walked back past the placeholders to nothing and named block 0 never
// stored, and once fetched called the blocks stripped (0 tokens).
TEST_F(EngineRemoteTest, ExplainMissCountsThePartialTailAMatchTakes) {
  ModelOptions tail;
  tail.store_partial_tail = true;
  ASSERT_NO_FATAL_FAILURE(OpenNodes(WindowSpec(), tail));
  const std::vector<int32_t> tokens = Tokens(2 * kBlockTokens + 3);
  ASSERT_OK(
      node_a_.first->Store(node_a_.second, tokens, WindowLayers(tokens.size(), rng_))
          .status());
  ASSERT_OK(node_a_.first->Flush());
  Engine& b = *node_b_.first;
  ASSERT_OK_AND_ASSIGN(MissExplanation m, b.ExplainMiss(WindowSpec(), tokens));
  EXPECT_EQ(m.kind, MissKind::kInRemote) << m.reason;
  EXPECT_EQ(m.restorable_tokens, 0u);
  EXPECT_EQ(m.remote_blocks, 3u) << "two full blocks and the tail";
  EXPECT_EQ(m.restorable_with_remote_tokens, tokens.size()) << m.reason;
  ASSERT_OK_AND_ASSIGN(MatchResult match, b.Match(node_b_.second, tokens));
  ASSERT_OK_AND_ASSIGN(RestoreResult r, b.Restore(match));
  EXPECT_EQ(r.restored_tokens, tokens.size()) << r.reason;
  ASSERT_OK_AND_ASSIGN(MissExplanation fetched, b.ExplainMiss(WindowSpec(), tokens));
  EXPECT_EQ(fetched.kind, MissKind::kNone) << fetched.reason;
  EXPECT_EQ(fetched.restorable_tokens, tokens.size()) << fetched.reason;
}

// Every full block cached here, the tail in the cluster only: no miss here,
// and the tail a Match fetches is in the remote fields.
TEST_F(EngineRemoteTest, ExplainMissNamesTheClustersTailAfterTheLocalBlocks) {
  const std::vector<int32_t> tokens = Tokens(2 * kBlockTokens + 3);
  StoreOnNodeA(tokens);
  auto& [b, nb] = node_b_;
  const std::vector<int32_t> full(tokens.begin(), tokens.begin() + 2 * kBlockTokens);
  ASSERT_OK(b->Store(nb, full, KvLayers(2, full.size(), rng_)).status());
  ASSERT_OK_AND_ASSIGN(MissExplanation m, b->ExplainMiss(KvSpec(), tokens));
  EXPECT_EQ(m.kind, MissKind::kNone) << m.reason;
  EXPECT_EQ(m.restorable_tokens, full.size());
  EXPECT_EQ(m.remote_blocks, 1u);
  EXPECT_EQ(m.restorable_with_remote_tokens, tokens.size()) << m.reason;
  ASSERT_OK_AND_ASSIGN(MatchResult match, b->Match(nb, tokens));
  EXPECT_EQ(match.matched_tokens(), m.restorable_with_remote_tokens);
}

// The remote tier's run as ExplainMiss counts it is what a Match would take:
// a value whose envelope checks out but whose record is damaged ends it, as
// it ends the Match (PromoteRemote verifies the record). Counting envelopes
// only, it said the cluster held all six blocks and 6 blocks' tokens would be
// restorable once fetched, where the Match takes three.
TEST_F(EngineRemoteTest, ExplainMissCountsOnlyTheRemoteBlocksAMatchWouldTake) {
  const std::vector<int32_t> tokens = Tokens(6 * kBlockTokens);
  StoreOnNodeA(tokens);
  const BlockKey fourth = node_a_.first->Match(node_a_.second, tokens)->keys.at(3);
  DamageTheRecordInsideItsEnvelope(
      *state_, EngineRemoteTier(*node_a_.first)->StoreKey(fourth), fourth);
  Engine& b = *node_b_.first;
  ASSERT_OK_AND_ASSIGN(MissExplanation m, b.ExplainMiss(KvSpec(), tokens));
  EXPECT_EQ(m.kind, MissKind::kInRemote) << m.reason;
  EXPECT_EQ(m.remote_blocks, 3u) << m.reason;
  EXPECT_EQ(m.restorable_with_remote_tokens, 3u * kBlockTokens);
  EXPECT_NE(m.reason.find("the remote tier holds it and 2 block(s) after it"),
            std::string::npos)
      << m.reason;
  ASSERT_OK_AND_ASSIGN(MatchResult match, b.Match(node_b_.second, tokens));
  EXPECT_EQ(match.matched_tokens(), m.restorable_with_remote_tokens);
}

// ExplainMiss looks without counting (docs/prefix_cache.md), a value whose
// envelope fails included: it was counted a corruption with no miss (each
// one is a miss, docs/metrics.md), logged as deleted, and deleted. The
// Match after it counts the corruption once, as a miss, and deletes it.
TEST_F(EngineRemoteTest, ExplainMissCountsNoCorruptionAndTheMatchCountsItOnce) {
  const std::vector<int32_t> tokens = Tokens(6 * kBlockTokens);
  StoreOnNodeA(tokens);
  const BlockKey fourth = node_a_.first->Match(node_a_.second, tokens)->keys.at(3);
  const std::string store_key = EngineRemoteTier(*node_a_.first)->StoreKey(fourth);
  state_->FlipByte(store_key, 200);
  Engine& b = *node_b_.first;
  const RemoteCounters before = b.Stats().remote;
  ASSERT_OK_AND_ASSIGN(MissExplanation m, b.ExplainMiss(KvSpec(), tokens));
  EXPECT_EQ(m.remote_blocks, 3u) << m.reason;
  ASSERT_OK(b.Flush());
  const RemoteCounters looked = b.Stats().remote;
  EXPECT_EQ(looked.corruptions, before.corruptions);
  EXPECT_EQ(looked.misses, before.misses);
  EXPECT_EQ(log_.Count("the value is deleted"), 0);
  EXPECT_EQ(state_->values.count(store_key), 1u) << "left for a counted read";

  ASSERT_OK_AND_ASSIGN(MatchResult match, b.Match(node_b_.second, tokens));
  EXPECT_EQ(match.keys.size(), 3u);
  ASSERT_OK(b.Flush());
  const RemoteCounters c = b.Stats().remote;
  EXPECT_EQ(c.corruptions, before.corruptions + 1);
  EXPECT_EQ(c.hits, before.hits + 5) << "blocks 0-2 and 4-5 read back intact";
  EXPECT_EQ(c.misses, before.misses + 1 + (kBlockTokens - 1))
      << "the damaged 4th, and the partial tails after block 2 asked for then";
  EXPECT_EQ(log_.Count("the value is deleted"), 1);
  EXPECT_EQ(state_->values.count(store_key), 0u);
}

// A block Match reads from the cluster is stored locally only if the local
// tiers still lack it: a conversation stored here meanwhile, whose tip the
// cluster holds as another node's interior block (its window a placeholder),
// keeps its tip's window and restores to its end.
TEST_F(EngineRemoteTest, ABlockFetchedWhileItsTipIsStoredHereNeverReplacesTheTip) {
  ASSERT_NO_FATAL_FAILURE(OpenNodes(WindowSpec()));
  auto& [a, na] = node_a_;
  auto& [b, nb] = node_b_;
  const std::vector<int32_t> longer = Tokens(3 * kBlockTokens);
  const std::vector<int32_t> shorter = Tokens(2 * kBlockTokens);
  // Node B's conversation goes on past block 2: the cluster holds block 2
  // without its window.
  ASSERT_OK(b->Store(nb, longer, WindowLayers(3 * kBlockTokens, rng_)).status());
  ASSERT_OK(b->Flush());
  ASSERT_EQ(state_->size(), 3u);

  // Node A matches the longer prompt (nothing local: the cluster is asked),
  // and while that read is on the wire it stores a conversation ending at
  // block 2, the window in its tip.
  const std::vector<LayerState> stored = WindowLayers(2 * kBlockTokens, rng_);
  // (Named captures: clang 14 captures no structured binding.)
  state_->while_next_get_answers = [&a = a, &na = na, &shorter, &stored] {
    StatusOr<StoreResult> s = a->Store(na, shorter, stored);
    ASSERT_OK(s);
    EXPECT_TRUE(s->tip_state_stored);
  };
  ASSERT_OK_AND_ASSIGN(MatchResult fetched, a->Match(na, longer));
  EXPECT_EQ(fetched.matched_tokens(), longer.size());
  ASSERT_FALSE(state_->while_next_get_answers) << "the Match asked the cluster";

  // The acknowledged conversation restores to its end, its window exact.
  ASSERT_OK_AND_ASSIGN(MatchResult m, a->Match(na, shorter));
  ASSERT_OK_AND_ASSIGN(RestoreResult r, a->Restore(m));
  EXPECT_EQ(r.restored_tokens, shorter.size()) << r.reason;
  ASSERT_EQ(r.layers.size(), 2u);
  EXPECT_EQ(r.layers[1].tensors, stored[1].tensors);
}

// Flips a byte of the first segment file under `data_dir` that holds
// `bytes`; false if none does.
bool DamageOnDisk(const std::filesystem::path& data_dir, std::string_view bytes) {
  for (const auto& entry : std::filesystem::directory_iterator(data_dir / "segments")) {
    std::string file;
    {
      std::ifstream in(entry.path(), std::ios::binary);
      file.assign(std::istreambuf_iterator<char>(in), {});
    }
    const size_t at = file.find(bytes);
    if (at == std::string::npos) continue;
    file[at + bytes.size() / 2] ^= 0x40;
    std::ofstream(entry.path(), std::ios::binary | std::ios::trunc) << file;
    return true;
  }
  return false;
}

// Node "a" stores `tokens`' one block, then its cluster copy is damaged
// (by `damage`, else inside a sound envelope) and, once closed, its SSD copy on disk.
// Reopened into `out`, the node holds the block on SSD only, and a read of it fails its
// check there and goes on to the cluster.
void EngineRemoteTest::OpenWithABlockDamagedOnDiskAndInTheCluster(
    const std::vector<int32_t>& tokens, DamagedBlock* out, const ClusterDamage& damage) {
  const EngineOptions o = Node("a", RemoteWriteMode::kAlways);
  {
    auto a = Open(o);
    ASSERT_NE(a, nullptr);
    ASSERT_OK_AND_ASSIGN(Namespace ns, a->RegisterModel(KvSpec()));
    ASSERT_OK(a->Store(ns, tokens, KvLayers(2, tokens.size(), rng_)).status());
    ASSERT_OK(a->Flush());
    out->key = a->Match(ns, tokens)->keys.at(0);
    ASSERT_OK_AND_ASSIGN(SharedBytes stored, a->GetBlock(ns, out->key));
    out->record = std::string(stored.view());
    const std::string store_key = EngineRemoteTier(*a)->StoreKey(out->key);
    if (damage) {
      damage(store_key, out->key);
    } else {
      DamageTheRecordInsideItsEnvelope(*state_, store_key, out->key);
    }
    ASSERT_OK(a->Close());  // the block stays on SSD only
  }
  const std::string_view record(out->record);
  ASSERT_TRUE(DamageOnDisk(o.data_dir, record.substr(record.size() - 64)));
  out->node = Open(o);
  ASSERT_NE(out->node, nullptr);
  ASSERT_OK_AND_ASSIGN(out->ns, out->node->RegisterModel(KvSpec()));
}

// PKV.GET (Engine::GetBlock) serves a block this node holds, hot or on SSD,
// checksum-verified (docs/protocol.md). When its SSD copy failed its read
// (damaged on disk), the read went on to the remote tier, whose value is
// checked by its envelope only: a record another node wrote damaged inside a
// sound envelope was served as the block (a Match verifies the record before
// taking it; this read did not).
TEST_F(EngineRemoteTest, GetBlockNeverServesTheClustersUnverifiedCopy) {
  DamagedBlock d;
  ASSERT_NO_FATAL_FAILURE(
      OpenWithABlockDamagedOnDiskAndInTheCluster(Tokens(kBlockTokens), &d));
  StatusOr<SharedBytes> got = d.node->GetBlock(d.ns, d.key);
  EXPECT_FALSE(got.ok()) << "served " << got->size() << " bytes, "
                         << (got->view() == d.record ? "the stored record"
                                                     : "not the stored record");
}

// A restore whose SSD read of a matched block fails (damaged on disk) reads
// the cluster's copy, and refuses it when the record inside its sound
// envelope is damaged. That refusal is the corruption a Match's would be
// (PromoteRemote): a miss, not a hit, logged, and the value deleted; it was
// counted a remote hit (with its bytes read) and left in the cluster for
// every node's next Match to find damaged again.
void EngineRemoteTest::ExpectARestoreRefusesTheClustersCopy(const ClusterDamage& damage) {
  const std::vector<int32_t> tokens = Tokens(kBlockTokens);
  DamagedBlock d;
  ASSERT_NO_FATAL_FAILURE(OpenWithABlockDamagedOnDiskAndInTheCluster(tokens, &d, damage));
  Engine* a = d.node.get();
  ASSERT_OK_AND_ASSIGN(MatchResult m, a->Match(d.ns, tokens));
  ASSERT_EQ(m.tiers, std::vector<TierLevel>{TierLevel::kSsd});
  const RemoteCounters before = a->Stats().remote;
  ASSERT_OK_AND_ASSIGN(RestoreResult r, a->Restore(m));
  EXPECT_EQ(r.restored_tokens, 0u) << "the damaged record is never restored";
  ASSERT_OK(a->Flush());  // the remote tier's deletes sent
  const RemoteCounters c = a->Stats().remote;
  EXPECT_EQ(c.hits, before.hits) << "the refused record is no hit";
  EXPECT_EQ(c.misses, before.misses + 1);
  EXPECT_EQ(c.corruptions, before.corruptions + 1);
  EXPECT_EQ(c.bytes_read, before.bytes_read);
  EXPECT_EQ(log_.Count("refused by its reader"), 1);
  std::lock_guard<std::mutex> lock(state_->mu);
  EXPECT_EQ(state_->values.count(EngineRemoteTier(*a)->StoreKey(d.key)), 0u)
      << "the damaged value is deleted";
}

TEST_F(EngineRemoteTest, ARestoreRefusingTheClustersDamagedRecordCountsAndDeletesIt) {
  ExpectARestoreRefusesTheClustersCopy({});
}

// The same for a record with a sound checksum that is not the block asked
// for (another parent under the same key, as another node's defect would
// write it): Match's PromoteRemote refuses it as a corruption; the restore's
// check (ValidateBlock) refused it as well but counted it a hit and kept it.
TEST_F(EngineRemoteTest,
       ARestoreRefusingTheClustersRecordOfAnotherParentCountsAndDeletesIt) {
  ExpectARestoreRefusesTheClustersCopy([&](const std::string& store_key,
                                           const BlockKey& key) {
    std::lock_guard<std::mutex> lock(state_->mu);
    std::string& value = state_->values.at(store_key);
    ASSERT_OK_AND_ASSIGN(RemoteTier::Decoded d, RemoteTier::DecodeEnvelope(key, value));
    ASSERT_OK_AND_ASSIGN(BlockRecord record, DecodeBlock(d.payload));
    record.parent = key;  // not the namespace root it follows
    ASSERT_OK_AND_ASSIGN(SharedBytes relinked, EncodeBlock(record));
    value = RemoteTier::EncodeEnvelope(d.meta, std::string(relinked.view()));
  });
}

}  // namespace
}  // namespace prefixkv
