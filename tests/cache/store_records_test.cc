// PrefixCache::StoreRecords (through Engine): block records encoded elsewhere
// (by a client of PKV.PUT) stored as one store, with the same dedup, owner
// charging, tip rewrite and supersede-on-extend as Store, after the checks a
// restore relies on. The records come from a "source" engine's own Store, so
// they are exactly what a correct client sends.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "prefixkv/advanced/hash.h"
#include "prefixkv/advanced/tip_lineage.h"
#include "tests/cache/cache_test_util.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

using testing::HybridLayers;
using testing::HybridSpec;
using testing::kBlockTokens;
using testing::KvOnlyLayers;
using testing::KvOnlySpec;
using testing::RotatingIndex;
using testing::TestTiers;
using testing::Tokens;

// The encoded blocks a store of `tokens` leaves, in chain order (an engine of
// its own, so every tip it stores is real).
std::vector<SharedBytes> SourceBlocks(const NamespaceSpec& spec,
                                      const std::vector<int32_t>& tokens,
                                      ModelOptions options = {}) {
  TestTiers source(64 << 20, "");
  StatusOr<Namespace> ns = source.Register(spec, options);
  EXPECT_OK(ns);
  const int64_t n = static_cast<int64_t>(tokens.size());
  const bool kv_only = spec.layer_types == KvOnlySpec().layer_types;
  EXPECT_OK(
      source.engine->Store(*ns, tokens, kv_only ? KvOnlyLayers(n) : HybridLayers(n)));
  StatusOr<MatchResult> m = source.engine->Match(*ns, tokens);
  EXPECT_OK(m);
  std::vector<SharedBytes> out;
  for (const BlockKey& key : m->keys)
    out.push_back(source.engine->GetBlock(*ns, key).value());
  return out;
}

std::vector<int32_t> TokensPlus(size_t blocks, size_t extra) {
  std::vector<int32_t> t = Tokens(blocks);
  for (size_t i = 0; i < extra; ++i) t.push_back(static_cast<int32_t>(t.size()));
  return t;
}

BlockRecord Decode(const SharedBytes& b) { return DecodeBlock(b).value(); }
SharedBytes Encode(const BlockRecord& r) { return EncodeBlock(r).value(); }
BlockKey KeyOf(const SharedBytes& b) { return PeekBlockIdentity(b.view()).value().key; }
bool RealRotating(const SharedBytes& b) {
  BlockRecord rec = Decode(b);
  return !rec.layers[RotatingIndex(rec)].placeholder;
}

class StoreRecordsTest : public ::testing::Test {
 protected:
  void Use(const NamespaceSpec& spec, ModelOptions options = {}) {
    ASSERT_OK_AND_ASSIGN(ns_, tiers_.Register(spec, options));
  }
  StatusOr<StoreResult> Put(std::vector<SharedBytes> records) {
    return tiers_.engine->StoreRecords(ns_, records);
  }
  size_t Matched(const std::vector<int32_t>& tokens) {
    return tiers_.engine->Match(ns_, tokens).value().keys.size();
  }
  // The error of a rejected store, which must have written nothing.
  std::string Rejection(std::vector<SharedBytes> records) {
    const uint64_t entries = tiers_.engine->Stats().hot.entries;
    StatusOr<StoreResult> r = Put(std::move(records));
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(tiers_.engine->Stats().hot.entries, entries) << "a rejected store wrote";
    return r.status().ToString();
  }

  // KvOnlySpec with the layer shapes of the blocks SourceBlocks stores.
  static NamespaceSpec ShapedSpec() {
    NamespaceSpec spec = KvOnlySpec();
    spec.layer_shapes = ParseLayerShapes("2x8,2x8").value();
    return spec;
  }
  // `block` with every tensor of 1 KV head (other shapes than ShapedSpec's),
  // and its meta in this namespace.
  std::pair<BlockMeta, SharedBytes> OneHeadCopy(const SharedBytes& block) const {
    BlockRecord rec = Decode(block);
    for (LayerState& l : rec.layers) {
      for (Tensor& t : l.tensors)
        t = Tensor::Filled(DType::kFloat32, {1, 1, kBlockTokens, 8}, 1);
    }
    return {BlockMeta{rec.key, rec.parent, ns_.root, 0}, Encode(rec)};
  }

