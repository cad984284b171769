// Tip lineage: branches never record interior blocks as tips, the lineage
// survives a restart, a grandparent that lives only on SSD is stripped there,
// the lineage's reads count no hits, and the persisted record round-trips and
// rejects damage.
#include "prefixkv/advanced/tip_lineage.h"

#include <gtest/gtest.h>

#include "tests/cache/cache_test_util.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

using testing::HybridLayers;
using testing::HybridSpec;
using testing::kBlockTokens;
using testing::kPlaceholderShape;
using testing::kRealRotatingShape;
using testing::RotatingShape;
using testing::TestTiers;
using testing::Tokens;

constexpr uint64_t kHotBytes = 16u << 20;

// Tokens of a conversation that shares the first `shared` blocks with Tokens()
// and then continues with its own tokens up to `num_blocks` blocks.
std::vector<int32_t> Branch(size_t shared, size_t num_blocks) {
  std::vector<int32_t> t = Tokens(num_blocks);
  for (size_t i = shared * kBlockTokens; i < t.size(); ++i) t[i] += 1000;
  return t;
}

BlockKey StoreTokens(PrefixCache& cache, Namespace ns,
                     const std::vector<int32_t>& tokens) {
  StatusOr<StoreResult> r =
      cache.Store(ns, tokens, HybridLayers(static_cast<int64_t>(tokens.size())));
  EXPECT_OK(r);
  return r.ok() ? r->tip : BlockKey{};
}

uint64_t BytesOf(const BlockTier& tier, const BlockKey& key) {
  uint64_t bytes = 0;
  tier.ForEach([&](const BlockMeta& m, uint64_t b) {
    if (m.key == key) bytes = b;
  });
  return bytes;
}

std::vector<BlockKey> RecordedTips(PrefixCache& cache, Namespace ns) {
  std::vector<BlockKey> tips;
  const std::vector<std::pair<BlockKey, BlockKey>> lineage =
      cache.RecordedTips(ns).value();
  for (const auto& [tip, previous] : lineage) tips.push_back(tip);
  return tips;
}

TEST(TipLineage, DivergedStoreDoesNotTrackBranchBlockAsTip) {
  TestTiers tiers(kHotBytes, "");
  PrefixCache& cache = tiers.cache();
  Namespace ns = tiers.Register(HybridSpec()).value();
  const BlockKey a3 = StoreTokens(cache, ns, Tokens(3));
  const std::vector<BlockKey> a = ChainKeys(ns.root, Tokens(3), kBlockTokens);
  // B shares blocks 0-1 (interior placeholders of A) and diverges after them.
  const BlockKey b4 = StoreTokens(cache, ns, Branch(2, 4));

  auto lineage = cache.RecordedTips(ns).value();
  ASSERT_EQ(lineage.size(), 2u);
  EXPECT_EQ(lineage[0], std::make_pair(a3, BlockKey{}));
  // B extends no tip: the shared block it branched off is not one.
  EXPECT_EQ(lineage[1], std::make_pair(b4, BlockKey{}));

  // Two more turns of B strip B's own first tip, never A's blocks.
  const BlockKey b5 = StoreTokens(cache, ns, Branch(2, 5));
  StoreTokens(cache, ns, Branch(2, 6));
  EXPECT_EQ(RotatingShape(*tiers.hot, b4), kPlaceholderShape);
  EXPECT_EQ(RotatingShape(*tiers.hot, b5), kRealRotatingShape);
  EXPECT_EQ(RotatingShape(*tiers.hot, a3), kRealRotatingShape);
  for (const BlockKey& tip : RecordedTips(cache, ns)) {
    EXPECT_NE(tip, a[1]) << "the branch block was recorded as a tip";
  }
}

TEST(TipLineage, StoreBranchingOffThePreviousTipStripsItsGrandparentOnce) {
  TestTiers tiers(kHotBytes, "");
  PrefixCache& cache = tiers.cache();
  Namespace ns = tiers.Register(HybridSpec()).value();
  const BlockKey t1 = StoreTokens(cache, ns, Tokens(1));
  const BlockKey t2 = StoreTokens(cache, ns, Tokens(2));
  // A regenerated answer: a different third block after the same t2.
  StatusOr<StoreResult> r = cache.Store(ns, Branch(2, 3), HybridLayers(12));
  ASSERT_OK(r);
  EXPECT_EQ(r->stripped_tip, t1);
  EXPECT_EQ(RotatingShape(*tiers.hot, t2), kRealRotatingShape);
  // The original continuation extends t2 as well: t1 is already stripped.
  r = cache.Store(ns, Tokens(3), HybridLayers(12));
  EXPECT_TRUE(r->stripped_tip.IsZero());
  EXPECT_EQ(RotatingShape(*tiers.hot, t2), kRealRotatingShape);
}

// The lineage's reads (its record when the model registers; during a store,
// is the cached tip real? strip the grandparent) are the cache's own
// bookkeeping: they count no hit or miss and touch nothing, so the hot tier's
// counters are the users' reads only.
TEST(TipLineage, StoresCountNoHitsForTheirLineageReads) {
  TestTiers tiers(kHotBytes, "");
  PrefixCache& cache = tiers.cache();
  Namespace ns = tiers.Register(HybridSpec()).value();
  StoreTokens(cache, ns, Tokens(1));
  StoreTokens(cache, ns, Tokens(2));
  StatusOr<StoreResult> r = cache.Store(ns, Tokens(3), HybridLayers(12));
  ASSERT_OK(r);
  EXPECT_FALSE(r->stripped_tip.IsZero());  // it read and rewrote the grandparent
  StoreTokens(cache, ns, Tokens(3));       // the same tip again: is it real?
  EXPECT_EQ(tiers.hot->Totals().hits, 0u);
  EXPECT_EQ(tiers.hot->Totals().misses, 0u);
}

