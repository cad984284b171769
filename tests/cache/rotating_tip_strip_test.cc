// Supersede-on-extend rotating tip stripping: the seed tests
// (shared/seeds/rotating_tip_strip_tests.py.txt), one TEST per seed test.
//
// A growing conversation stores one tip per turn, each carrying the whole
// rotating window. Only the newest tip is restored and the previous one is the
// walk-back fallback, so the tip two generations back is stripped to
// placeholders (its KVCache slices stay) with every byte counter exact.
#include <gtest/gtest.h>

#include <memory>

#include "prefixkv/advanced/hot_tier.h"
#include "prefixkv/advanced/shared_hot_budget.h"
#include "tests/cache/cache_test_util.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

using testing::HybridLayers;
using testing::HybridSpec;
using testing::kBlockTokens;
using testing::kPlaceholderShape;
using testing::kRealRotatingShape;
using testing::KvOnlyLayers;
using testing::KvOnlySpec;
using testing::KvShape;
using testing::RotatingShape;
using testing::Tokens;

// A prefix cache over the hot tier only: an engine without SSD whose shared
// budget holds 10 MiB, like the seed's hot-cache-only manager.
class RotatingTipStripTest : public ::testing::Test {
 protected:
  void Use(const NamespaceSpec& spec) {
    StatusOr<Namespace> ns = tiers_.Register(spec);
    ASSERT_OK(ns);
    ns_ = *ns;
  }

  // One conversation turn: a chain of `num_blocks` blocks; earlier blocks
  // deduplicate against the chain and only the new tail is written.
  BlockKey StoreTurn(size_t num_blocks, const std::string& type = "RotatingKVCache",
                     bool kv_only = false) {
    std::vector<int32_t> tokens = Tokens(num_blocks);
    const int64_t n = static_cast<int64_t>(tokens.size());
    StatusOr<StoreResult> r = tiers_.cache().Store(
        ns_, tokens, kv_only ? KvOnlyLayers(n) : HybridLayers(n, type));
    EXPECT_OK(r);
    if (!r.ok()) return {};
    EXPECT_EQ(r->blocks, num_blocks);
    return r->tip;
  }

  // The hot tier's charge for one entry, as it reports it.
  uint64_t EntryBytes(const BlockKey& key) {
    uint64_t bytes = 0;
    tiers_.hot->ForEach([&](const BlockMeta& m, uint64_t b) {
      if (m.key == key) bytes = b;
    });
    return bytes;
  }

  // The charges recomputed from the stored payloads themselves.
  uint64_t RecomputedBytes() {
    std::vector<BlockKey> keys;
    tiers_.hot->ForEach([&](const BlockMeta& m, uint64_t) { keys.push_back(m.key); });
    uint64_t sum = 0;
    for (const BlockKey& k : keys) sum += HotEntryCharge(tiers_.hot->Get(k)->size());
    return sum;
  }

  void ExpectCleanAudit() {
    std::vector<AuditFinding> findings;
    ASSERT_OK(tiers_.budget->Audit(&findings));
    for (const AuditFinding& f : findings) ADD_FAILURE() << f.what << ": " << f.detail;
  }

  testing::TestTiers tiers_{10u << 20, ""};
  Namespace ns_;
};

TEST_F(RotatingTipStripTest, GrandparentTipStrippedPrevTipKept) {
  Use(HybridSpec());
  const BlockKey tip1 = StoreTurn(2);
  EXPECT_EQ(RotatingShape(*tiers_.hot, tip1), kRealRotatingShape);

  const BlockKey tip2 = StoreTurn(3);
  // tip1 is now the immediate previous tip: kept as the walk-back fallback.
  EXPECT_EQ(RotatingShape(*tiers_.hot, tip1), kRealRotatingShape);
  EXPECT_EQ(RotatingShape(*tiers_.hot, tip2), kRealRotatingShape);

  const BlockKey tip3 = StoreTurn(4);
  // tip1 is two generations back: its rotating payload is stripped.
  EXPECT_EQ(RotatingShape(*tiers_.hot, tip1), kPlaceholderShape);
  EXPECT_EQ(RotatingShape(*tiers_.hot, tip2), kRealRotatingShape);
  EXPECT_EQ(RotatingShape(*tiers_.hot, tip3), kRealRotatingShape);

  const BlockKey tip4 = StoreTurn(5);
  // Steady state: exactly the two newest tips stay heavy.
  EXPECT_EQ(RotatingShape(*tiers_.hot, tip2), kPlaceholderShape);
  EXPECT_EQ(RotatingShape(*tiers_.hot, tip3), kRealRotatingShape);
  EXPECT_EQ(RotatingShape(*tiers_.hot, tip4), kRealRotatingShape);
}

