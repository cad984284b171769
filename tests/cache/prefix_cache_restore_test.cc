// PrefixCache store -> match -> restore: byte-identical round trips from the
// hot tier and from SSD, validation of every block, walk-back, and the
// rotating-layer reconstruction of the seed tests.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <thread>

#include "prefixkv/advanced/hash.h"
#include "tests/cache/cache_test_util.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

using testing::HybridSpec;
using testing::kBlockTokens;
using testing::KvLayer;
using testing::KvOnlySpec;
using testing::kWindow;
using testing::RotatingLayer;
using testing::TestTiers;
using testing::Tokens;

constexpr uint64_t kHotBytes = 64u << 20;

// A KVCache and a QuantizedKVCache layer, both of 2 KV heads of 8.
NamespaceSpec KvAndQuantizedSpec() {
  NamespaceSpec spec = KvOnlySpec();
  spec.layer_types = {"KVCache", "QuantizedKVCache"};
  spec.layer_shapes = ParseLayerShapes("2x8,2x8").value();
  return spec;
}

// A QuantizedKVCache layer of `tokens`, as if 4 bits: 8 values in one word.
LayerState PackedKvLayer(int64_t tokens, int64_t heads) {
  LayerState layer = KvLayer(tokens);
  layer.cache_type = "QuantizedKVCache";
  for (Tensor& t : layer.tensors)
    t = Tensor::Filled(DType::kUInt32, {1, heads, tokens, 1}, 7);
  return layer;
}

class PrefixCacheRestoreTest : public ::testing::Test {
 protected:
  Namespace Register(const NamespaceSpec& spec) {
    StatusOr<Namespace> ns = tiers_->Register(spec);
    EXPECT_OK(ns);
    return ns.ok() ? *ns : Namespace{};
  }

  RestoreResult MatchAndRestore(Namespace ns, const std::vector<int32_t>& prompt) {
    StatusOr<MatchResult> match = tiers_->cache().Match(ns, prompt);
    EXPECT_OK(match);
    StatusOr<RestoreResult> r = tiers_->cache().Restore(*match);
    EXPECT_OK(r);
    return r.ok() ? std::move(r).value() : RestoreResult{};
  }

  // Two KV layers of `tokens`, stored through tiers on dir_ and flushed to
  // their SSD tier; the chain's keys.
  std::vector<BlockKey> StoreOnSsd(const std::vector<int32_t>& tokens,
                                   std::vector<LayerState>* layers) {
    const int64_t n = static_cast<int64_t>(tokens.size());
    *layers = {KvLayer(n, &rng_), KvLayer(n, &rng_)};
    tiers_ = std::make_unique<TestTiers>(kHotBytes, dir_.str());
    Namespace ns = Register(KvOnlySpec());
    EXPECT_OK(tiers_->cache().Store(ns, tokens, *layers));
    EXPECT_OK(tiers_->cache().Flush());
    return ChainKeys(ns.root, tokens, kBlockTokens);
  }

  std::mt19937_64 rng_{testing::TestSeed("PrefixCacheRestoreTest")};
  testing::TempDir dir_;  // outlives the tiers below (members die in reverse)
  std::unique_ptr<TestTiers> tiers_ = std::make_unique<TestTiers>(kHotBytes, "");
};

TEST_F(PrefixCacheRestoreTest, RoundTripFromHotIsByteIdentical) {
  Namespace ns = Register(KvOnlySpec());
  const std::vector<int32_t> tokens = Tokens(6);
  const int64_t n = static_cast<int64_t>(tokens.size());
  const std::vector<LayerState> layers = {KvLayer(n, &rng_), KvLayer(n, &rng_)};
  ASSERT_OK(tiers_->cache().Store(ns, tokens, layers));

  RestoreResult r = MatchAndRestore(ns, tokens);
  EXPECT_EQ(r.restored_tokens, tokens.size());
  EXPECT_EQ(r.blocks_from_hot, 6u);
  EXPECT_TRUE(r.reason.empty()) << r.reason;
  EXPECT_EQ(r.layers, layers);
}

TEST_F(PrefixCacheRestoreTest, RoundTripOfHybridModelRestoresTheTipWindow) {
  Namespace ns = Register(HybridSpec());
  const std::vector<int32_t> tokens = Tokens(3);
  const int64_t n = static_cast<int64_t>(tokens.size());
  const std::vector<LayerState> layers = {KvLayer(n, &rng_),
                                          RotatingLayer(n, "RotatingKVCache", &rng_)};
  ASSERT_OK(tiers_->cache().Store(ns, tokens, layers));

  std::vector<int32_t> prompt = tokens;
  prompt.push_back(99);  // the next turn's prompt extends the stored tokens
  RestoreResult r = MatchAndRestore(ns, prompt);
  ASSERT_EQ(r.restored_tokens, tokens.size());
  EXPECT_EQ(r.layers[0], layers[0]);
  EXPECT_EQ(r.layers[1].cache_type, kRestoredRotatingType);
  EXPECT_EQ(r.layers[1].meta, layers[1].meta);
  EXPECT_EQ(r.layers[1].tensors, layers[1].tensors);
}