TEST(TipLineage, LineageSurvivesRestart) {
  testing::TempDir dir;
  BlockKey tip1, tip2;
  std::vector<std::pair<BlockKey, BlockKey>> before;
  {
    TestTiers tiers(kHotBytes, dir.str());
    PrefixCache& cache = tiers.cache();
    Namespace ns = tiers.Register(HybridSpec()).value();
    tip1 = StoreTokens(cache, ns, Tokens(2));
    tip2 = StoreTokens(cache, ns, Tokens(3));
    before = cache.RecordedTips(ns).value();
    ASSERT_OK(cache.Flush());
  }
  TestTiers tiers(kHotBytes, dir.str());
  PrefixCache& cache = tiers.cache();
  Namespace ns = tiers.Register(HybridSpec()).value();
  EXPECT_EQ(cache.RecordedTips(ns).value(), before);

  // The first store after the restart still knows tip1 is the grandparent.
  StatusOr<StoreResult> r = cache.Store(ns, Tokens(4), HybridLayers(16));
  ASSERT_OK(r);
  EXPECT_EQ(r->stripped_tip, tip1);
  ASSERT_OK(tiers.ssd->Flush());
  EXPECT_EQ(RotatingShape(*tiers.ssd, tip1), kPlaceholderShape);
  EXPECT_EQ(RotatingShape(*tiers.ssd, tip2), kRealRotatingShape);
}

TEST(TipLineage, GrandparentTipOnSsdIsStripped) {
  testing::TempDir dir;
  // A hot tier too small for more than a few blocks: earlier tips spill.
  TestTiers tiers(6 * 1024, dir.str());
  PrefixCache& cache = tiers.cache();
  Namespace ns = tiers.Register(HybridSpec()).value();
  const BlockKey tip1 = StoreTokens(cache, ns, Tokens(2));
  const BlockKey tip2 = StoreTokens(cache, ns, Tokens(3));
  for (size_t n = 4; n < 8 && tiers.hot->Contains(tip1); ++n) {
    StoreTokens(cache, Namespace(ns), Branch(0, n));  // unrelated chains push tip1 out
  }
  ASSERT_OK(tiers.ssd->Flush());
  ASSERT_FALSE(tiers.hot->Contains(tip1));
  ASSERT_EQ(RotatingShape(*tiers.ssd, tip1), kRealRotatingShape);
  const uint64_t tip1_bytes_before = BytesOf(*tiers.ssd, tip1);
  const TierCounters ssd_before = tiers.ssd->Totals();

  StatusOr<StoreResult> r = cache.Store(ns, Tokens(4), HybridLayers(16));
  ASSERT_OK(r);
  EXPECT_EQ(r->stripped_tip, tip1);
  // Reading tip1 to strip it was bookkeeping, not a hit.
  EXPECT_EQ(tiers.ssd->Totals().hits, ssd_before.hits);
  ASSERT_OK(tiers.ssd->Flush());
  EXPECT_FALSE(tiers.hot->Contains(tip1)) << "the strip must not promote the block";
  EXPECT_EQ(RotatingShape(*tiers.ssd, tip1), kPlaceholderShape);
  // The previous tip stays whole wherever it lives.
  StatusOr<TierHit> prev = tiers.stack->Get(tip2, /*allow_promotion=*/false);
  ASSERT_OK(prev);
  EXPECT_FALSE(DecodeBlock(prev->payload)->layers[1].placeholder);
  std::vector<AuditFinding> findings;
  ASSERT_OK(tiers.ssd->Audit(&findings));
  for (const AuditFinding& f : findings) ADD_FAILURE() << f.what << ": " << f.detail;
  // The SSD entry shrank in place and the tier's counters still add up.
  EXPECT_LT(BytesOf(*tiers.ssd, tip1), tip1_bytes_before);
  uint64_t sum = 0;
  tiers.ssd->ForEach([&](const BlockMeta&, uint64_t b) { sum += b; });
  EXPECT_EQ(tiers.ssd->Totals().bytes, sum);
}

TEST(TipLineageRecord, RoundTripsThroughTheBlockCodec) {
  const BlockKey root{1, 2};
  TipLineage lineage;
  lineage.Record(BlockKey{3, 4}, BlockKey{}, {BlockKey{1, 2}, 4, false});
  lineage.Record(BlockKey{5, 6}, BlockKey{3, 4}, {BlockKey{3, 4}, 3, true});
  BlockRecord rec = lineage.ToRecord(root);
  StatusOr<BlockRecord> decoded = DecodeBlock(EncodeBlock(rec).value());
  ASSERT_OK(decoded);
  StatusOr<TipLineage> back = TipLineage::FromRecord(*decoded, root);
  ASSERT_OK(back);
  EXPECT_EQ(back->Entries(), lineage.Entries());
  EXPECT_EQ(back->PreviousOf(BlockKey{5, 6}), (BlockKey{3, 4}));
}

TEST(TipLineageRecord, RejectsARecordOfAnotherNamespaceOrSize) {
  TipLineage lineage;
  lineage.Record(BlockKey{3, 4}, BlockKey{}, {BlockKey{1, 2}, 4, false});
  BlockRecord rec = lineage.ToRecord(BlockKey{1, 2});
  EXPECT_TRUE(TipLineage::FromRecord(rec, BlockKey{9, 9}).status().IsCorruption());
  Tensor& t = rec.layers[0].tensors[0];
  t = t.SliceAxis(0, 0, static_cast<int64_t>(t.nbytes()) - 1).value();
  EXPECT_TRUE(TipLineage::FromRecord(rec, BlockKey{1, 2}).status().IsCorruption());
}

}  // namespace
}  // namespace prefixkv