  TestTiers tiers_{64 << 20, ""};
  Namespace ns_;
};

TEST_F(StoreRecordsTest, TheRecordsOfAStoreRestoreExactlyLikeTheStoreItself) {
  Use(HybridSpec());
  const std::vector<int32_t> tokens = Tokens(3);
  ASSERT_OK_AND_ASSIGN(StoreResult r, Put(SourceBlocks(HybridSpec(), tokens)));
  EXPECT_EQ(r.blocks, 3u);
  EXPECT_EQ(r.blocks_written, 3u);
  EXPECT_TRUE(r.tip_state_stored);
  ASSERT_OK_AND_ASSIGN(MatchResult m, tiers_.engine->Match(ns_, tokens));
  ASSERT_OK_AND_ASSIGN(RestoreResult restored, tiers_.engine->Restore(m));
  EXPECT_EQ(restored.restored_tokens, tokens.size()) << restored.reason;
  EXPECT_EQ(restored.layers[0].tensors[0].shape(), (std::vector<int64_t>{1, 2, 12, 8}));
  // Charged to the model's owner like its own stores: three blocks and the
  // lineage record (the lowest tier is RAM here).
  const EngineStats stats = tiers_.engine->Stats();
  ASSERT_EQ(stats.owners.size(), 1u);
  EXPECT_EQ(stats.owners[0].hot.entries, 4u);
  EXPECT_EQ(stats.hot.bytes, stats.owners[0].hot.bytes);
}

TEST_F(StoreRecordsTest, StoringTheSameRecordsAgainWritesNothing) {
  Use(HybridSpec());
  const std::vector<SharedBytes> records = SourceBlocks(HybridSpec(), Tokens(2));
  ASSERT_OK(Put(records));
  ASSERT_OK_AND_ASSIGN(StoreResult again, Put(records));
  EXPECT_EQ(again.blocks_written, 0u);
  EXPECT_EQ(again.blocks_deduplicated, 2u);
}

TEST_F(StoreRecordsTest, AChainMayStartAtACachedBlockWhoseChainReachesTheRoot) {
  Use(HybridSpec());
  const std::vector<int32_t> tokens = Tokens(4);
  const std::vector<SharedBytes> r = SourceBlocks(HybridSpec(), tokens);
  EXPECT_NE(Rejection({r[3]}).find("parent"), std::string::npos);  // block 2 not cached
  ASSERT_OK(Put({r[0], r[1]}));  // a placeholder tip: no tip state, still a chain
  // The rotating offset of the tip is checked at its real position (16),
  // found by walking the cached blocks up to the root.
  ASSERT_OK_AND_ASSIGN(StoreResult s, Put({r[2], r[3]}));
  EXPECT_TRUE(s.tip_state_stored);
  EXPECT_EQ(Matched(tokens), 4u);
  ASSERT_OK_AND_ASSIGN(MatchResult m, tiers_.engine->Match(ns_, tokens));
  EXPECT_EQ(tiers_.engine->Restore(m)->restored_tokens, 16u);
}

TEST_F(StoreRecordsTest, ThreeChainedStoresStripTheGrandparentTip) {
  Use(HybridSpec());
  // Three turns of one conversation, each a real tip from its own store.
  const SharedBytes t1 = SourceBlocks(HybridSpec(), Tokens(1))[0];
  const SharedBytes t2 = SourceBlocks(HybridSpec(), Tokens(2))[1];
  const SharedBytes t3 = SourceBlocks(HybridSpec(), Tokens(3))[2];
  ASSERT_OK(Put({t1}));
  ASSERT_OK_AND_ASSIGN(StoreResult second, Put({t2}));
  EXPECT_TRUE(second.stripped_tip.IsZero());
  ASSERT_OK_AND_ASSIGN(StoreResult third, Put({t3}));
  EXPECT_EQ(third.stripped_tip, KeyOf(t1));
  EXPECT_FALSE(RealRotating(tiers_.engine->GetBlock(ns_, KeyOf(t1)).value()));
  EXPECT_TRUE(RealRotating(tiers_.engine->GetBlock(ns_, KeyOf(t2)).value()));
  EXPECT_TRUE(RealRotating(tiers_.engine->GetBlock(ns_, KeyOf(t3)).value()));
  ASSERT_OK_AND_ASSIGN(auto tips, tiers_.engine->RecordedTips(ns_));
  ASSERT_EQ(tips.size(), 2u);
  EXPECT_EQ(tips[1], std::make_pair(KeyOf(t3), KeyOf(t2)));
}

