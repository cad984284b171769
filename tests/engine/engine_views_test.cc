// Engine::RestorePinned: per-block views of the hot tier's own buffers, held
// pinned while a view lives, released with the last pin (even after Close).
// And the views of what a data directory holds: namespace manifests
// (Engine::Manifests) and why a prompt misses (Engine::ExplainMiss).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "prefixkv/advanced/hot_tier.h"
#include "prefixkv/engine.h"
#include "tests/support/namespace_fields.h"
#include "tests/support/test_util.h"
#include "tests/tools/data_dir_builder.h"

namespace prefixkv {
namespace {

constexpr uint32_t kBlockTokens = 4;

NamespaceSpec KvSpec() {
  NamespaceSpec spec;
  spec.model = "views-model";
  spec.block_tokens = kBlockTokens;
  spec.dtype = DType::kFloat32;
  spec.layer_types = {"KVCache", "KVCache"};
  return spec;
}

std::vector<int32_t> Tokens(size_t n, int32_t first = 0) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

// Keys and values [1, 2, tokens, 8] per layer.
std::vector<LayerState> KvLayers(int64_t tokens, std::mt19937_64& rng) {
  std::vector<LayerState> out(2);
  for (LayerState& l : out) {
    l.cache_type = "KVCache";
    for (int i = 0; i < 2; ++i)
      l.tensors.push_back(testing::RandomTensor(rng, DType::kFloat32, {1, 2, tokens, 8}));
  }
  return out;
}

bool Inside(const Tensor& t, const SharedBytes& buffer) {
  return t.data() >= buffer.data() &&
         t.data() + t.nbytes() <= buffer.data() + buffer.size();
}

class EngineViewsTest : public ::testing::Test {
 protected:
  std::unique_ptr<Engine> Open(uint64_t hot_bytes, bool on_disk = true) {
    EngineOptions o;
    if (on_disk) o.data_dir = dir_.str();
    o.hot_capacity_bytes = hot_bytes;
    return OpenWith(o);
  }
  std::unique_ptr<Engine> OpenWith(EngineOptions o) {
    o.log = [](std::string_view) {};
    StatusOr<std::unique_ptr<Engine>> e = Engine::Open(o);
    EXPECT_OK(e);
    return e.ok() ? std::move(e).value() : nullptr;
  }
  std::vector<LayerState> Store(Engine& e, Namespace ns, const std::vector<int32_t>& t) {
    std::vector<LayerState> layers = KvLayers(static_cast<int64_t>(t.size()), rng_);
    EXPECT_OK(e.Store(ns, t, layers));
    return layers;
  }
  PinnedRestore Restore(Engine& e, Namespace ns, const std::vector<int32_t>& t) {
    StatusOr<MatchResult> m = e.Match(ns, t);
    EXPECT_OK(m);
    if (!m.ok()) return {};
    StatusOr<PinnedRestore> r = e.RestorePinned(*m);
    EXPECT_OK(r);
    return r.ok() ? std::move(r).value() : PinnedRestore{};
  }
  // Block b of layer l, tensor i: rows [b*kBlockTokens, (b+1)*kBlockTokens).
  static Tensor Slice(const std::vector<LayerState>& layers, size_t l, size_t i,
                      size_t b) {
    return layers[l].tensors[i].SliceAxis(2, b * kBlockTokens, kBlockTokens).value();
  }

