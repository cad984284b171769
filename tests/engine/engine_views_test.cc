// Engine::RestorePinned: per-block views of the hot tier's own buffers, held
// pinned while a view lives, released with the last pin (even after Close).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "prefixkv/advanced/hot_tier.h"
#include "prefixkv/engine.h"
#include "tests/support/test_util.h"

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

}  // namespace
}  // namespace prefixkv