TEST_F(StoreRecordsTest, APartialTipInsideTheCachedAncestorsIsThePreviousTip) {
  Use(HybridSpec(), {.store_partial_tail = true});
  const ModelOptions partial{.store_partial_tail = true};
  // Turn 1 ends two tokens into block 1: its tip is a partial block.
  const std::vector<SharedBytes> turn1 =
      SourceBlocks(HybridSpec(), TokensPlus(1, 2), partial);
  ASSERT_OK(Put(turn1));
  // Blocks 1 and 2 arrive without tip state; turn 2's tip hangs off block 2,
  // so turn 1's tip lies inside the cached ancestors, not the records.
  const std::vector<SharedBytes> longer =
      SourceBlocks(HybridSpec(), TokensPlus(3, 1), partial);
  ASSERT_OK(Put({longer[1], longer[2]}));
  const std::vector<SharedBytes> turn2 =
      SourceBlocks(HybridSpec(), TokensPlus(4, 3), partial);
  ASSERT_OK(Put({turn2[3], turn2[4]}));
  ASSERT_OK_AND_ASSIGN(auto tips, tiers_.engine->RecordedTips(ns_));
  ASSERT_EQ(tips.size(), 2u);
  EXPECT_EQ(tips[1], std::make_pair(KeyOf(turn2[4]), KeyOf(turn1[1])));
}

// A partial tail is always its chain's last block: Match takes it and looks
// no further, so a block hanging off one is never matched. PKV.PUT took such
// a chain (its parent links reach the root), acknowledged a store no restore
// could reach, and made the partial tail the previous tip of its real tip,
// stripping the tip before that one (the conversation's walk-back fallback).
TEST_F(StoreRecordsTest, AChainNeverHangsOffAPartialTail) {
  Use(HybridSpec(), {.store_partial_tail = true});
  const SharedBytes t0 = SourceBlocks(HybridSpec(), Tokens(1))[0];
  ASSERT_OK(Put({t0}));
  const std::vector<SharedBytes> turn1 =
      SourceBlocks(HybridSpec(), TokensPlus(1, 2), {.store_partial_tail = true});
  ASSERT_OK(Put(turn1));  // block 0 and a partial tip of tokens 4..5
  // A full block of tokens 6..9 after that tip, with the rotating offset the
  // walk of its parent links puts it at (two blocks before it: 12).
  BlockRecord rec = Decode(SourceBlocks(HybridSpec(), Tokens(3))[2]);
  rec.parent = KeyOf(turn1[1]);
  rec.tokens = {6, 7, 8, 9};
  rec.key = ChainKey(rec.parent, rec.tokens);
  EXPECT_NE(Rejection({Encode(rec)}).find("partial"), std::string::npos);
  EXPECT_TRUE(RealRotating(tiers_.engine->GetBlock(ns_, KeyOf(t0)).value()))
      << "the tip before the partial one was stripped";
}