TEST_F(RotatingTipStripTest, StrippedBlockKeepsSliceableLayers) {
  Use(HybridSpec());
  const BlockKey tip1 = StoreTurn(2);
  const BlockRecord before = testing::ReadBlock(*tiers_.hot, tip1);
  StoreTurn(3);
  StoreTurn(4);

  EXPECT_EQ(RotatingShape(*tiers_.hot, tip1), kPlaceholderShape);
  const BlockRecord after = testing::ReadBlock(*tiers_.hot, tip1);
  // The KVCache slice survives byte for byte; only the rotating layer changed,
  // into exactly the standard placeholder restore's walk-back understands.
  EXPECT_EQ(after.layers.at(0), before.layers.at(0));
  const size_t r = testing::RotatingIndex(after);
  EXPECT_EQ(after.layers[r], MakePlaceholder(before.layers[r].cache_type));
  EXPECT_TRUE(after.layers[r].placeholder);
  EXPECT_EQ(after.tokens, before.tokens);
  EXPECT_EQ(after.parent, before.parent);
}

TEST_F(RotatingTipStripTest, HotCacheByteCounterConsistent) {
  Use(HybridSpec());
  const BlockKey tip1 = StoreTurn(2);
  StoreTurn(3);
  const uint64_t tip1_before = EntryBytes(tip1);
  StoreTurn(4);

  // The superseded tip's entry shrank...
  const uint64_t tip1_after = EntryBytes(tip1);
  EXPECT_GT(tip1_after, 0u);
  EXPECT_LT(tip1_after, tip1_before);
  // ...and the counter equals the recomputed sum of live entry sizes.
  EXPECT_EQ(tiers_.hot->Totals().bytes, RecomputedBytes());
  ExpectCleanAudit();
}

TEST_F(RotatingTipStripTest, SharedBudgetCounterConsistent) {
  Use(HybridSpec());
  StoreTurn(2);
  StoreTurn(3);
  StoreTurn(4);
  // The budget's total is the owner's hot bytes, which are the live entries.
  EXPECT_EQ(tiers_.budget->Totals().bytes, tiers_.hot->Totals().bytes);
  EXPECT_EQ(tiers_.budget->Totals().bytes, RecomputedBytes());
  EXPECT_EQ(tiers_.budget->OwnerCounters(tiers_.hot->owner()).bytes, RecomputedBytes());
  ExpectCleanAudit();
}

TEST_F(RotatingTipStripTest, KvcacheOnlyModelUnaffected) {
  Use(KvOnlySpec());
  const BlockKey tip1 = StoreTurn(2, "", /*kv_only=*/true);
  const BlockRecord before = testing::ReadBlock(*tiers_.hot, tip1);
  const uint64_t inserts_before = tiers_.hot->Totals().inserts;
  StoreTurn(3, "", true);
  StoreTurn(4, "", true);

  EXPECT_TRUE(tiers_.cache().RecordedTips(ns_)->empty());
  EXPECT_EQ(testing::ReadBlock(*tiers_.hot, tip1), before);
  // Two new blocks, no rewrites, no lineage record.
  EXPECT_EQ(tiers_.hot->Totals().inserts, inserts_before + 2);
  EXPECT_EQ(tiers_.hot->Totals().removes, 0u);
}

TEST_F(RotatingTipStripTest, PrefillReadyRotatingNameStripped) {
  // Warm-restored caches store as PrefillReadyRotatingKVCache; family matching
  // must strip those tips too (an exact-name comparison would not).
  Use(HybridSpec("PrefillReadyRotatingKVCache"));
  const std::string type = "PrefillReadyRotatingKVCache";
  const BlockKey tip1 = StoreTurn(2, type);
  EXPECT_EQ(RotatingShape(*tiers_.hot, tip1), kRealRotatingShape);
  StoreTurn(3, type);
  StoreTurn(4, type);
  EXPECT_EQ(RotatingShape(*tiers_.hot, tip1), kPlaceholderShape);
}

TEST_F(RotatingTipStripTest, MixedRotatingNamesShareOneFamily) {
  // A namespace declared with RotatingKVCache accepts a store whose caches
  // came back as PrefillReadyRotatingKVCache (same family), and strips it.
  Use(HybridSpec("RotatingKVCache"));
  const BlockKey tip1 = StoreTurn(2, "PrefillReadyRotatingKVCache");
  StoreTurn(3, "RotatingKVCache");
  StoreTurn(4, "BufferedRotatingKVCache");
  EXPECT_EQ(RotatingShape(*tiers_.hot, tip1), kPlaceholderShape);
}