TEST_F(PrefixCacheRestoreTest, RoundTripFromSsdIsByteIdenticalAndPromotes) {
  Namespace ns;
  const std::vector<int32_t> tokens = Tokens(5);
  const int64_t n = static_cast<int64_t>(tokens.size());
  const std::vector<LayerState> layers = {KvLayer(n, &rng_), KvLayer(n, &rng_)};
  {
    TestTiers before(kHotBytes, dir_.str());
    PrefixCache& cache = before.cache();
    ns = before.Register(KvOnlySpec()).value();
    ASSERT_OK(cache.Store(ns, tokens, layers));
    ASSERT_OK(cache.Flush());  // a clean shutdown writes dirty hot blocks
  }
  // A restart: empty hot tier, the same SSD directory.
  tiers_ = std::make_unique<TestTiers>(kHotBytes, dir_.str());
  ns = Register(KvOnlySpec());
  StatusOr<MatchResult> match = tiers_->cache().Match(ns, tokens);
  ASSERT_EQ(match->tiers, std::vector<TierLevel>(5, TierLevel::kSsd));

  StatusOr<RestoreResult> r = tiers_->cache().Restore(*match);
  ASSERT_OK(r);
  EXPECT_EQ(r->restored_tokens, tokens.size());
  EXPECT_EQ(r->blocks_from_ssd, 5u);
  EXPECT_EQ(r->layers, layers);
  // Promotion (on by default) put the blocks back in the hot tier.
  EXPECT_EQ(tiers_->cache().Match(ns, tokens)->tiers,
            std::vector<TierLevel>(5, TierLevel::kHot));
}

// An SSD read is hashed once: the tier checks its bytes' XXH3-64 against the
// one it computed when storing them, and the record is decoded without its
// own checksum pass (DecodeTrustedBlock), as hot hits are. Seen here with
// bytes only the tier vouches for: a record damaged before it was put into
// the SSD tier directly (the cache never stores unverified bytes) is restored
// from it, while DecodeBlock, which every copy of other origin goes through,
// still rejects the same bytes.
TEST_F(PrefixCacheRestoreTest, SsdReadsAreDecodedOnTheTiersOwnCheckAlone) {
  const std::vector<int32_t> tokens = Tokens(3);
  std::vector<LayerState> layers;
  const std::vector<BlockKey> keys = StoreOnSsd(tokens, &layers);
  std::string bytes(
      EncodeBlock(testing::ReadBlock(*tiers_->hot, keys[2])).value().view());
  bytes.back() ^= 0x40;  // the last token's last value: a tensor byte
  const SharedBytes damaged = SharedBytes::Copy(bytes);
  ASSERT_TRUE(DecodeBlock(damaged).status().IsCorruption());
  // A restart, then the damaged record put under block 2 in the SSD tier.
  tiers_.reset();
  tiers_ = std::make_unique<TestTiers>(kHotBytes, dir_.str());
  Namespace ns = Register(KvOnlySpec());
  ASSERT_OK(tiers_->ssd->Put({keys[2], keys[1], ns.root, 0}, damaged, /*dirty=*/false));
  uint64_t payload_bytes = 0;
  for (const BlockKey& key : keys) {
    ASSERT_OK_AND_ASSIGN(SharedBytes payload, tiers_->ssd->PeekPayload(key));
    payload_bytes += payload.size();
  }

  const uint64_t hashed_before = ThreadHashedBytes();
  const SsdReadAheadStats ahead_before = tiers_->ssd->ReadAheadStats();
  RestoreResult r = MatchAndRestore(ns, tokens);
  // Each payload byte once (the tier's check, on this thread or on a
  // read-ahead thread for the blocks read ahead; the decode hashes nothing),
  // besides small records: the chain keys Match computes, the event log's
  // and the access order's records (under 256 bytes a block).
  const SsdReadAheadStats ahead = tiers_->ssd->ReadAheadStats();
  // (A read still queued when its Get comes is cancelled and read by the Get:
  // hashed once either way. None was stale here.)
  EXPECT_EQ(ahead.stale, ahead_before.stale);
  const uint64_t hashed =
      ThreadHashedBytes() - hashed_before + ahead.bytes_read - ahead_before.bytes_read;
  EXPECT_LE(hashed, payload_bytes + keys.size() * 256);
  EXPECT_GE(hashed, payload_bytes);
  EXPECT_EQ(r.restored_tokens, tokens.size()) << r.reason;
  EXPECT_EQ(r.blocks_from_ssd, 3u);
  ASSERT_EQ(r.layers.size(), 2u);
  EXPECT_EQ(r.layers[0], layers[0]);
  EXPECT_NE(r.layers[1], layers[1]) << "the tier's bytes, decoded without a second pass";
}