// A restore compares every block's shapes with the chain's first block, so
// a record extending cached blocks is checked against that block, not only
// against the first record: PKV.PUT took a next turn of other shapes,
// acknowledged it, and every restore of the conversation ended before it
// (and a later, right store of it was deduplicated against it).
TEST_F(StoreRecordsTest, ARecordExtendingCachedBlocksHasTheChainsShapes) {
  Use(KvOnlySpec());
  const std::vector<SharedBytes> r = SourceBlocks(KvOnlySpec(), Tokens(2));
  ASSERT_OK(Put({r[0]}));
  BlockRecord wider = Decode(r[1]);
  for (LayerState& l : wider.layers) {
    for (Tensor& t : l.tensors) t = Tensor::Filled(DType::kFloat32, {1, 4, 4, 8}, 1);
  }
  EXPECT_NE(Rejection({Encode(wider)}).find("first block"), std::string::npos);
  ASSERT_OK(Put({r[1]}));
  ASSERT_OK_AND_ASSIGN(MatchResult m, tiers_.engine->Match(ns_, Tokens(2)));
  ASSERT_OK_AND_ASSIGN(RestoreResult restored, tiers_.engine->Restore(m));
  EXPECT_EQ(restored.restored_tokens, 2 * kBlockTokens) << restored.reason;
}

TEST_F(StoreRecordsTest, RejectsRecordsOfAnotherNamespace) {
  Use(HybridSpec());
  EXPECT_NE(Rejection(SourceBlocks(KvOnlySpec(), Tokens(1))).find("namespace"),
            std::string::npos);
}

TEST_F(StoreRecordsTest, RejectsADamagedRecord) {
  Use(HybridSpec());
  std::string bytes(SourceBlocks(HybridSpec(), Tokens(1))[0].view());
  bytes[bytes.size() - 3] ^= 0x10;
  EXPECT_EQ(Rejection({SharedBytes::Copy(bytes)}).rfind("Corruption: record 0", 0), 0u);
}

TEST_F(StoreRecordsTest, RejectsARecordThatDoesNotFitTheLayout) {
  Use(HybridSpec());
  BlockRecord rec = Decode(SourceBlocks(HybridSpec(), Tokens(1))[0]);
  rec.layers.pop_back();
  EXPECT_NE(Rejection({Encode(rec)}).find("layout"), std::string::npos);
  rec = Decode(SourceBlocks(HybridSpec(), Tokens(1))[0]);
  rec.layers[0].tensors[0] = Tensor::Filled(DType::kFloat16, {1, 2, 4, 8}, 1);
  EXPECT_NE(Rejection({Encode(rec)}).find("dtype"), std::string::npos);
}

// A restore checks a tip's window against no first block, so its records
// must fit as Store's layers do: a real window without tensors, or one of
// other shapes than the spec names, was taken as the real tip.
TEST_F(StoreRecordsTest, RejectsATipWindowWithoutTensorsOrOfAnotherShape) {
  NamespaceSpec spec = HybridSpec();
  spec.layer_shapes = {{.kv_heads = 2, .head_dim = 8},
                       {.kv_heads = 2, .head_dim = 8, .window_tokens = testing::kWindow}};
  Use(spec);
  const std::vector<SharedBytes> source = SourceBlocks(spec, Tokens(1));
  BlockRecord rec = Decode(source[0]);
  rec.layers[RotatingIndex(rec)].tensors.clear();
  EXPECT_NE(Rejection({Encode(rec)}).find("without tensors"), std::string::npos);
  rec = Decode(source[0]);
  for (Tensor& t : rec.layers[RotatingIndex(rec)].tensors)
    t = Tensor::Filled(DType::kFloat32, {1, 2, testing::kWindow, 6}, 1);
  EXPECT_NE(Rejection({Encode(rec)}).find("layer shapes"), std::string::npos);
  ASSERT_OK(Put(source));
}

// A restore checks plain KV against the chain's first block only: a first
// record of other KV heads than the spec names was taken, and the right
// records sent after it were deduplicated against it.
TEST_F(StoreRecordsTest, RejectsFullAttentionKvOfAnotherShape) {
  NamespaceSpec spec = KvOnlySpec();
  spec.layer_shapes = ParseLayerShapes("2x8,2x8").value();
  Use(spec);
  const std::vector<SharedBytes> source = SourceBlocks(spec, Tokens(1));
  BlockRecord rec = Decode(source[0]);
  for (Tensor& t : rec.layers[1].tensors)
    t = Tensor::Filled(DType::kFloat32, {1, 1, kBlockTokens, 8}, 1);
  EXPECT_NE(Rejection({Encode(rec)}).find("layer 1 holds 1x8, not 2x8"),
            std::string::npos);
  ASSERT_OK(Put(source));
  EXPECT_EQ(Matched(Tokens(1)), 1u);
}