  std::mt19937_64 rng_{testing::TestSeed("EngineViewsTest")};
  testing::TempDir dir_;
};

TEST_F(EngineViewsTest, EveryBlockViewsTheHotTiersOwnBufferAndIsPinned) {
  auto e = Open(16 << 20);
  ASSERT_NE(e, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace ns, e->RegisterModel(KvSpec()));
  const std::vector<int32_t> tokens = Tokens(3 * kBlockTokens);
  const std::vector<LayerState> layers = Store(*e, ns, tokens);
  ASSERT_OK_AND_ASSIGN(MatchResult m, e->Match(ns, tokens));
  {
    PinnedRestore r = Restore(*e, ns, tokens);
    EXPECT_EQ(r.result.restored_tokens, tokens.size());
    EXPECT_EQ(r.result.layers, layers) << "result is what Restore returns";
    ASSERT_EQ(r.blocks.size(), 3u);
    for (size_t b = 0; b < 3; ++b) {
      const RestoredBlock& block = r.blocks[b];
      EXPECT_EQ(block.key, m.keys[b]);
      EXPECT_EQ(block.level, TierLevel::kHot);
      EXPECT_NE(block.pin, nullptr);
      // The tier's buffer itself, fetched independently of the restore.
      ASSERT_OK_AND_ASSIGN(SharedBytes tier_bytes, e->hot_tier(ns)->Get(block.key));
      EXPECT_EQ(block.payload.data(), tier_bytes.data());
      EXPECT_EQ(block.payload.size(), tier_bytes.size());
      for (size_t l = 0; l < 2; ++l) {
        for (size_t i = 0; i < 2; ++i) {
          const Tensor& t = block.record.layers[l].tensors[i];
          EXPECT_TRUE(Inside(t, tier_bytes)) << "block " << b << " layer " << l;
          EXPECT_EQ(t, Slice(layers, l, i, b));
        }
      }
    }
    EXPECT_EQ(e->Stats().hot.pinned_bytes, e->Stats().hot.bytes)
        << "all three blocks (everything resident) are pinned";
  }
  EXPECT_EQ(e->Stats().hot.pinned_bytes, 0u) << "the last view released its pin";
}

TEST_F(EngineViewsTest, APinnedBlockIsNeverEvictedAndLeavesWhenItsPinIsDropped) {
  // Room for a handful of 1 KiB blocks: storing more prompts evicts the LRU.
  auto e = Open(12 << 10);
  ASSERT_NE(e, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace ns, e->RegisterModel(KvSpec()));
  const std::vector<int32_t> first = Tokens(kBlockTokens);
  Store(*e, ns, first);
  PinnedRestore r = Restore(*e, ns, first);
  ASSERT_EQ(r.blocks.size(), 1u);
  const BlockKey pinned = r.blocks[0].key;
  std::shared_ptr<const void> pin = r.blocks[0].pin;  // held alone below
  ASSERT_NE(pin, nullptr);
  r = PinnedRestore{};
  for (int i = 1; i <= 20; ++i) Store(*e, ns, Tokens(kBlockTokens, 1000 * i));
  EXPECT_GT(e->Stats().hot.evictions, 0u) << "the budget must have been full";
  EXPECT_TRUE(e->hot_tier(ns)->Contains(pinned)) << "a pinned block stays resident";
  pin.reset();
  EXPECT_EQ(e->Stats().hot.pinned_bytes, 0u);
  for (int i = 21; i <= 40; ++i) Store(*e, ns, Tokens(kBlockTokens, 1000 * i));
  EXPECT_FALSE(e->hot_tier(ns)->Contains(pinned)) << "unpinned, it is evicted as usual";
}

TEST_F(EngineViewsTest, ViewsOutliveCloseAndTheLastPinReleasesSafely) {
  auto e = Open(16 << 20);
  ASSERT_NE(e, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace ns, e->RegisterModel(KvSpec()));
  const std::vector<int32_t> tokens = Tokens(2 * kBlockTokens);
  const std::vector<LayerState> layers = Store(*e, ns, tokens);
  PinnedRestore r = Restore(*e, ns, tokens);
  ASSERT_EQ(r.blocks.size(), 2u);
  ASSERT_OK(e->Close());
  e.reset();
  // The budget is kept alive by the pins: the bytes are still readable.
  EXPECT_EQ(r.blocks[1].record.layers[0].tensors[0], Slice(layers, 0, 0, 1));
  r = PinnedRestore{};  // unpins into the budget, then frees it (ASan checks)
}

TEST_F(EngineViewsTest, WithoutAHotTierBlocksAreVerifiedSsdReadsAndUnpinned) {
  auto e = Open(0);
  ASSERT_NE(e, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace ns, e->RegisterModel(KvSpec()));
  const std::vector<int32_t> tokens = Tokens(2 * kBlockTokens + 1);
  const std::vector<LayerState> layers = Store(*e, ns, tokens);
  PinnedRestore r = Restore(*e, ns, tokens);
  EXPECT_EQ(r.result.restored_tokens, 2 * kBlockTokens);
  ASSERT_EQ(r.blocks.size(), 2u);
  for (size_t b = 0; b < 2; ++b) {
    EXPECT_EQ(r.blocks[b].level, TierLevel::kSsd);
    EXPECT_EQ(r.blocks[b].pin, nullptr);
    EXPECT_EQ(r.blocks[b].record.layers[1].tensors[1], Slice(layers, 1, 1, b));
  }
}

TEST_F(EngineViewsTest, APartialTailTipIsTheLastBlock) {
  auto e = Open(16 << 20);
  ASSERT_NE(e, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace ns,
                       e->RegisterModel(KvSpec(), {.store_partial_tail = true}));
  const std::vector<int32_t> tokens = Tokens(2 * kBlockTokens + 3);
  Store(*e, ns, tokens);
  PinnedRestore r = Restore(*e, ns, tokens);
  EXPECT_EQ(r.result.restored_tokens, tokens.size());
  ASSERT_EQ(r.blocks.size(), 3u);
  EXPECT_TRUE(r.blocks[2].record.partial);
  EXPECT_EQ(r.blocks[2].record.token_count, 3u);
  EXPECT_EQ(r.blocks[2].key,
            ChainKey(r.blocks[1].key, std::span<const int32_t>(tokens).subspan(8, 3)));
}

TEST_F(EngineViewsTest, PinnedRestoresRaceStoresThatEvict) {
  // A budget of a few blocks: the writer's stores evict (and spill) while
  // readers pin, read and drop the same prompt's blocks. Every view must hold
  // the stored bytes, whether it came pinned from RAM or read from SSD.
  auto e = Open(16 << 10);
  ASSERT_NE(e, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace ns, e->RegisterModel(KvSpec()));
  const std::vector<int32_t> tokens = Tokens(2 * kBlockTokens);
  const std::vector<LayerState> layers = Store(*e, ns, tokens);
  std::vector<std::vector<LayerState>> noise;
  for (int i = 0; i < 40; ++i) noise.push_back(KvLayers(kBlockTokens, rng_));
  std::atomic<bool> done{false};
  std::atomic<int> pinned{0}, unpinned{0}, failures{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 3; ++r) {
    readers.emplace_back([&] {
      while (!done.load()) {
        StatusOr<MatchResult> m = e->Match(ns, tokens);
        StatusOr<PinnedRestore> got = m.ok() ? e->RestorePinned(*m) : m.status();
        if (!got.ok()) {
          ++failures;
          continue;
        }
        for (size_t b = 0; b < got->blocks.size(); ++b) {
          const RestoredBlock& block = got->blocks[b];
          (block.pin != nullptr ? pinned : unpinned)++;
          if (!(block.record.layers[1].tensors[0] == Slice(layers, 1, 0, b))) ++failures;
        }
      }
    });
  }
  for (int i = 0; i < 40; ++i) {
    EXPECT_OK(e->Store(ns, Tokens(kBlockTokens, 1000 * (i + 1)), noise[i]));
  }
  // The readers may start late: let them restore a few times after the stores.
  while (pinned.load() + unpinned.load() < 30 && failures.load() == 0)
    std::this_thread::yield();
  done = true;
  for (std::thread& t : readers) t.join();
  std::printf("views: %d pinned, %d read from SSD\n", pinned.load(), unpinned.load());
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(e->Stats().hot.pinned_bytes, 0u);
  ASSERT_OK_AND_ASSIGN(EngineAudit audit, e->Audit());
  EXPECT_TRUE(audit.ok());
}

TEST_F(EngineViewsTest, NothingRestoredIsNoBlocksAndAClosedEngineRefuses) {
  auto e = Open(16 << 20);
  ASSERT_NE(e, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace ns, e->RegisterModel(KvSpec()));
  PinnedRestore r = Restore(*e, ns, Tokens(2 * kBlockTokens));
  EXPECT_EQ(r.result.restored_tokens, 0u);
  EXPECT_TRUE(r.blocks.empty());
  ASSERT_OK_AND_ASSIGN(MatchResult m, e->Match(ns, Tokens(kBlockTokens)));
  ASSERT_OK(e->Close());
  EXPECT_TRUE(e->RestorePinned(m).status().IsInvalidArgument());
}

// ---- Manifests and ExplainMiss ------------------------------------------------

MissExplanation Explain(Engine& e, const NamespaceSpec& spec,
                        const std::vector<int32_t>& tokens) {
  StatusOr<MissExplanation> m = e.ExplainMiss(spec, tokens);
  EXPECT_OK(m);
  return m.ok() ? std::move(m).value() : MissExplanation{};
}

// Flips one byte of the first segment file that holds `pattern`; false if none does.
bool DamageOnDisk(const std::string& dir, std::string_view pattern) {
  for (const auto& entry : std::filesystem::directory_iterator(dir + "/segments")) {
    std::string bytes;
    {
      std::ifstream in(entry.path(), std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    const size_t at = bytes.find(pattern);
    if (at == std::string::npos) continue;
    bytes[at + 5] ^= 0x40;
    std::ofstream(entry.path(), std::ios::binary | std::ios::trunc) << bytes;
    return true;
  }
  return false;
}

TEST_F(EngineViewsTest, RegisterStoresTheManifestAndARestartReadsIt) {
  const NamespaceSpec spec = testing::WithEveryField(KvSpec());
  {
    auto e = Open(1 << 20);
    ASSERT_NE(e, nullptr);
    ASSERT_OK(e->RegisterModel(spec));
    ASSERT_OK(e->RegisterModel(spec));  // idempotent: still one manifest
    ASSERT_OK(e->Close());
  }
  auto e = Open(1 << 20);
  ASSERT_NE(e, nullptr);
  ASSERT_OK_AND_ASSIGN(std::vector<StoredManifest> stored, e->Manifests());
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0].root, NamespaceRoot(spec).value());
  ASSERT_OK(stored[0].decoded);
  EXPECT_EQ(stored[0].decoded->fingerprint, spec.Fingerprint().value());
  EXPECT_TRUE(DiffSpecs(stored[0].decoded->spec, spec).empty());
  EXPECT_EQ(stored[0].text, EncodeManifest(spec).value());
}

TEST_F(EngineViewsTest, AStoredManifestOfAnotherFingerprintRefusesTheRoot) {
  auto e = Open(1 << 20);
  ASSERT_NE(e, nullptr);
  NamespaceSpec other = KvSpec();
  other.tokenizer_hash = "other";
  // A record that claims the root of KvSpec() for another spec (what a
  // damaged record or a hash collision would look like).
  ASSERT_OK(e->ssd_tier()->PutManifest(NamespaceRoot(KvSpec()).value(),
                                       EncodeManifest(other).value()));
  StatusOr<Namespace> ns = e->RegisterModel(KvSpec());
  EXPECT_TRUE(ns.status().IsCorruption()) << ns.status().ToString();
  EXPECT_EQ(e->model_count(), 0u);
}

// A spec that differs from the stored one in any single field is another
// namespace: it does not hit, and ExplainMiss names that field (from the
// manifest on disk after a restart, and from the registered model before).
TEST_F(EngineViewsTest, ExplainMissNamesEveryFieldThatSeparatesNamespaces) {
  const NamespaceSpec stored = testing::WithEveryField(KvSpec());
  const std::vector<int32_t> tokens = Tokens(3 * kBlockTokens);
  for (bool restarted : {false, true}) {
    SCOPED_TRACE(restarted ? "after a restart" : "registered");
    testing::TempDir dir;
    EngineOptions o;
    o.data_dir = dir.str();
    o.hot_capacity_bytes = 16 << 20;
    auto e = OpenWith(o);
    ASSERT_NE(e, nullptr);
    ASSERT_OK_AND_ASSIGN(Namespace ns, e->RegisterModel(stored));
    Store(*e, ns, tokens);
    if (restarted) {
      ASSERT_OK(e->Close());
      e = OpenWith(o);
      ASSERT_NE(e, nullptr);
    }
    for (const testing::SpecFieldCase& c : testing::kSpecFieldCases) {
      SCOPED_TRACE(c.field);
      NamespaceSpec asked = stored;
      c.mutate(&asked);
      MissExplanation m = Explain(*e, asked, tokens);
      EXPECT_EQ(m.kind, MissKind::kOtherNamespace) << m.reason;
      EXPECT_EQ(m.first_missed_block, 0);
      EXPECT_EQ(m.other_root, NamespaceRoot(stored).value());
      ASSERT_EQ(m.differences.size(), 1u) << m.reason;
      EXPECT_EQ(m.differences[0].field, c.field);
      EXPECT_NE(m.reason.find(m.differences[0].ToString()), std::string::npos)
          << m.reason;
      ASSERT_OK_AND_ASSIGN(Namespace other, e->RegisterModel(asked));
      ASSERT_OK_AND_ASSIGN(MatchResult match, e->Match(other, tokens));
      EXPECT_EQ(match.matched_tokens(), 0u);  // never a silent reuse
    }
    MissExplanation hit = Explain(*e, stored, tokens);
    EXPECT_EQ(hit.kind, MissKind::kNone) << hit.reason;
    EXPECT_EQ(hit.restorable_tokens, tokens.size());
  }
}

TEST_F(EngineViewsTest, ExplainMissTellsEvictedRemovedCorruptAndNeverStoredApart) {
  EngineOptions o;
  o.data_dir = dir_.str();
  o.hot_capacity_bytes = 0;  // SSD only: every block is on disk at once
  o.ssd_capacity_bytes = 24 << 10;
  auto e = OpenWith(o);
  ASSERT_NE(e, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace ns, e->RegisterModel(KvSpec()));
  const std::vector<int32_t> evicted = Tokens(2 * kBlockTokens, 1000);
  Store(*e, ns, evicted);
  for (int32_t i = 0; i < 40; ++i)
    Store(*e, ns, Tokens(2 * kBlockTokens, 2000 + 100 * i));
  MissExplanation m = Explain(*e, KvSpec(), evicted);
  EXPECT_EQ(m.kind, MissKind::kEvicted) << m.reason;
  EXPECT_EQ(m.first_missed_block, 0);
  EXPECT_NE(m.reason.find("evicted"), std::string::npos) << m.reason;

  const std::vector<int32_t> removed = Tokens(2 * kBlockTokens, 9000);
  Store(*e, ns, removed);
  const std::vector<BlockKey> keys = ChainKeys(m.root, removed, kBlockTokens);
  ASSERT_OK(e->ssd_tier()->Remove(keys[1]));
  m = Explain(*e, KvSpec(), removed);
  EXPECT_EQ(m.kind, MissKind::kRemoved) << m.reason;
  EXPECT_EQ(m.first_missed_block, 1);
  EXPECT_EQ(m.first_missed_key, keys[1]);
  EXPECT_EQ(m.cached_blocks, 1u);
  EXPECT_EQ(m.restorable_tokens, kBlockTokens);

  m = Explain(*e, KvSpec(), Tokens(2 * kBlockTokens, 50000));
  EXPECT_EQ(m.kind, MissKind::kNeverStored) << m.reason;

  const std::vector<int32_t> damaged = Tokens(2 * kBlockTokens, 7000);
  std::vector<LayerState> layers = Store(*e, ns, damaged);
  ASSERT_OK(e->Close());
  const Tensor block1 = Slice(layers, 0, 0, 1);
  ASSERT_TRUE(DamageOnDisk(dir_.str(), std::string(block1.bytes().view())));
  e = OpenWith(o);
  ASSERT_NE(e, nullptr);
  ASSERT_OK(e->Audit());  // verifies every payload: drops the damaged block
  m = Explain(*e, KvSpec(), damaged);
  EXPECT_EQ(m.kind, MissKind::kCorruptDropped) << m.reason;
  EXPECT_EQ(m.first_missed_block, 1);
  EXPECT_EQ(MissKindName(m.kind), "corrupt-dropped");
}

TEST_F(EngineViewsTest, WithoutAnSsdTierAMissIsNotStoredWithoutMoreHistory) {
  auto e = Open(1 << 20, /*on_disk=*/false);
  ASSERT_NE(e, nullptr);
  MissExplanation m = Explain(*e, KvSpec(), Tokens(2 * kBlockTokens));
  EXPECT_EQ(m.kind, MissKind::kNotStored) << m.reason;
  EXPECT_NE(m.reason.find("never stored or evicted"), std::string::npos) << m.reason;
  NamespaceSpec bad = KvSpec();
  bad.layer_types.clear();
  EXPECT_TRUE(e->ExplainMiss(bad, Tokens(4)).status().IsInvalidArgument());
}

// A data directory written before manifests: its blocks are keyed by the old
// fingerprint (the documented string, built here by hand), and it holds no
// manifest. The unchanged spec still hits it and registering writes the
// manifest; a spec with a new field set is another namespace, explained.
TEST_F(EngineViewsTest, ADataDirectoryWithoutManifestsKeepsWorking) {
  testing::DataDirBuilder old(testing::TestSeed("EngineViewsTest.old"));
  old.StoreChain();
  ASSERT_EQ(old.root(),
            NamespaceRootFromFingerprint("prefixkv/v1|model=audit-test|layers=1|block=16|"
                                         "dtype=float16|layout=K|salt="));
  EngineOptions o;
  o.data_dir = old.dir();
  o.hot_capacity_bytes = 1 << 20;
  auto e = OpenWith(o);
  ASSERT_NE(e, nullptr);
  ASSERT_OK_AND_ASSIGN(std::vector<StoredManifest> none, e->Manifests());
  EXPECT_TRUE(none.empty());
  NamespaceSpec newer = old.spec();
  newer.tokenizer_hash = "def";
  MissExplanation m = Explain(*e, newer, old.tokens());
  EXPECT_EQ(m.kind, MissKind::kOtherNamespace) << m.reason;
  EXPECT_EQ(m.other_root, old.root());
  EXPECT_FALSE(m.other_has_manifest);
  EXPECT_NE(m.reason.find("no manifest"), std::string::npos) << m.reason;

  ASSERT_OK_AND_ASSIGN(Namespace ns, e->RegisterModel(old.spec()));
  ASSERT_OK_AND_ASSIGN(MatchResult match, e->Match(ns, old.tokens()));
  EXPECT_EQ(match.matched_tokens(), old.tokens().size());
  ASSERT_OK_AND_ASSIGN(RestoreResult restored, e->Restore(match));
  EXPECT_EQ(restored.restored_tokens, old.tokens().size());
  ASSERT_OK_AND_ASSIGN(std::vector<StoredManifest> written, e->Manifests());
  ASSERT_EQ(written.size(), 1u);
  EXPECT_EQ(written[0].root, old.root());
  m = Explain(*e, newer, old.tokens());
  ASSERT_EQ(m.differences.size(), 1u) << m.reason;
  EXPECT_EQ(m.differences[0].ToString(),
            "tokenizer hash differs: stored unset, asked def");
}

}  // namespace
}  // namespace prefixkv