// A restore from SSD asks the tier to read the blocks after the one it is
// checking (SsdTierOptions::read_ahead_threads): the blocks come back byte
// identical and counted once each, and when a block ends the restore early
// (here one stored with other tokens under its key) the reads made ahead of
// the blocks after it are forgotten: nothing stays held, none is counted.
TEST_F(PrefixCacheRestoreTest, ARestoreReadsAheadAndForgetsWhatABlockThatEndsItLeft) {
  const std::vector<int32_t> tokens = Tokens(8);
  std::vector<LayerState> layers;
  const std::vector<BlockKey> keys = StoreOnSsd(tokens, &layers);
  BlockRecord other = testing::ReadBlock(*tiers_->hot, keys[5]);
  other.tokens[0] = 12345;  // what a hash collision would look like
  // A restart, with block 5 replaced in the SSD tier.
  tiers_.reset();
  tiers_ = std::make_unique<TestTiers>(kHotBytes, dir_.str());
  Namespace ns = Register(KvOnlySpec());
  uint64_t hits = tiers_->ssd->Totals().hits;  // persisted across restarts
  RestoreResult whole = MatchAndRestore(
      ns, std::vector<int32_t>(tokens.begin(), tokens.begin() + 5 * kBlockTokens));
  EXPECT_EQ(whole.restored_tokens, 5 * kBlockTokens) << whole.reason;
  EXPECT_EQ(whole.blocks_from_ssd, 5u);
  SsdReadAheadStats ahead = tiers_->ssd->ReadAheadStats();
  EXPECT_GT(ahead.started, 0u);
  EXPECT_EQ(ahead.served + ahead.stale + ahead.unused, ahead.started);
  EXPECT_EQ(tiers_->ssd->Totals().hits, hits + 5);

  tiers_.reset();
  tiers_ = std::make_unique<TestTiers>(kHotBytes, dir_.str());
  ns = Register(KvOnlySpec());
  ASSERT_OK(tiers_->ssd->Put({keys[5], keys[4], ns.root, 0}, EncodeBlock(other).value(),
                             /*dirty=*/false));
  hits = tiers_->ssd->Totals().hits;
  RestoreResult r = MatchAndRestore(ns, tokens);
  EXPECT_EQ(r.restored_tokens, 5 * kBlockTokens);
  EXPECT_NE(r.reason.find("block 5"), std::string::npos) << r.reason;
  for (size_t l = 0; l < layers.size(); ++l) {
    EXPECT_EQ(r.layers[l].tensors[0].shape()[2], static_cast<int64_t>(5 * kBlockTokens));
  }
  // A forgotten read still running gives its bytes back when it ends.
  for (int waited_ms = 0; waited_ms < 10000; ++waited_ms) {
    if (tiers_->ssd->ReadAheadStats().pending_bytes == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(tiers_->ssd->ReadAheadStats().pending_bytes, 0u)
      << "the reads after block 5 are forgotten";
  ahead = tiers_->ssd->ReadAheadStats();
  EXPECT_EQ(ahead.served + ahead.stale + ahead.unused, ahead.started);
  EXPECT_EQ(tiers_->ssd->Totals().hits, hits + 6) << "blocks 0-5, each once";
  // The engine reports them (INFO, PKV.STATS, the metrics and Python read these).
  const EngineStats stats = tiers_->engine->Stats();
  EXPECT_EQ(stats.ssd_read_ahead_reads, ahead.started);
  EXPECT_EQ(stats.ssd_read_ahead_served, ahead.served);
  EXPECT_EQ(stats.ssd_read_ahead_stale, ahead.stale);
  EXPECT_EQ(stats.ssd_read_ahead_unused, ahead.unused);
  EXPECT_EQ(stats.ssd_read_ahead_bytes, ahead.bytes_read);
  EXPECT_GT(stats.ssd_read_ahead_unused + stats.ssd_read_ahead_stale, 0u)
      << "reads were made ahead of the blocks after block 5";
}

// A quantized layer's meta carries its offset too: mlx-lm's QuantizedKVCache
// (offset, group_size, bits) and mlx-swift-lm's (step, offset, group_size,
// bits). A restore that ends before the store did (here at the last full
// block of a store that ends mid-block) must say the restored length, or the
// rebuilt cache appends after rows it does not hold.
TEST_F(PrefixCacheRestoreTest, AQuantizedLayersOffsetIsTheRestoredLength) {
  NamespaceSpec spec = KvOnlySpec();
  spec.layer_types = {"QuantizedKVCache", "QuantizedKVCache"};
  Namespace ns = Register(spec);
  std::vector<int32_t> tokens = Tokens(2);
  tokens.insert(tokens.end(), {100, 101});  // 10 tokens: 2 full blocks stored
  const int64_t n = static_cast<int64_t>(tokens.size());
  auto quantized = [&](std::vector<std::string> meta) {
    LayerState q;
    q.cache_type = "QuantizedKVCache";
    q.meta = std::move(meta);
    q.tensors = {testing::RandomTensor(rng_, DType::kUInt32, {1, 2, n, 2}),
                 testing::RandomTensor(rng_, DType::kFloat16, {1, 2, n, 1}),
                 testing::RandomTensor(rng_, DType::kFloat16, {1, 2, n, 1})};
    return q;
  };
  ASSERT_OK(tiers_->cache().Store(
      ns, tokens, {quantized({"10", "64", "8"}), quantized({"256", "10", "64", "4"})}));
  std::vector<int32_t> prompt = tokens;
  prompt.push_back(99);
  RestoreResult r = MatchAndRestore(ns, prompt);
  ASSERT_EQ(r.restored_tokens, 2 * kBlockTokens) << r.reason;
  EXPECT_EQ(r.layers[0].tensors[0].dim(2), 8);
  EXPECT_EQ(r.layers[0].meta, (std::vector<std::string>{"8", "64", "8"}));
  EXPECT_EQ(r.layers[1].meta, (std::vector<std::string>{"256", "8", "64", "4"}));
  // A meta of no known form is kept as stored.
  NamespaceSpec other = spec;
  other.model = "other-quantized";
  Namespace ns2 = Register(other);
  ASSERT_OK(tiers_->cache().Store(
      ns2, tokens, {quantized({"64", "8"}), quantized({"10", "64", "8", "x"})}));
  r = MatchAndRestore(ns2, prompt);
  ASSERT_EQ(r.restored_tokens, 2 * kBlockTokens) << r.reason;
  EXPECT_EQ(r.layers[0].meta, (std::vector<std::string>{"64", "8"}));
  EXPECT_EQ(r.layers[1].meta, (std::vector<std::string>{"10", "64", "8", "x"}));
}

TEST_F(PrefixCacheRestoreTest, RegisteringAModelTwiceGivesTheSameNamespace) {
  Namespace a = Register(KvOnlySpec());
  Namespace b = Register(KvOnlySpec());
  EXPECT_EQ(a.index, b.index);
  EXPECT_EQ(a.root, b.root);
  NamespaceSpec salted = KvOnlySpec();
  salted.salt = "tenant-2";
  EXPECT_NE(Register(salted).root, a.root);
  EXPECT_TRUE(tiers_->Register(KvOnlySpec(), {.store_partial_tail = true})
                  .status()
                  .IsInvalidArgument());
  NamespaceSpec unknown = KvOnlySpec();
  unknown.layer_types[1] = "NoSuchCache";
  EXPECT_TRUE(tiers_->Register(unknown).status().IsInvalidArgument());
  EXPECT_TRUE(tiers_->cache()
                  .Match(Namespace{7, a.root}, testing::Tokens(1))
                  .status()
                  .IsInvalidArgument());
}

TEST_F(PrefixCacheRestoreTest, MatchStopsAtTheFirstDivergingBlock) {
  Namespace ns = Register(KvOnlySpec());
  const std::vector<int32_t> tokens = Tokens(4);
  ASSERT_OK(tiers_->cache().Store(ns, tokens, testing::KvOnlyLayers(16)));
  std::vector<int32_t> prompt = tokens;
  prompt[9] = -1;  // inside block 2
  StatusOr<MatchResult> match = tiers_->cache().Match(ns, prompt);
  EXPECT_EQ(match->keys.size(), 2u);
  EXPECT_EQ(match->matched_tokens(), 2 * kBlockTokens);
}

TEST_F(PrefixCacheRestoreTest, StoreDeduplicatesCachedBlocks) {
  Namespace ns = Register(KvOnlySpec());
  ASSERT_OK(tiers_->cache().Store(ns, Tokens(2), testing::KvOnlyLayers(8)));
  StatusOr<StoreResult> r =
      tiers_->cache().Store(ns, Tokens(3), testing::KvOnlyLayers(12));
  EXPECT_EQ(r->blocks_deduplicated, 2u);
  EXPECT_EQ(r->blocks_written, 1u);
  EXPECT_EQ(tiers_->hot->Totals().inserts, 3u);
}

TEST_F(PrefixCacheRestoreTest, StoreRejectsLayersThatDoNotFitTheLayout) {
  Namespace ns = Register(HybridSpec());
  const std::vector<int32_t> tokens = Tokens(2);
  EXPECT_TRUE(
      tiers_->cache().Store(ns, tokens, {KvLayer(8)}).status().IsInvalidArgument());
  EXPECT_TRUE(tiers_->cache()
                  .Store(ns, tokens, {KvLayer(8), KvLayer(8)})
                  .status()
                  .IsInvalidArgument());
  EXPECT_TRUE(tiers_->cache()
                  .Store(ns, tokens, {KvLayer(7), RotatingLayer(8)})
                  .status()
                  .IsInvalidArgument());
  EXPECT_TRUE(tiers_->cache()
                  .Store(ns, tokens, {KvLayer(8), RotatingLayer(5)})
                  .status()
                  .IsInvalidArgument());
  EXPECT_EQ(tiers_->hot->Totals().entries, 0u);
}

// A restore refuses a rotating window of another dtype than the namespace's
// (block_validation.cc), so a store must not write one: it was taken, made
// the tip, and, being a real tip, kept by every later store of the same
// tokens (deduplicated), so the conversation never restored again.
TEST_F(PrefixCacheRestoreTest, StoreRefusesARotatingWindowOfAnotherDtype) {
  Namespace ns = Register(HybridSpec());  // float32
  const std::vector<int32_t> tokens = Tokens(2);
  LayerState window = RotatingLayer(8);
  for (Tensor& t : window.tensors) t = Tensor::Filled(DType::kFloat16, t.shape(), 1);
  EXPECT_TRUE(tiers_->cache()
                  .Store(ns, tokens, {KvLayer(8), window})
                  .status()
                  .IsInvalidArgument());
  EXPECT_EQ(tiers_->hot->Totals().entries, 0u);
  ASSERT_OK(tiers_->cache().Store(ns, tokens, testing::HybridLayers(8)));
  StatusOr<RestoreResult> r = tiers_->cache().Restore(*tiers_->cache().Match(ns, tokens));
  ASSERT_OK(r);
  EXPECT_EQ(r->restored_tokens, 8u) << r->reason;
}

// A spec of a KV layer and a recurrent (arrays) layer, with `shapes` as its
// layer shapes (empty: unset).
NamespaceSpec RecurrentSpec(std::vector<LayerShape> shapes = {}) {
  NamespaceSpec spec = HybridSpec();
  spec.layer_types = {"KVCache", "ArraysCache"};
  spec.layer_shapes = std::move(shapes);
  return spec;
}

// Stores a good tip at Tokens(2), then the store extending it to Tokens(3)
// with the tip-only layer (`tip` at that position) spoilt by `spoil`: it must
// be InvalidArgument before anything is written or the tip before stripped
// (supersede-on-extend), so Tokens(2) still restores.
void ExpectSpoiltTipRefused(PrefixCache& cache, Namespace ns,
                            const std::function<LayerState(int64_t)>& tip,
                            const std::function<void(LayerState&)>& spoil) {
  const int64_t n = 2 * kBlockTokens;
  ASSERT_OK(cache.Store(ns, Tokens(2), {KvLayer(n), tip(n)}));
  LayerState bad = tip(n + kBlockTokens);
  spoil(bad);
  EXPECT_TRUE(cache.Store(ns, Tokens(3), {KvLayer(n + kBlockTokens), bad})
                  .status()
                  .IsInvalidArgument());
  EXPECT_EQ(cache.Match(ns, Tokens(3))->keys.size(), 2u) << "the spoilt store wrote";
  StatusOr<RestoreResult> r = cache.Restore(*cache.Match(ns, Tokens(2)));
  ASSERT_OK(r);
  EXPECT_EQ(r->restored_tokens, static_cast<size_t>(n)) << r->reason;
}

// RecurrentSpec with the shapes of KvLayer and ArraysLayer: a 4 x 8 x 8 state.
NamespaceSpec ShapedRecurrentSpec() {
  const LayerShape kv{.kv_heads = 2, .head_dim = 8};
  const LayerShape recurrent{
      .conv_tokens = 3, .channels = 16, .state_heads = 4, .state_dim = 8};
  return RecurrentSpec({kv, recurrent});
}

// ExpectSpoiltTipRefused with the tip's recurrent state of shape `state`.
void ExpectRecurrentStateRefused(PrefixCache& cache, Namespace ns,
                                 std::vector<int64_t> state) {
  ExpectSpoiltTipRefused(cache, ns, testing::ArraysLayer, [&](LayerState& l) {
    l.tensors[1] = Tensor::Filled(DType::kFloat32, state, 1);
  });
}

// A real window or recurrent state holds the tokens it has seen: one without
// tensors was taken, made the real tip (stripping the one before it), and
// restored as a state of no shape.
TEST_F(PrefixCacheRestoreTest, StoreRefusesAWindowOrRecurrentStateWithoutTensors) {
  auto clear = [](LayerState& l) { l.tensors.clear(); };
  ExpectSpoiltTipRefused(
      tiers_->cache(), Register(HybridSpec()), [](int64_t n) { return RotatingLayer(n); },
      clear);
  ExpectSpoiltTipRefused(tiers_->cache(), Register(RecurrentSpec()), testing::ArraysLayer,
                         clear);
}

// The spec's layer shapes name the recurrent state's shape: a state of
// another was taken as the real tip, and restored in the spec's name.
TEST_F(PrefixCacheRestoreTest, StoreRefusesTipStateOfAnotherShapeThanTheSpecs) {
  ExpectRecurrentStateRefused(tiers_->cache(), Register(ShapedRecurrentSpec()),
                              {4, 6, 6});
}

// Each head's recurrent state is state_dim x state_dim (LayerShape): a state
// whose last dimension differs was taken (only the heads and the first
// state_dim were compared), so the store was acknowledged and a restore handed
// back a 4 x 8 x 6 state in the name of a spec whose state is 4 x 8 x 8.
TEST_F(PrefixCacheRestoreTest, StoreRefusesARecurrentStateOfAnotherLastDimension) {
  ExpectRecurrentStateRefused(tiers_->cache(), Register(ShapedRecurrentSpec()),
                              {4, 8, 6});
}

// The spec's layer shapes name every full-attention layer's KV heads and head
// dim too: KV of other heads or another head dim was acknowledged (only a
// window or recurrent state was compared), the right KV stored after it was
// deduplicated against it, and every restore handed back the other KV in the
// spec's name. A quantized layer packs its head dim: only its heads are
// compared (StoreRefusesQuantizedKvOfOtherHeadsThanTheSpecs).
TEST_F(PrefixCacheRestoreTest, StoreRefusesFullAttentionKvOfAnotherShapeThanTheSpecs) {
  const Namespace ns = Register(KvAndQuantizedSpec());
  const int64_t n = 2 * kBlockTokens;
  const LayerState packed = PackedKvLayer(n, 2);
  for (const std::vector<int64_t>& other :
       {std::vector<int64_t>{1, 1, n, 8}, std::vector<int64_t>{1, 2, n, 4}}) {
    LayerState kv = KvLayer(n);
    for (Tensor& t : kv.tensors) t = Tensor::Filled(DType::kFloat32, other, 1);
    EXPECT_TRUE(
        tiers_->cache().Store(ns, Tokens(2), {kv, packed}).status().IsInvalidArgument())
        << kv.tensors[0].DebugString();
    EXPECT_TRUE(tiers_->cache().Match(ns, Tokens(2))->keys.empty())
        << "the store of " << kv.tensors[0].DebugString() << " wrote";
  }
  const std::vector<LayerState> right = {KvLayer(n, &rng_), packed};
  ASSERT_OK(tiers_->cache().Store(ns, Tokens(2), right));
  const RestoreResult r = MatchAndRestore(ns, Tokens(2));
  ASSERT_EQ(r.restored_tokens, static_cast<uint64_t>(n)) << r.reason;
  EXPECT_EQ(r.layers[0].tensors, right[0].tensors);
  EXPECT_EQ(r.layers[1].tensors, packed.tensors);
}

// A quantized layer packs its head dim (words, scales) by bits and group,
// which a LayerShape does not describe, but not its heads: packed KV of other
// heads than the spec's was acknowledged and restored in the spec's name.
TEST_F(PrefixCacheRestoreTest, StoreRefusesQuantizedKvOfOtherHeadsThanTheSpecs) {
  const Namespace ns = Register(KvAndQuantizedSpec());
  const int64_t n = 2 * kBlockTokens;
  const StatusOr<StoreResult> refused =
      tiers_->cache().Store(ns, Tokens(2), {KvLayer(n, &rng_), PackedKvLayer(n, 1)});
  EXPECT_TRUE(refused.status().IsInvalidArgument()) << refused.status().ToString();
  EXPECT_TRUE(tiers_->cache().Match(ns, Tokens(2))->keys.empty()) << "the store wrote";
  const std::vector<LayerState> right = {KvLayer(n, &rng_), PackedKvLayer(n, 2)};
  ASSERT_OK(tiers_->cache().Store(ns, Tokens(2), right));
  const RestoreResult r = MatchAndRestore(ns, Tokens(2));
  ASSERT_EQ(r.restored_tokens, static_cast<uint64_t>(n)) << r.reason;
  EXPECT_EQ(r.layers[1].tensors, right[1].tensors);
}

// The spec's shapes name the keys' heads and head dim; the values may have
// another head dim (a latent cache's) but are the same heads: values of other
// heads were acknowledged and restored in the spec's name.
TEST_F(PrefixCacheRestoreTest, StoreRefusesValuesOfOtherHeadsThanTheKeys) {
  NamespaceSpec spec = KvOnlySpec();
  spec.layer_shapes = ParseLayerShapes("2x8,2x8").value();
  const Namespace ns = Register(spec);
  const int64_t n = 2 * kBlockTokens;
  LayerState one_head_values = KvLayer(n, &rng_);
  one_head_values.tensors[1] = testing::RandomTensor(rng_, DType::kFloat32, {1, 1, n, 8});
  const StatusOr<StoreResult> refused =
      tiers_->cache().Store(ns, Tokens(2), {KvLayer(n, &rng_), one_head_values});
  EXPECT_TRUE(refused.status().IsInvalidArgument()) << refused.status().ToString();
  EXPECT_TRUE(tiers_->cache().Match(ns, Tokens(2))->keys.empty()) << "the store wrote";
  LayerState narrow_values = KvLayer(n, &rng_);
  narrow_values.tensors[1] = testing::RandomTensor(rng_, DType::kFloat32, {1, 2, n, 4});
  const std::vector<LayerState> latent = {KvLayer(n, &rng_), narrow_values};
  ASSERT_OK(tiers_->cache().Store(ns, Tokens(2), latent));
  const RestoreResult r = MatchAndRestore(ns, Tokens(2));
  ASSERT_EQ(r.restored_tokens, static_cast<uint64_t>(n)) << r.reason;
  EXPECT_EQ(r.layers, latent);
}

// KV of other heads than the spec's already in the tiers (stored before Store
// compared it, by an older binary, or fetched from a node of one through the
// remote tier; here written behind the store's back) is refused by a restore
// as a store refuses it, and dropped, so the right store of those tokens
// writes its blocks instead of deduplicating against them.
TEST_F(PrefixCacheRestoreTest, ARestoreRefusesFullAttentionKvOfAnotherShapeThanTheSpecs) {
  NamespaceSpec spec = KvOnlySpec();
  spec.layer_shapes = ParseLayerShapes("2x8,2x8").value();
  const Namespace ns = Register(spec);
  const std::vector<int32_t> tokens = Tokens(2);
  const int64_t n = static_cast<int64_t>(tokens.size());
  const std::vector<BlockKey> keys = ChainKeys(ns.root, tokens, kBlockTokens);
  auto store_one_head_kv = [&] {
    ASSERT_OK(tiers_->cache().Store(ns, tokens, testing::KvOnlyLayers(n)));
    for (size_t i = 0; i < keys.size(); ++i) {
      BlockRecord one_head = testing::ReadBlock(*tiers_->hot, keys[i]);
      for (LayerState& layer : one_head.layers) {
        for (Tensor& t : layer.tensors)
          t = Tensor::Filled(DType::kFloat32, {1, 1, kBlockTokens, 8}, 1);
      }
      ASSERT_OK(tiers_->stack->Rewrite({keys[i], one_head.parent, ns.root, 0},
                                       EncodeBlock(one_head).value()));
    }
  };
  store_one_head_kv();
  const RestoreResult refused = MatchAndRestore(ns, tokens);
  EXPECT_EQ(refused.restored_tokens, 0u) << "1x8 KV served under 2x8 shapes";
  EXPECT_NE(refused.reason.find("holds 1x8, not 2x8"), std::string::npos)
      << refused.reason;
  EXPECT_TRUE(tiers_->cache().Match(ns, tokens)->keys.empty()) << "not dropped";
  store_one_head_kv();
  ASSERT_OK_AND_ASSIGN(MatchResult m, tiers_->cache().Match(ns, tokens));
  ASSERT_OK_AND_ASSIGN(RestorePlan plan, tiers_->engine->PlanRestore(m));
  EXPECT_EQ(plan.result.restored_tokens, 0u) << "1x8 KV planned under 2x8 shapes";

  const std::vector<LayerState> right = {KvLayer(n, &rng_), KvLayer(n, &rng_)};
  ASSERT_OK_AND_ASSIGN(StoreResult stored, tiers_->cache().Store(ns, tokens, right));
  EXPECT_EQ(stored.blocks_deduplicated, 0u) << "kept the refused blocks";
  const RestoreResult r = MatchAndRestore(ns, tokens);
  ASSERT_EQ(r.restored_tokens, static_cast<uint64_t>(n)) << r.reason;
  EXPECT_EQ(r.layers, right);
}

// The spec's dtype is the attention cache's: frameworks keep a recurrent state
// in float32 under a bfloat16 model, so an arrays layer keeps its own dtype,
// stored and handed back as it is (never as the spec's).
TEST_F(PrefixCacheRestoreTest, ARecurrentStateKeepsItsOwnDtype) {
  NamespaceSpec spec = RecurrentSpec();
  spec.dtype = DType::kBFloat16;
  const Namespace ns = Register(spec);
  const int64_t n = 2 * kBlockTokens;
  LayerState kv = KvLayer(n, &rng_);
  for (Tensor& t : kv.tensors)
    t = testing::RandomTensor(rng_, DType::kBFloat16, t.shape());
  LayerState state = testing::ArraysLayer(n);
  state.tensors[1] = testing::RandomTensor(rng_, DType::kFloat32, {4, 8, 8});
  ASSERT_OK(tiers_->cache().Store(ns, Tokens(2), {kv, state}));
  const RestoreResult r = MatchAndRestore(ns, Tokens(2));
  ASSERT_EQ(r.restored_tokens, static_cast<uint64_t>(n)) << r.reason;
  EXPECT_EQ(r.layers[0].tensors, kv.tensors);
  EXPECT_EQ(r.layers[1].tensors, state.tensors);
}

TEST_F(PrefixCacheRestoreTest, WalkBackDropsTrailingPlaceholderBlocks) {
  Namespace ns = Register(HybridSpec());
  ASSERT_OK(tiers_->cache().Store(ns, Tokens(2), testing::HybridLayers(8)));
  // Four more blocks whose tokens end mid-block: no tip state is stored, so
  // blocks 3 and 4 carry placeholders only.
  std::vector<int32_t> longer = Tokens(5);
  longer.resize(4 * kBlockTokens + 2);
  StatusOr<StoreResult> s = tiers_->cache().Store(ns, longer, testing::HybridLayers(18));
  ASSERT_OK(s);
  EXPECT_FALSE(s->tip_state_stored);
  EXPECT_FALSE(s->note.empty());

  RestoreResult r = MatchAndRestore(ns, Tokens(4));
  EXPECT_EQ(r.restored_blocks, 2u);
  EXPECT_EQ(r.restored_tokens, 2 * kBlockTokens);
  EXPECT_NE(r.reason.find("walk-back dropped 2"), std::string::npos) << r.reason;
  ASSERT_EQ(r.layers.size(), 2u);
  EXPECT_EQ(r.layers[0].tensors[0].dim(2), 2 * kBlockTokens);
  EXPECT_EQ(RotatingMeta::Parse(r.layers[1].meta)->offset, 2 * kBlockTokens);
}

TEST_F(PrefixCacheRestoreTest, MatchWithoutAnyRealTipRestoresNothing) {
  Namespace ns = Register(HybridSpec());
  std::vector<int32_t> tokens = Tokens(3);
  tokens.push_back(7);
  ASSERT_OK(tiers_->cache().Store(ns, tokens, testing::HybridLayers(13)));
  RestoreResult r = MatchAndRestore(ns, tokens);
  EXPECT_EQ(r.restored_tokens, 0u);
  EXPECT_TRUE(r.layers.empty());
  EXPECT_NE(r.reason.find("no matched block carries real"), std::string::npos)
      << r.reason;
}

TEST_F(PrefixCacheRestoreTest, ExistingInteriorBlockBecomesARealTip) {
  Namespace ns = Register(HybridSpec());
  ASSERT_OK(tiers_->cache().Store(ns, Tokens(4), testing::HybridLayers(16)));
  // Block 2 exists as a placeholder interior block; a store ending there must
  // give it the real state or a restore of those 8 tokens would find nothing.
  StatusOr<StoreResult> s =
      tiers_->cache().Store(ns, Tokens(2), testing::HybridLayers(8));
  ASSERT_OK(s);
  EXPECT_TRUE(s->tip_rewritten);
  EXPECT_EQ(MatchAndRestore(ns, Tokens(2)).restored_tokens, 2 * kBlockTokens);
  std::vector<AuditFinding> findings;
  ASSERT_OK(tiers_->budget->Audit(&findings));
  EXPECT_TRUE(findings.empty());
}

TEST_F(PrefixCacheRestoreTest, BlockThatDoesNotFitTheLayoutEndsTheRestore) {
  Namespace ns = Register(KvOnlySpec());
  const std::vector<int32_t> tokens = Tokens(3);
  ASSERT_OK(tiers_->cache().Store(ns, tokens, testing::KvOnlyLayers(12)));
  // Overwrite block 1 with a record missing a layer, under its real key.
  const std::vector<BlockKey> keys = ChainKeys(ns.root, tokens, kBlockTokens);
  BlockRecord bad;
  bad.key = keys[1];
  bad.parent = keys[0];
  bad.namespace_id = ns.root;
  bad.token_count = kBlockTokens;
  bad.layers = {KvLayer(kBlockTokens)};
  ASSERT_OK(
      tiers_->stack->Rewrite({keys[1], keys[0], ns.root, 0}, EncodeBlock(bad).value()));

  RestoreResult r = MatchAndRestore(ns, tokens);
  EXPECT_EQ(r.restored_tokens, kBlockTokens);
  EXPECT_NE(r.reason.find("block 1"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("layers"), std::string::npos) << r.reason;
}

TEST_F(PrefixCacheRestoreTest, BlockWithOtherTokensIsNeverServed) {
  Namespace ns = Register(KvOnlySpec());
  const std::vector<int32_t> tokens = Tokens(2);
  ASSERT_OK(tiers_->cache().Store(ns, tokens, testing::KvOnlyLayers(8)));
  const std::vector<BlockKey> keys = ChainKeys(ns.root, tokens, kBlockTokens);
  // What a hash collision would look like: the right key, other tokens.
  BlockRecord rec = testing::ReadBlock(*tiers_->hot, keys[0]);
  rec.tokens[0] = 12345;
  ASSERT_OK(
      tiers_->stack->Rewrite({keys[0], ns.root, ns.root, 0}, EncodeBlock(rec).value()));
  RestoreResult r = MatchAndRestore(ns, tokens);
  EXPECT_EQ(r.restored_tokens, 0u);
  EXPECT_NE(r.reason.find("tokens differ"), std::string::npos) << r.reason;
}

TEST_F(PrefixCacheRestoreTest, PrefillReadyRotatingNameReconstructsWithRotatingHandler) {
  // One block stored with a PrefillReadyRotatingKVCache layer must come back
  // through the strict rotating path: window and offset from its meta.
  Namespace ns = Register(HybridSpec("PrefillReadyRotatingKVCache"));
  ASSERT_OK(tiers_->cache().Store(
      ns, Tokens(1),
      {KvLayer(kBlockTokens),
       RotatingLayer(kBlockTokens, "PrefillReadyRotatingKVCache")}));
  RestoreResult r = MatchAndRestore(ns, Tokens(1));
  ASSERT_EQ(r.layers.size(), 2u);
  EXPECT_EQ(r.layers[1].cache_type, "PrefillReadyRotatingKVCache");
  StatusOr<RotatingMeta> meta = RotatingMeta::Parse(r.layers[1].meta);
  ASSERT_OK(meta);
  EXPECT_EQ(meta->max_size, kWindow);
  EXPECT_EQ(meta->offset, kBlockTokens);
  EXPECT_EQ(meta->offset, static_cast<int64_t>(r.restored_tokens));
  // The window of a real restore comes from the tip's meta, found by family.
  EXPECT_EQ(r.window.max_window_tokens, kWindow);
  EXPECT_EQ(r.window.window_tokens, (std::vector<int64_t>{0, kWindow}));

  // The strict path checks it: a tip whose offset is not its end is refused on
  // store and, written behind the cache's back, on restore (an exact-name check
  // for "RotatingKVCache" would skip both checks for this name).
  for (const std::string type : {"PrefillReadyRotatingKVCache", "BufferedRotatingKVCache",
                                 "BatchRotatingKVCache"}) {
    LayerState wrong = RotatingLayer(kBlockTokens, type);
    wrong.meta = RotatingMeta{0, kWindow, kBlockTokens + 1, kWindow}.ToStrings();
    EXPECT_TRUE(tiers_->cache()
                    .Store(ns, Tokens(2), {KvLayer(2 * kBlockTokens), wrong})
                    .status()
                    .IsInvalidArgument())
        << type;
    const BlockKey tip = ChainKeys(ns.root, Tokens(1), kBlockTokens)[0];
    BlockRecord rec = testing::ReadBlock(*tiers_->hot, tip);
    rec.layers[1].cache_type = type;
    rec.layers[1].meta = wrong.meta;
    ASSERT_OK(
        tiers_->stack->Rewrite({tip, ns.root, ns.root, 0}, EncodeBlock(rec).value()));
    RestoreResult refused = MatchAndRestore(ns, Tokens(1));
    EXPECT_EQ(refused.restored_tokens, 0u) << type;
    EXPECT_NE(refused.reason.find("rotating offset"), std::string::npos)
        << type << ": " << refused.reason;
  }
}

TEST(PrefixCacheWindow, PrefillReadyRotatingNameDetectsWindowPadding) {
  // Block metadata only (no tensors): the layer types and meta states.
  LayerState kv;
  kv.cache_type = "KVCache";
  kv.meta = {std::to_string(kBlockTokens)};
  LayerState rotating;
  rotating.cache_type = "PrefillReadyRotatingKVCache";
  rotating.meta = {"0", std::to_string(kWindow), std::to_string(kBlockTokens),
                   std::to_string(kWindow)};
  WindowPadding w = PrefixCache::DetectWindowPadding({kv, rotating});
  EXPECT_TRUE(w.has_rotating_layers());
  EXPECT_EQ(w.max_window_tokens, kWindow);
  EXPECT_EQ(w.window_tokens, (std::vector<int64_t>{0, kWindow}));

  EXPECT_FALSE(PrefixCache::DetectWindowPadding({kv, kv}).has_rotating_layers());
  // A placeholder carries no window.
  EXPECT_FALSE(PrefixCache::DetectWindowPadding({kv, MakePlaceholder("RotatingKVCache")})
                   .has_rotating_layers());
}

}  // namespace
}  // namespace prefixkv