// Blocks of other KV heads than the spec's already cached (stored by an older
// binary, or fetched from a node of one; here written behind the store's
// back) never win against the right records of their tokens: records sent
// after them (a client sends what PKV.MATCH did not find) were refused for
// not matching them, and records sent whole were deduplicated against them,
// acknowledged, and every restore refused the chain, so the tokens stayed
// unusable until the wrong blocks were evicted.
TEST_F(StoreRecordsTest, TheRightRecordsWinOverCachedBlocksOfOtherShapes) {
  const NamespaceSpec spec = ShapedSpec();
  Use(spec);
  const std::vector<int32_t> tokens = Tokens(3);
  const std::vector<SharedBytes> source = SourceBlocks(spec, tokens);
  auto cache_one_head_blocks = [&] {  // blocks 0 and 1, of 1 head
    for (size_t i = 0; i < 2; ++i) {
      const auto [meta, bytes] = OneHeadCopy(source[i]);
      ASSERT_OK(tiers_.stack->Contains(meta.key) ? tiers_.stack->Rewrite(meta, bytes)
                                                 : tiers_.stack->Put(meta, bytes));
    }
  };
  auto expect_the_right_kv_restored = [&] {
    ASSERT_OK_AND_ASSIGN(MatchResult m, tiers_.engine->Match(ns_, tokens));
    ASSERT_OK_AND_ASSIGN(RestoreResult r, tiers_.engine->Restore(m));
    ASSERT_EQ(r.restored_tokens, tokens.size()) << r.reason;
    EXPECT_EQ(r.layers[0].tensors[0].shape(), (std::vector<int64_t>{1, 2, 12, 8}));
  };
  ASSERT_NO_FATAL_FAILURE(cache_one_head_blocks());
  ASSERT_EQ(Matched(tokens), 2u);
  // Extending them: refused (the chain's right head is not in the records),
  // and the wrong blocks removed, so the client's next store sends them all.
  const StatusOr<StoreResult> after = Put({source[2]});
  ASSERT_FALSE(after.ok());
  EXPECT_NE(after.status().message().find("layer 0 holds 1x8, not 2x8"),
            std::string::npos)
      << after.status().ToString();
  EXPECT_EQ(Matched(tokens), 0u) << "the blocks of other shapes stayed";
  ASSERT_OK(Put(source));
  ASSERT_NO_FATAL_FAILURE(expect_the_right_kv_restored());
  // Sent whole: the right records replace them.
  ASSERT_NO_FATAL_FAILURE(cache_one_head_blocks());
  ASSERT_OK_AND_ASSIGN(StoreResult whole, Put(source));
  EXPECT_EQ(whole.blocks_written, 2u);
  EXPECT_EQ(whole.blocks_deduplicated, 1u);
  ASSERT_NO_FATAL_FAILURE(expect_the_right_kv_restored());
}