TEST_F(RotatingTipStripTest, RecurrentAndWindowStateStrippedTogether) {
  // A hybrid block: KV slice, window and recurrent state. The grandparent tip
  // loses both tip-only layers at once; the KV slice stays byte for byte.
  NamespaceSpec spec = HybridSpec();
  spec.layer_types.push_back("ArraysCache");
  Use(spec);
  std::vector<BlockKey> tips;
  for (size_t blocks : {2, 3, 4}) {
    std::vector<int32_t> tokens = Tokens(blocks);
    const int64_t n = static_cast<int64_t>(tokens.size());
    StatusOr<StoreResult> r = tiers_.cache().Store(
        ns_, tokens,
        {testing::KvLayer(n), testing::RotatingLayer(n), testing::ArraysLayer(n)});
    ASSERT_OK(r);
    tips.push_back(r->tip);
  }
  const BlockRecord stripped = testing::ReadBlock(*tiers_.hot, tips[0]);
  EXPECT_EQ(stripped.layers.at(0).tensors.at(0).shape(),
            (std::vector<int64_t>{1, 2, 4, 8}));
  EXPECT_EQ(stripped.layers.at(1), MakePlaceholder("RotatingKVCache"));
  EXPECT_EQ(stripped.layers.at(2), MakePlaceholder("ArraysCache"));
  for (const BlockKey& kept : {tips[1], tips[2]}) {
    const BlockRecord whole = testing::ReadBlock(*tiers_.hot, kept);
    EXPECT_FALSE(whole.layers.at(1).placeholder);
    EXPECT_FALSE(whole.layers.at(2).placeholder);
    EXPECT_EQ(whole.layers.at(2).tensors.at(1).shape(), (std::vector<int64_t>{4, 8, 8}));
  }
  EXPECT_EQ(tiers_.hot->Totals().bytes, RecomputedBytes());
  ExpectCleanAudit();
}

// Engine::ExplainMiss names a stripped tip: the prompt of the first turn is
// still cached block for block, but its window is a placeholder now, so a
// restore walks back to nothing.
TEST(RotatingTipStrip, ExplainMissNamesAStrippedTip) {
  EngineOptions o;
  o.hot_capacity_bytes = 10u << 20;
  o.log = [](std::string_view) {};
  std::unique_ptr<Engine> e = Engine::Open(o).value();
  ASSERT_OK_AND_ASSIGN(Namespace ns, e->RegisterModel(HybridSpec()));
  for (size_t blocks : {2, 3, 4}) {
    const int64_t n = static_cast<int64_t>(blocks * kBlockTokens);
    ASSERT_OK(e->Store(ns, Tokens(blocks), HybridLayers(n)));
  }
  ASSERT_OK_AND_ASSIGN(MissExplanation m, e->ExplainMiss(HybridSpec(), Tokens(2)));
  EXPECT_EQ(m.kind, MissKind::kStripped) << m.reason;
  EXPECT_EQ(m.cached_blocks, 2u);
  EXPECT_EQ(m.restorable_tokens, 0u);
  EXPECT_EQ(m.first_missed_block, 0);
  EXPECT_NE(m.reason.find("placeholder"), std::string::npos) << m.reason;
  ASSERT_OK_AND_ASSIGN(MatchResult match, e->Match(ns, Tokens(2)));
  ASSERT_OK_AND_ASSIGN(RestoreResult restored, e->Restore(match));
  EXPECT_EQ(restored.restored_tokens, m.restorable_tokens);  // what a restore gets
  // The two newest tips are whole: the third turn's prompt restores fully.
  ASSERT_OK_AND_ASSIGN(m, e->ExplainMiss(HybridSpec(), Tokens(3)));
  EXPECT_EQ(m.kind, MissKind::kNone) << m.reason;
  EXPECT_EQ(m.restorable_tokens, 3 * kBlockTokens);
}

TEST(RotatingTipStrip, RegistryRotatingFamily) {
  // Also covered by tests/core/cache_types_test.cc; repeated here because the
  // strip and restore paths above depend on exactly these answers.
  EXPECT_TRUE(CacheTypeRegistry::IsRotatingFamily("RotatingKVCache"));
  EXPECT_TRUE(CacheTypeRegistry::IsRotatingFamily("PrefillReadyRotatingKVCache"));
  EXPECT_TRUE(CacheTypeRegistry::IsRotatingFamily("BufferedRotatingKVCache"));
  EXPECT_TRUE(CacheTypeRegistry::IsRotatingFamily("BatchRotatingKVCache"));
  EXPECT_FALSE(CacheTypeRegistry::IsRotatingFamily("KVCache"));
  EXPECT_FALSE(CacheTypeRegistry::IsRotatingFamily("TurboQuantKVCache"));
  EXPECT_FALSE(CacheTypeRegistry::IsRotatingFamily("ArraysCache"));
  EXPECT_FALSE(CacheTypeRegistry::IsRotatingFamily("SomethingElse"));
}

}  // namespace
}  // namespace prefixkv