// A store remembers the cached blocks it found of the spec's shapes, so it
// does not read them again on every store; other bytes arriving under such a
// key afterwards (a remote copy promoted after an eviction, a replacement in
// place, a removal and a new Put) are still found and replaced by the next
// store, which then restores. A memo that never forgot deduplicated against
// them: the store was acknowledged and the restore refused the chain.
TEST_F(StoreRecordsTest, ABlockOfOtherShapesCachedAfterAStoreCheckedItIsStillReplaced) {
  Use(ShapedSpec());
  const std::vector<int32_t> tokens = Tokens(3);
  const std::vector<SharedBytes> source = SourceBlocks(ShapedSpec(), tokens);
  using Arrival = std::function<Status(const BlockMeta&, SharedBytes)>;
  const std::vector<std::pair<std::string, Arrival>> arrivals = {
      {"a remote copy promoted after a removal",
       [&](const BlockMeta& m, SharedBytes b) {
         PKV_RETURN_IF_ERROR(tiers_.stack->Remove(m.key));
         return tiers_.stack->Promote(m, std::move(b));
       }},
      {"replaced in place",
       [&](const BlockMeta& m, SharedBytes b) {
         return tiers_.stack->Rewrite(m, std::move(b));
       }},
      {"put over it",
       [&](const BlockMeta& m, SharedBytes b) {
         return tiers_.stack->Put(m, std::move(b));
       }},
  };
  ASSERT_OK(Put(source));
  for (const auto& [how, arrive] : arrivals) {
    for (size_t i : {size_t{0}, size_t{1}}) {
      SCOPED_TRACE(how + ", block " + std::to_string(i));
      // Checked (and remembered) by a store deduplicating the whole chain.
      ASSERT_OK_AND_ASSIGN(StoreResult checked, Put(source));
      ASSERT_EQ(checked.blocks_deduplicated, 3u);
      auto [meta, bytes] = OneHeadCopy(source[i]);
      ASSERT_OK(arrive(meta, bytes));
      ASSERT_OK_AND_ASSIGN(StoreResult again, Put(source));
      EXPECT_EQ(again.blocks_written, 1u) << "deduplicated against the block of 1 head";
      ASSERT_OK_AND_ASSIGN(MatchResult m, tiers_.engine->Match(ns_, tokens));
      ASSERT_OK_AND_ASSIGN(RestoreResult r, tiers_.engine->Restore(m));
      EXPECT_EQ(r.restored_tokens, tokens.size()) << r.reason;
      ASSERT_OK(Put(source));  // rewritten if the restore dropped them
    }
  }
}

// A plain store compares every cached block it would deduplicate against,
// not only the chain's first: a restore drops a middle block of other shapes
// with every block after it, so a store deduplicated against one was
// acknowledged and never restored past it (4 of 12 tokens).
TEST_F(StoreRecordsTest, APlainStoreReplacesACachedMiddleBlockOfOtherShapes) {
  Use(ShapedSpec());
  const std::vector<int32_t> tokens = Tokens(3);
  const int64_t n = static_cast<int64_t>(tokens.size());
  ASSERT_OK(tiers_.engine->Store(ns_, tokens, KvOnlyLayers(n)));
  ASSERT_OK_AND_ASSIGN(MatchResult m, tiers_.engine->Match(ns_, tokens));
  ASSERT_OK_AND_ASSIGN(SharedBytes middle, tiers_.engine->GetBlock(ns_, m.keys[1]));
  const auto [meta, bytes] = OneHeadCopy(middle);
  ASSERT_OK(tiers_.stack->Rewrite(meta, bytes));
  ASSERT_OK_AND_ASSIGN(StoreResult again,
                       tiers_.engine->Store(ns_, tokens, KvOnlyLayers(n)));
  EXPECT_EQ(again.blocks_written, 1u);
  EXPECT_EQ(again.blocks_deduplicated, 2u);
  ASSERT_OK_AND_ASSIGN(MatchResult after, tiers_.engine->Match(ns_, tokens));
  ASSERT_OK_AND_ASSIGN(RestoreResult r, tiers_.engine->Restore(after));
  EXPECT_EQ(r.restored_tokens, tokens.size()) << r.reason;
}

// Records extending cached blocks with a middle one of other shapes (after
// a right first block) were acknowledged, and the restore dropped that block
// with every block after it (4 of 12 tokens restored); they are refused, and
// the blocks from the wrong one on removed, so the client's next PKV.MATCH
// ends before it and its next store sends the rest.
TEST_F(StoreRecordsTest, RecordsExtendingACachedMiddleBlockOfOtherShapesAreRefused) {
  Use(ShapedSpec());
  const std::vector<int32_t> tokens = Tokens(3);
  const std::vector<SharedBytes> source = SourceBlocks(ShapedSpec(), tokens);
  ASSERT_OK(Put({source[0], source[1]}));
  const auto [meta, bytes] = OneHeadCopy(source[1]);
  ASSERT_OK(tiers_.stack->Rewrite(meta, bytes));
  const StatusOr<StoreResult> after = Put({source[2]});
  ASSERT_FALSE(after.ok()) << "acknowledged after a cached block of other shapes";
  EXPECT_NE(after.status().message().find("cached block 1"), std::string::npos)
      << after.status().ToString();
  EXPECT_EQ(Matched(tokens), 1u) << "the block of other shapes stayed";
  ASSERT_OK(Put({source[1], source[2]}));
  ASSERT_OK_AND_ASSIGN(MatchResult m, tiers_.engine->Match(ns_, tokens));
  ASSERT_OK_AND_ASSIGN(RestoreResult r, tiers_.engine->Restore(m));
  EXPECT_EQ(r.restored_tokens, tokens.size()) << r.reason;
}

TEST_F(StoreRecordsTest, RejectsAKeyThatIsNotTheChainHashOfItsTokens) {
  Use(HybridSpec());
  BlockRecord rec = Decode(SourceBlocks(HybridSpec(), Tokens(1))[0]);
  rec.tokens[0] += 1;
  EXPECT_NE(Rejection({Encode(rec)}).find("chain hash"), std::string::npos);
  rec.tokens.clear();
  EXPECT_NE(Rejection({Encode(rec)}).find("token ids"), std::string::npos);
}

TEST_F(StoreRecordsTest, RejectsRecordsThatDoNotFormOneChain) {
  Use(HybridSpec());
  const std::vector<SharedBytes> r = SourceBlocks(HybridSpec(), Tokens(3));
  EXPECT_NE(Rejection({r[0], r[2]}).find("record 1: parent"), std::string::npos);
}

TEST_F(StoreRecordsTest, OnlyTheTipMayCarryRotatingState) {
  Use(HybridSpec());
  const SharedBytes real0 = SourceBlocks(HybridSpec(), Tokens(1))[0];
  const SharedBytes real1 = SourceBlocks(HybridSpec(), Tokens(2))[1];
  EXPECT_NE(Rejection({real0, real1}).find("only the last record"), std::string::npos);
}

TEST_F(StoreRecordsTest, APartialTailNeedsANamespaceThatStoresThem) {
  Use(HybridSpec());  // no partial tails
  const std::vector<SharedBytes> r =
      SourceBlocks(HybridSpec(), TokensPlus(1, 2), {.store_partial_tail = true});
  EXPECT_NE(Rejection(r).find("partial"), std::string::npos);
}

TEST_F(StoreRecordsTest, GetBlockServesOnlyTheNamespacesOwnBlocks) {
  Use(KvOnlySpec());
  const Namespace kv = ns_;
  Use(HybridSpec());
  const SharedBytes block = SourceBlocks(HybridSpec(), Tokens(1))[0];
  ASSERT_OK(Put({block}));
  ASSERT_OK_AND_ASSIGN(SharedBytes got, tiers_.engine->GetBlock(ns_, KeyOf(block)));
  EXPECT_EQ(got.view(), block.view());
  EXPECT_TRUE(tiers_.engine->GetBlock(kv, KeyOf(block)).status().IsNotFound());
  EXPECT_TRUE(tiers_.engine->GetBlock(ns_, TipLineage::RecordKey(ns_.root))
                  .status()
                  .IsNotFound());
  // A key-value entry is stored under XXH3-128("prefixkv/raw/v3|" + name)
  // (src/engine/value_record.cc); it is not a block of any namespace.
  ASSERT_OK(tiers_.engine->PutValue("k", SharedBytes::Copy("v")));
  ASSERT_TRUE(tiers_.engine->ContainsValue("k"));
  HashStream h(HashStream::Width::k128);
  h.Update("prefixkv/raw/v3|k", 17);
  EXPECT_TRUE(tiers_.engine->GetBlock(ns_, h.Digest128()).status().IsNotFound());
  EXPECT_EQ(tiers_.engine->model_count(), 2u);
  EXPECT_EQ(tiers_.engine->ModelSpec(kv)->layer_types, KvOnlySpec().layer_types);
}

}  // namespace
}  // namespace prefixkv
