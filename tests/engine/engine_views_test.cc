// Engine::RestorePinned: per-block views of the hot tier's own buffers, held
// pinned while a view lives, released with the last pin (even after Close).
// Engine::RestoreInto: the same blocks copied once into the caller's memory,
// byte for byte what Restore returns, on every cache family, with bad
// destinations refused before anything is written.
// Engine::PlanRestore: the same restores as host ranges in regions the
// engine's memory resource reported; applied with memcpy they are Restore's
// bytes, and the planned blocks stay in RAM until the plan is released.
// All three, at random, while another thread stores, strips and evicts: each
// holds exactly the bytes of the prompt's restored prefix.
// And the views of what a data directory holds: namespace manifests
// (Engine::Manifests) and why a prompt misses (Engine::ExplainMiss).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "prefixkv/advanced/engine_internals.h"
#include "prefixkv/advanced/hot_tier.h"
#include "prefixkv/codec.h"
#include "prefixkv/engine.h"
#include "prefixkv/memory_resource.h"
#include "prefixkv/namespace_spec.h"
#include "prefixkv/prefix_types.h"
#include "tests/engine/engine_test_util.h"
#include "tests/support/namespace_fields.h"
#include "tests/support/test_util.h"
#include "tests/tools/data_dir_builder.h"

namespace prefixkv {
namespace {

using testing::kBlockTokens;
using testing::Tokens;

NamespaceSpec KvSpec() { return testing::KvSpec("views-model"); }

std::vector<LayerState> KvLayers(int64_t tokens, std::mt19937_64& rng) {
  return testing::KvLayers(2, tokens, rng);
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
  // A RAM-only engine whose RestorePinned runs meanwhile_ (when set) after
  // its restore read the blocks and before it pins them.
  std::unique_ptr<Engine> OpenRamOnlyRacingPins() {
    EngineOptions o;
    o.hot_capacity_bytes = 16 << 20;
    o.log = [](std::string_view) {};
    EngineHooks hooks;
    hooks.before_restore_pins = [this] {
      if (meanwhile_) meanwhile_();
    };
    StatusOr<std::unique_ptr<Engine>> e = OpenEngine(o, std::move(hooks));
    EXPECT_OK(e);
    return e.ok() ? std::move(e).value() : nullptr;
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

  // RestorePinned of a three-block prompt stored in a RAM-only engine, with
  // `meanwhile` run between its restore's read and its pins. Whatever that
  // did, the restore succeeds and every block is what the restore read.
  PinnedRestore RestorePinnedWhile(
      const std::function<void(Engine&, Namespace, const MatchResult&)>& meanwhile) {
    auto e = OpenRamOnlyRacingPins();
    if (e == nullptr) return {};
    StatusOr<Namespace> ns = e->RegisterModel(KvSpec());
    EXPECT_OK(ns);
    const std::vector<int32_t> tokens = Tokens(3 * kBlockTokens);
    const std::vector<LayerState> layers = Store(*e, *ns, tokens);
    StatusOr<MatchResult> m = e->Match(*ns, tokens);
    EXPECT_OK(m);
    meanwhile_ = [&] { meanwhile(*e, *ns, *m); };
    StatusOr<PinnedRestore> r = e->RestorePinned(*m);
    meanwhile_ = nullptr;
    EXPECT_OK(r);
    if (!r.ok()) return {};
    EXPECT_EQ(r->result.restored_tokens, tokens.size());
    ExpectBlocksAreWhatTheRestoreRead(*r, layers);
    return std::move(r).value();  // its pins may outlive the engine
  }
  // Every block of `r` holds the stored bytes of its part of the prompt:
  // what r.result was assembled from.
  static void ExpectBlocksAreWhatTheRestoreRead(const PinnedRestore& r,
                                                const std::vector<LayerState>& layers) {
    EXPECT_EQ(r.result.layers, layers);
    for (size_t b = 0; b < r.blocks.size(); ++b) {
      for (size_t l = 0; l < 2; ++l) {
        for (size_t i = 0; i < 2; ++i) {
          EXPECT_EQ(r.blocks[b].record.layers[l].tensors[i], Slice(layers, l, i, b))
              << "block " << b << " layer " << l << " tensor " << i;
        }
      }
    }
  }

  std::mt19937_64 rng_{testing::TestSeed("EngineViewsTest")};
  testing::TempDir dir_;
  std::function<void()> meanwhile_;
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
      ASSERT_OK_AND_ASSIGN(SharedBytes tier_bytes, EngineHotTier(*e, ns)->Get(block.key));
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
  EXPECT_TRUE(EngineHotTier(*e, ns)->Contains(pinned)) << "a pinned block stays resident";
  pin.reset();
  EXPECT_EQ(e->Stats().hot.pinned_bytes, 0u);
  for (int i = 21; i <= 40; ++i) Store(*e, ns, Tokens(kBlockTokens, 1000 * i));
  EXPECT_FALSE(EngineHotTier(*e, ns)->Contains(pinned))
      << "unpinned, it is evicted as usual";
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

TEST_F(EngineViewsTest, ABlockRewrittenBeforeItsPinIsTheVersionTheRestoreRead) {
  // A concurrent store rewrites block 1 in place (another version of it:
  // one tensor byte differs) after the restore read it.
  PinnedRestore r = RestorePinnedWhile([](Engine& e, Namespace ns, const MatchResult& m) {
    HotTier* hot = EngineHotTier(e, ns);
    ASSERT_OK_AND_ASSIGN(BlockMeta meta, hot->Peek(m.keys[1]));
    ASSERT_OK_AND_ASSIGN(SharedBytes bytes, hot->PeekPayload(m.keys[1]));
    ASSERT_OK_AND_ASSIGN(BlockRecord record, DecodeTrustedBlock(bytes));
    uint8_t* copy = nullptr;
    SharedBytes rewritten = SharedBytes::Allocate(bytes.size(), &copy);
    std::memcpy(copy, bytes.data(), bytes.size());
    copy[record.layers[0].tensors[0].data() - bytes.data()] ^= 0xFF;
    ASSERT_OK(hot->Put(meta, rewritten, /*dirty=*/false));
  });
  ASSERT_EQ(r.blocks.size(), 3u);
  EXPECT_NE(r.blocks[0].pin, nullptr);
  EXPECT_EQ(r.blocks[1].pin, nullptr) << "the tier holds another version";
}

TEST_F(EngineViewsTest, ABlockEvictedBeforeItsPinIsStillTheBytesTheRestoreRead) {
  // A concurrent store evicts the tip from the RAM-only engine after the
  // restore read it: no tier holds it any more.
  PinnedRestore r = RestorePinnedWhile([](Engine& e, Namespace ns, const MatchResult& m) {
    ASSERT_OK(EngineHotTier(e, ns)->Remove(m.keys[2]));
  });
  ASSERT_EQ(r.blocks.size(), 3u);
  EXPECT_EQ(r.blocks[2].pin, nullptr);
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

// --- Engine::RestoreInto -------------------------------------------------

constexpr uint8_t kSentinel = 0xA5;  // what the caller's memory holds before

// A rotating (sliding-window) layer at position `tokens`: a window of
// [1, 2, 4, 8] random keys and values and its meta.
LayerState RotatingLayer(int64_t tokens, std::mt19937_64& rng) {
  LayerState l;
  l.cache_type = "RotatingKVCache";
  l.meta = RotatingMeta{0, 4, tokens, 4}.ToStrings();
  for (int i = 0; i < 2; ++i)
    l.tensors.push_back(testing::RandomTensor(rng, DType::kFloat32, {1, 2, 4, 8}));
  return l;
}

// A recurrent (arrays) layer at position `tokens`: a random conv ring
// [1, 3, 16] and state [4, 8, 8].
LayerState ArraysLayer(int64_t tokens, std::mt19937_64& rng) {
  LayerState l;
  l.cache_type = "ArraysCache";
  l.meta = RotatingMeta{0, 3, tokens, tokens % 3}.ToStrings();
  l.tensors = {testing::RandomTensor(rng, DType::kFloat32, {1, 3, 16}),
               testing::RandomTensor(rng, DType::kFloat32, {4, 8, 8})};
  return l;
}

NamespaceSpec SpecOf(const std::vector<std::string>& layer_types) {
  NamespaceSpec spec = testing::KvSpec("into-model");
  spec.layer_types = layer_types;
  return spec;
}

// The caller's memory: one buffer per restored tensor, filled with
// kSentinel, and the destinations describing it.
struct CallerBuffers {
  std::vector<std::vector<std::vector<uint8_t>>> bytes;  // [layer][tensor]
  std::vector<LayerDestination> destinations;

  // Contiguous buffers shaped like `expected`'s tensors.
  explicit CallerBuffers(const RestoreResult& expected) {
    for (const LayerState& layer : expected.layers) {
      bytes.emplace_back();
      destinations.emplace_back();
      for (const Tensor& t : layer.tensors) {
        bytes.back().emplace_back(t.nbytes(), kSentinel);
        destinations.back().tensors.push_back({.data = bytes.back().back().data(),
                                               .size_bytes = t.nbytes(),
                                               .dtype = t.dtype()});
      }
    }
  }
  bool Untouched() const {
    for (const auto& layer : bytes) {
      for (const std::vector<uint8_t>& b : layer) {
        if (std::count(b.begin(), b.end(), kSentinel) != static_cast<int64_t>(b.size()))
          return false;
      }
    }
    return true;
  }
  bool Holds(size_t l, size_t t, const Tensor& expected) const {
    const std::vector<uint8_t>& b = bytes[l][t];
    return b.size() == expected.nbytes() &&
           std::equal(b.begin(), b.end(), expected.data());
  }
};

// The regions a memory resource reported (callbacks may run on any thread).
class RegionLog {
 public:
  RegionCallbacks Callbacks(const std::shared_ptr<RegionLog>& self) {
    return {
        .mapped = [self](void* p, size_t n) { self->Add(&self->mapped_, p, n); },
        .unmapping = [self](void* p, size_t n) { self->Add(&self->unmapped_, p, n); }};
  }
  // Whether [p, p + n) lies in a region reported mapped and not unmapped.
  bool Covers(const uint8_t* p, uint64_t n) const {
    std::lock_guard<std::mutex> lock(mu_);
    for (const MemoryRegion& r : mapped_) {
      const auto* base = static_cast<const uint8_t*>(r.base);
      if (p >= base && p + n <= base + r.bytes &&
          std::find(unmapped_.begin(), unmapped_.end(), r) == unmapped_.end()) {
        return true;
      }
    }
    return false;
  }

 private:
  void Add(std::vector<MemoryRegion>* to, void* p, size_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    to->push_back({p, n});
  }
  mutable std::mutex mu_;
  std::vector<MemoryRegion> mapped_, unmapped_;
};

class RestoreIntoTest : public testing::EngineFixture {
 protected:
  RestoreIntoTest() : EngineFixture("RestoreIntoTest") {}

  // Every engine of these tests reports its regions to regions_.
  std::unique_ptr<Engine> Open(EngineOptions o) {
    o.on_region = regions_->Callbacks(regions_);
    return EngineFixture::Open(std::move(o));
  }

  // An engine holding `blocks` KvSpec blocks in RAM, their match and what
  // Restore returns for it.
  struct Stored {
    std::unique_ptr<Engine> engine;
    MatchResult match;
    RestoreResult expected;
  };
  Stored StoreBlocks(size_t blocks) {
    Stored s;
    s.engine = Open(OnDisk(16 << 20));
    if (s.engine == nullptr) return s;
    StatusOr<Namespace> ns = s.engine->RegisterModel(KvSpec());
    EXPECT_OK(ns);
    const std::vector<int32_t> tokens = Tokens(blocks * kBlockTokens);
    StoreAll(*s.engine, *ns, tokens);
    s.expected = MatchAndRestore(*s.engine, *ns, tokens);
    StatusOr<MatchResult> m = s.engine->Match(*ns, tokens);
    EXPECT_OK(m);
    if (m.ok()) s.match = std::move(m).value();
    return s;
  }

  // Restores `prompt` with Restore, then with RestoreInto into contiguous
  // caller buffers, and checks that both restored the same: every byte,
  // shape, cache type, meta and counter.
  RestoreIntoResult ExpectSameAsRestore(Engine& e, Namespace ns,
                                        const std::vector<int32_t>& prompt) {
    const RestoreResult expected = MatchAndRestore(e, ns, prompt);
    EXPECT_GT(expected.restored_tokens, 0u);
    CallerBuffers buffers(expected);
    StatusOr<MatchResult> m = e.Match(ns, prompt);
    EXPECT_OK(m);
    StatusOr<RestoreIntoResult> got = e.RestoreInto(*m, buffers.destinations);
    EXPECT_OK(got);
    if (!got.ok()) return {};
    const RestoreResult& r = got->result;
    EXPECT_EQ(r.restored_tokens, expected.restored_tokens);
    EXPECT_EQ(r.restored_blocks, expected.restored_blocks);
    EXPECT_EQ(r.reason, expected.reason);
    EXPECT_EQ(r.window.window_tokens, expected.window.window_tokens);
    EXPECT_EQ(r.layers.size(), expected.layers.size());
    EXPECT_EQ(got->written.size(), expected.layers.size());
    for (size_t l = 0; l < std::min(r.layers.size(), got->written.size()); ++l) {
      const LayerState& want = expected.layers[l];
      EXPECT_EQ(r.layers[l].cache_type, want.cache_type) << "layer " << l;
      EXPECT_EQ(r.layers[l].meta, want.meta) << "layer " << l;
      EXPECT_EQ(r.layers[l].placeholder, want.placeholder) << "layer " << l;
      EXPECT_TRUE(r.layers[l].tensors.empty()) << "the bytes are in the destinations";
      EXPECT_EQ(got->written[l].size(), want.tensors.size());
      for (size_t t = 0; t < want.tensors.size(); ++t) {
        EXPECT_TRUE(buffers.Holds(l, t, want.tensors[t]))
            << "layer " << l << " tensor " << t;
        if (t < got->written[l].size()) {
          EXPECT_EQ(got->written[l][t], (RestoredTensorShape{want.tensors[t].dtype(),
                                                             want.tensors[t].shape()}));
        }
      }
    }
    ExpectPlanIsRestore(e, ns, prompt, expected);
    return got.ok() ? std::move(got).value() : RestoreIntoResult{};
  }

  // Plans `prompt`'s restore, applies the plan's ranges with memcpy into one
  // buffer per layer and checks that they hold what Restore returned, every
  // range read from a reported region.
  void ExpectPlanIsRestore(Engine& e, Namespace ns, const std::vector<int32_t>& prompt,
                           const RestoreResult& expected) {
    ASSERT_OK_AND_ASSIGN(MatchResult m, e.Match(ns, prompt));
    ASSERT_OK_AND_ASSIGN(RestorePlan plan, e.PlanRestore(m));
    EXPECT_EQ(plan.result.restored_tokens, expected.restored_tokens);
    EXPECT_EQ(plan.result.restored_blocks, expected.restored_blocks);
    EXPECT_EQ(plan.result.reason, expected.reason);
    ASSERT_EQ(plan.layers.size(), expected.layers.size());
    for (size_t l = 0; l < plan.layers.size(); ++l) {
      const LayerState& want = expected.layers[l];
      EXPECT_EQ(plan.result.layers[l].cache_type, want.cache_type) << "layer " << l;
      EXPECT_EQ(plan.result.layers[l].meta, want.meta) << "layer " << l;
      EXPECT_EQ(plan.result.layers[l].placeholder, want.placeholder) << "layer " << l;
      std::vector<uint8_t> layout(plan.layers[l].bytes, kSentinel);
      for (const PlanRange& r : plan.layers[l].ranges) {
        for (uint64_t i = 0; i < r.count; ++i) {
          const uint8_t* src = r.src + i * r.src_stride_bytes;
          const uint64_t at = r.dst_offset + i * r.dst_stride_bytes;
          EXPECT_TRUE(regions_->Covers(src, r.bytes)) << "layer " << l;
          ASSERT_LE(at + r.bytes, layout.size()) << "layer " << l;
          std::memcpy(layout.data() + at, src, r.bytes);
        }
      }
      ASSERT_EQ(plan.layers[l].tensors.size(), want.tensors.size()) << "layer " << l;
      for (size_t t = 0; t < want.tensors.size(); ++t) {
        const PlannedTensor& planned = plan.layers[l].tensors[t];
        EXPECT_EQ(planned.shape, (RestoredTensorShape{want.tensors[t].dtype(),
                                                      want.tensors[t].shape()}));
        ASSERT_EQ(planned.nbytes, want.tensors[t].nbytes());
        EXPECT_EQ(planned.offset % 64, 0u);
        EXPECT_EQ(std::memcmp(layout.data() + planned.offset, want.tensors[t].data(),
                              planned.nbytes),
                  0)
            << "layer " << l << " tensor " << t;
      }
      std::vector<uint8_t> copied(plan.layers[l].bytes, kSentinel);
      CopyPlannedLayer(plan.layers[l], copied.data());
      EXPECT_EQ(copied, layout) << "CopyPlannedLayer applies the same ranges";
    }
  }

  std::shared_ptr<RegionLog> regions_ = std::make_shared<RegionLog>();
};

TEST_F(RestoreIntoTest, FullLayersFromRamAreRestoresBytes) {
  auto e = Open(OnDisk(16 << 20));
  ASSERT_NE(e, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace ns, e->RegisterModel(KvSpec()));
  const std::vector<int32_t> tokens = Tokens(3 * kBlockTokens);
  StoreAll(*e, ns, tokens);
  RestoreIntoResult r = ExpectSameAsRestore(*e, ns, Tokens(3 * kBlockTokens + 2));
  EXPECT_EQ(r.result.blocks_from_hot, 3u);
  EXPECT_EQ(r.result.restored_tokens, tokens.size());
}

TEST_F(RestoreIntoTest, FullLayersFromSsdAreRestoresBytes) {
  auto e = Open(OnDisk(0));  // no hot tier: every block is an SSD read
  ASSERT_NE(e, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace ns, e->RegisterModel(KvSpec()));
  StoreAll(*e, ns, Tokens(2 * kBlockTokens));
  RestoreIntoResult r = ExpectSameAsRestore(*e, ns, Tokens(2 * kBlockTokens));
  EXPECT_EQ(r.result.blocks_from_ssd, 2u);
}

TEST_F(RestoreIntoTest, RotatingAndArraysTipsAreRestoresBytes) {
  auto e = Open(OnDisk(16 << 20));
  ASSERT_NE(e, nullptr);
  ASSERT_OK_AND_ASSIGN(
      Namespace ns,
      e->RegisterModel(SpecOf({"KVCache", "RotatingKVCache", "ArraysCache"})));
  const std::vector<int32_t> tokens = Tokens(3 * kBlockTokens);
  const int64_t n = static_cast<int64_t>(tokens.size());
  std::vector<LayerState> layers = testing::KvLayers(1, n, rng_);
  layers.push_back(RotatingLayer(n, rng_));
  layers.push_back(ArraysLayer(n, rng_));
  ASSERT_OK(e->Store(ns, tokens, layers));
  RestoreIntoResult r = ExpectSameAsRestore(*e, ns, tokens);
  EXPECT_EQ(r.result.restored_tokens, tokens.size());
  ASSERT_EQ(r.result.layers.size(), 3u);
  EXPECT_EQ(r.result.layers[1].cache_type, kRestoredRotatingType);
}

TEST_F(RestoreIntoTest, PartialTipsAndWalkBackAreRestoresBytes) {
  auto e = Open(OnDisk(16 << 20));
  ASSERT_NE(e, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace ns,
                       e->RegisterModel(SpecOf({"KVCache", "RotatingKVCache"}),
                                        {.store_partial_tail = true}));
  // A turn ending mid-block (a partial tip at 10), then a longer turn (its
  // tip at 16). A prompt branching off at 12 matches three full blocks whose
  // rotating layers are placeholders: walk-back returns to the partial tip.
  for (int64_t n : {10, 16}) {
    std::vector<LayerState> layers = testing::KvLayers(1, n, rng_);
    layers.push_back(RotatingLayer(n, rng_));
    ASSERT_OK(e->Store(ns, Tokens(static_cast<size_t>(n)), layers));
  }
  std::vector<int32_t> prompt = Tokens(3 * kBlockTokens);
  prompt.push_back(999);
  RestoreIntoResult r = ExpectSameAsRestore(*e, ns, prompt);
  EXPECT_EQ(r.result.restored_tokens, 10u);
  EXPECT_EQ(r.result.restored_blocks, 3u);
  EXPECT_NE(r.result.reason.find("partial tip"), std::string::npos) << r.result.reason;
}

TEST_F(RestoreIntoTest, QuantizedLayersOfMixedDtypesAreRestoresBytes) {
  auto e = Open(OnDisk(16 << 20));
  ASSERT_NE(e, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace ns, e->RegisterModel(SpecOf({"QuantizedKVCache"})));
  const std::vector<int32_t> tokens = Tokens(3 * kBlockTokens);
  LayerState q;
  q.cache_type = "QuantizedKVCache";
  q.tensors = {testing::RandomTensor(rng_, DType::kUInt32, {1, 2, 12, 2}),
               testing::RandomTensor(rng_, DType::kFloat16, {1, 2, 12, 1}),
               testing::RandomTensor(rng_, DType::kFloat16, {1, 2, 12, 1})};
  ASSERT_OK(e->Store(ns, tokens, {q}));
  ExpectSameAsRestore(*e, ns, tokens);
}

TEST_F(RestoreIntoTest, StridedDestinationsTakeTheRestoredPositionsOnly) {
  Stored s = StoreBlocks(3);
  ASSERT_NE(s.engine, nullptr);
  const RestoreResult& expected = s.expected;
  ASSERT_EQ(expected.layers.size(), 2u);
  // Keys [1, 2, T, 8] float32 go to the caller's [1, 2, 20, 8] (room for 20
  // tokens); values go token-major, [1, 20, 2, 16] with every other float.
  constexpr int64_t kMax = 20, kT = 12;
  std::vector<std::vector<uint8_t>> keys(
      2, std::vector<uint8_t>(kMax * 2 * 8 * 4, kSentinel));
  std::vector<std::vector<uint8_t>> values(
      2, std::vector<uint8_t>(kMax * 2 * 16 * 4, kSentinel));
  std::vector<LayerDestination> dests(2);
  for (size_t l = 0; l < 2; ++l) {
    dests[l].tensors = {
        {keys[l].data(), keys[l].size(), DType::kFloat32, {0, kMax * 8 * 4, 8 * 4, 4}},
        {values[l].data(),
         values[l].size(),
         DType::kFloat32,
         {0, 16 * 4, 2 * 16 * 4, 8}}};
  }
  ASSERT_OK_AND_ASSIGN(RestoreIntoResult r, s.engine->RestoreInto(s.match, dests));
  EXPECT_EQ(r.result.restored_tokens, static_cast<uint64_t>(kT));
  for (size_t l = 0; l < 2; ++l) {
    const float* k = expected.layers[l].tensors[0].data_as<float>();
    const float* v = expected.layers[l].tensors[1].data_as<float>();
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t p = 0; p < kMax; ++p) {
        for (int64_t d = 0; d < 8; ++d) {
          const uint8_t* kd = keys[l].data() + ((h * kMax + p) * 8 + d) * 4;
          const uint8_t* vd = values[l].data() + ((p * 2 + h) * 16 + 2 * d) * 4;
          const uint8_t* gap = vd + 4;  // the float between two values
          const size_t at = static_cast<size_t>((h * kT + p) * 8 + d);
          if (p < kT) {
            EXPECT_EQ(std::memcmp(kd, k + at, 4), 0)
                << l << " " << h << " " << p << " " << d;
            EXPECT_EQ(std::memcmp(vd, v + at, 4), 0)
                << l << " " << h << " " << p << " " << d;
          } else {
            EXPECT_EQ(kd[0], kSentinel) << "position " << p << " was not restored";
            EXPECT_EQ(vd[0], kSentinel) << "position " << p << " was not restored";
          }
          EXPECT_EQ(gap[0], kSentinel) << "the value stride skips it";
        }
      }
    }
  }
}

// A destination given as the shape of a C-contiguous array, without strides:
// a [1, heads, 20, dim] array takes a 12-token restore in the first 12
// positions of each head's rows, as a strided description of it would,
// from RAM and from SSD alike (where cold blocks are copied as they arrive).
TEST_F(RestoreIntoTest, AnArrayShapeWithoutStridesIsTheArraysRowMajorLayout) {
  constexpr int64_t kMax = 20, kT = 12;
  const std::vector<int32_t> tokens = Tokens(kT);
  RestoreResult expected;
  for (const bool cold : {false, true}) {
    SCOPED_TRACE(cold ? "from SSD" : "from RAM");
    auto e = Open(OnDisk(16 << 20));  // reopened: the hot tier starts empty
    ASSERT_NE(e, nullptr);
    ASSERT_OK_AND_ASSIGN(Namespace ns, e->RegisterModel(KvSpec()));
    if (!cold) {
      StoreAll(*e, ns, tokens);
      expected = MatchAndRestore(*e, ns, tokens);
    }
    ASSERT_EQ(expected.layers.size(), 2u);
    std::vector<std::vector<std::vector<uint8_t>>> arrays(2);
    std::vector<LayerDestination> dests(2);
    for (size_t l = 0; l < 2; ++l) {
      for (size_t t = 0; t < 2; ++t) {
        std::vector<uint8_t>& a = arrays[l].emplace_back(kMax * 2 * 8 * 4, kSentinel);
        dests[l].tensors.push_back({.data = a.data(),
                                    .size_bytes = a.size(),
                                    .dtype = DType::kFloat32,
                                    .shape = {1, 2, kMax, 8}});
      }
    }
    ASSERT_OK_AND_ASSIGN(MatchResult m, e->Match(ns, tokens));
    ASSERT_OK_AND_ASSIGN(RestoreIntoResult r, e->RestoreInto(m, dests));
    ASSERT_EQ(r.result.restored_tokens, static_cast<uint64_t>(kT));
    EXPECT_EQ(r.result.blocks_from_ssd, cold ? 3u : 0u);
    constexpr size_t kRow = 8 * 4;
    for (size_t l = 0; l < 2; ++l) {
      for (size_t t = 0; t < 2; ++t) {
        const uint8_t* want = expected.layers[l].tensors[t].data();
        for (int64_t h = 0; h < 2; ++h) {
          for (int64_t p = 0; p < kMax; ++p) {
            const uint8_t* got = arrays[l][t].data() + (h * kMax + p) * kRow;
            if (p < kT) {
              EXPECT_EQ(std::memcmp(got, want + (h * kT + p) * kRow, kRow), 0)
                  << "layer " << l << " tensor " << t << " head " << h << " position "
                  << p << ": not the restored row";
            } else {
              EXPECT_EQ(std::count(got, got + kRow, kSentinel), int64_t{kRow})
                  << "layer " << l << " tensor " << t << " head " << h << " position "
                  << p << " was not restored but written";
            }
          }
        }
      }
    }
    ASSERT_OK(e->Close());
  }
}

TEST_F(RestoreIntoTest, BadDestinationsAreRefusedWithNothingWritten) {
  Stored s = StoreBlocks(2);
  ASSERT_NE(s.engine, nullptr);
  // Each case spoils the last tensor of the last layer only: a restore that
  // wrote before checking would have filled every other buffer.
  const std::vector<std::pair<std::string, std::function<void(CallerBuffers&)>>> cases = {
      {"too small",
       [](CallerBuffers& b) { b.destinations[1].tensors[1].size_bytes -= 1; }},
      {"wrong dtype",
       [](CallerBuffers& b) { b.destinations[1].tensors[1].dtype = DType::kFloat16; }},
      {"null", [](CallerBuffers& b) { b.destinations[1].tensors[1].data = nullptr; }},
      {"stride count",
       [](CallerBuffers& b) {
         b.destinations[1].tensors[1].strides_bytes = {4, 4};
       }},
      {"negative stride",
       [](CallerBuffers& b) {
         b.destinations[1].tensors[1].strides_bytes = {0, 256, -32, 4};
       }},
      {"overlapping strides",
       [](CallerBuffers& b) {
         b.destinations[1].tensors[1].strides_bytes = {0, 128, 16, 4};
       }},
      {"overflowing stride",
       [](CallerBuffers& b) {
         b.destinations[1].tensors[1].strides_bytes = {0, INT64_MAX, 32, 4};
       }},
      {"array shape",
       [](CallerBuffers& b) {
         b.destinations[1].tensors[1].shape = {1, 2, 7, 8};  // 8 tokens restored
       }},
      {"tensor count", [](CallerBuffers& b) { b.destinations[1].tensors.pop_back(); }},
      {"layer count", [](CallerBuffers& b) { b.destinations.pop_back(); }},
  };
  for (const auto& [name, spoil] : cases) {
    CallerBuffers buffers(s.expected);
    spoil(buffers);
    StatusOr<RestoreIntoResult> r = s.engine->RestoreInto(s.match, buffers.destinations);
    EXPECT_TRUE(r.status().IsInvalidArgument()) << name << ": " << r.status().ToString();
    EXPECT_TRUE(buffers.Untouched()) << name << ": the caller's memory was written";
  }
}

TEST_F(RestoreIntoTest, EachLayerIsCompleteWhenItsCallbackRunsAndNextOnesAreNot) {
  auto e = Open(OnDisk(16 << 20));
  ASSERT_NE(e, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace ns, e->RegisterModel(testing::KvSpec("into-model", 4)));
  const std::vector<int32_t> tokens = Tokens(3 * kBlockTokens);
  ASSERT_OK(e->Store(ns, tokens, testing::KvLayers(4, 12, rng_)));
  const RestoreResult expected = MatchAndRestore(*e, ns, tokens);
  CallerBuffers buffers(expected);
  std::vector<size_t> told;
  ASSERT_OK_AND_ASSIGN(MatchResult m, e->Match(ns, tokens));
  ASSERT_OK(e->RestoreInto(m, buffers.destinations, [&](size_t layer) {
    told.push_back(layer);
    for (size_t l = 0; l < expected.layers.size(); ++l) {
      for (size_t t = 0; t < 2; ++t) {
        const bool done = buffers.Holds(l, t, expected.layers[l].tensors[t]);
        const bool blank =
            std::count(buffers.bytes[l][t].begin(), buffers.bytes[l][t].end(),
                       kSentinel) == static_cast<int64_t>(buffers.bytes[l][t].size());
        EXPECT_TRUE(l <= layer ? done : blank)
            << "told layer " << layer << ": layer " << l << " tensor " << t;
      }
    }
  }));
  EXPECT_EQ(told, (std::vector<size_t>{0, 1, 2, 3}));
}

TEST_F(RestoreIntoTest, NothingRestoredWritesNothingAndIsCounted) {
  auto e = Open(OnDiskOnFakeClock());
  ASSERT_NE(e, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace ns, e->RegisterModel(KvSpec()));
  ASSERT_OK_AND_ASSIGN(MatchResult m, e->Match(ns, Tokens(kBlockTokens)));
  std::vector<LayerDestination> dests(2);
  int calls = 0;
  ASSERT_OK_AND_ASSIGN(RestoreIntoResult r,
                       e->RestoreInto(m, dests, [&](size_t) { ++calls; }));
  EXPECT_EQ(r.result.restored_tokens, 0u);
  EXPECT_TRUE(r.written.empty());
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(e->Stats().owners[0].restore_latency->count(), 1u) << "timed as Restore";
  EXPECT_TRUE(e->RestoreInto(m, {}).status().IsInvalidArgument()) << "layer count";
}

TEST_F(RestoreIntoTest, PlannedBlocksStayInRamUntilThePlanIsReleased) {
  // Room for about six 4-token blocks of this model.
  EngineOptions o = OnDisk(6 * (4 * 256 + 1024));
  auto e = Open(o);
  ASSERT_NE(e, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace ns, e->RegisterModel(KvSpec()));
  const std::vector<int32_t> tokens = Tokens(3 * kBlockTokens);
  StoreAll(*e, ns, tokens);
  const RestoreResult expected = MatchAndRestore(*e, ns, tokens);
  ASSERT_OK_AND_ASSIGN(MatchResult m, e->Match(ns, tokens));
  ASSERT_OK_AND_ASSIGN(RestorePlan plan, e->PlanRestore(m));
  EXPECT_EQ(plan.result.blocks_from_hot, 3u);
  EXPECT_GT(e->Stats().hot.pinned_bytes, 0u);
  // Other prompts fill the budget many times over: least recently used
  // first, the planned blocks would go first.
  auto fill = [&](int32_t first) {
    for (int32_t i = 0; i < 12; ++i) {
      StoreAll(*e, ns, Tokens(2 * kBlockTokens, first + 1000 * i));
    }
  };
  fill(10000);
  EXPECT_GT(e->Stats().hot.evictions, 0u);
  for (const BlockKey& key : m.keys) EXPECT_TRUE(EngineHotTier(*e, ns)->Contains(key));
  ExpectPlanIsRestore(*e, ns, tokens, expected);  // another plan of the same blocks
  for (size_t l = 0; l < plan.layers.size(); ++l) {
    std::vector<uint8_t> layout(plan.layers[l].bytes);
    CopyPlannedLayer(plan.layers[l], layout.data());
    for (size_t t = 0; t < plan.layers[l].tensors.size(); ++t) {
      EXPECT_EQ(std::memcmp(layout.data() + plan.layers[l].tensors[t].offset,
                            expected.layers[l].tensors[t].data(),
                            plan.layers[l].tensors[t].nbytes),
                0);
    }
  }
  plan.Release();
  EXPECT_EQ(e->Stats().hot.pinned_bytes, 0u);
  fill(20000);
  size_t resident = 0;
  for (const BlockKey& key : m.keys)
    resident += EngineHotTier(*e, ns)->Contains(key) ? 1 : 0;
  EXPECT_LT(resident, m.keys.size()) << "released: evictable again";
  ASSERT_OK_AND_ASSIGN(EngineAudit audit, e->Audit());
  EXPECT_TRUE(audit.ok());
}

TEST_F(RestoreIntoTest, APlanOutlivesCloseAndNothingRestoredPlansNothing) {
  Stored s = StoreBlocks(2);
  ASSERT_NE(s.engine, nullptr);
  ASSERT_OK_AND_ASSIGN(RestorePlan plan, s.engine->PlanRestore(s.match));
  ASSERT_OK_AND_ASSIGN(MatchResult none,
                       s.engine->Match(s.match.ns, Tokens(kBlockTokens, 5000)));
  ASSERT_OK_AND_ASSIGN(RestorePlan empty, s.engine->PlanRestore(none));
  EXPECT_EQ(empty.result.restored_tokens, 0u);
  EXPECT_TRUE(empty.layers.empty());
  EXPECT_EQ(s.engine->Stats().owners[0].restore_latency->count(), 3u)
      << "timed as Restore";
  ASSERT_OK(s.engine->Close());
  EXPECT_TRUE(s.engine->PlanRestore(s.match).status().IsInvalidArgument());
  s.engine.reset();
  // The pins keep the budget, the records keep the memory resource.
  for (size_t l = 0; l < plan.layers.size(); ++l) {
    std::vector<uint8_t> layout(plan.layers[l].bytes);
    CopyPlannedLayer(plan.layers[l], layout.data());
    EXPECT_EQ(std::memcmp(layout.data(), s.expected.layers[l].tensors[0].data(),
                          s.expected.layers[l].tensors[0].nbytes()),
              0);
  }
  plan.Release();
  EXPECT_EQ(plan.hold, nullptr);
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

// A block read from SSD is copied into the caller's memory as it arrives,
// while the next ones are read: when layer 0 is reported, every layer of a
// cold restore holds its bytes already. Hot blocks are still copied layer by
// layer at the end, so in a restore of both, the last layer still waits for
// its hot blocks when layer 0 is reported.
TEST_F(RestoreIntoTest, AColdRestoreCopiesEachBlockAsItArrives) {
  const NamespaceSpec spec = testing::KvSpec("into-model", 4);
  const std::vector<int32_t> tokens = Tokens(4 * kBlockTokens);
  RestoreResult expected;
  {
    auto e = Open(OnDisk(16 << 20));
    ASSERT_NE(e, nullptr);
    ASSERT_OK_AND_ASSIGN(Namespace ns, e->RegisterModel(spec));
    ASSERT_OK(e->Store(ns, tokens, testing::KvLayers(4, 16, rng_)));
    expected = MatchAndRestore(*e, ns, tokens);
    ASSERT_OK(e->Close());
  }
  auto holds_all = [&](const CallerBuffers& buffers, size_t l) {
    return buffers.Holds(l, 0, expected.layers[l].tensors[0]) &&
           buffers.Holds(l, 1, expected.layers[l].tensors[1]);
  };
  for (const bool mixed : {false, true}) {
    SCOPED_TRACE(mixed ? "two hot blocks, two from SSD" : "every block from SSD");
    auto e = Open(OnDisk(16 << 20));  // reopened: the hot tier starts empty
    ASSERT_NE(e, nullptr);
    ASSERT_OK_AND_ASSIGN(Namespace ns, e->RegisterModel(spec));
    if (mixed) {
      EXPECT_EQ(MatchAndRestore(*e, ns, Tokens(2 * kBlockTokens)).blocks_from_ssd, 2u);
    }
    CallerBuffers buffers(expected);
    ASSERT_OK_AND_ASSIGN(MatchResult m, e->Match(ns, tokens));
    std::vector<size_t> told;
    ASSERT_OK_AND_ASSIGN(
        RestoreIntoResult r, e->RestoreInto(m, buffers.destinations, [&](size_t layer) {
          told.push_back(layer);
          if (layer != 0) return;
          EXPECT_TRUE(holds_all(buffers, 0));
          EXPECT_EQ(holds_all(buffers, 3), !mixed) << "layer 3 when layer 0 is reported";
        }));
    EXPECT_EQ(r.result.blocks_from_ssd, mixed ? 2u : 4u);
    EXPECT_EQ(r.result.blocks_from_hot, mixed ? 2u : 0u);
    EXPECT_EQ(told, (std::vector<size_t>{0, 1, 2, 3}));
    for (size_t l = 0; l < 4; ++l) EXPECT_TRUE(holds_all(buffers, l)) << "layer " << l;
    ASSERT_OK(e->Close());
  }
}

// A cold restore copies blocks where a restore of the whole match puts them;
// when a later block fails (damaged on disk), the restore is shorter, its
// row-major layout has other strides, and every byte is written again where
// the shorter restore puts it.
TEST_F(RestoreIntoTest, AColdRestoreCutShortByADamagedBlockIsLaidOutForWhatItRestored) {
  const std::vector<int32_t> tokens = Tokens(3 * kBlockTokens);
  RestoreResult whole, first_two;
  {
    auto e = Open(OnDisk(16 << 20));
    ASSERT_NE(e, nullptr);
    ASSERT_OK_AND_ASSIGN(Namespace ns, e->RegisterModel(KvSpec()));
    StoreAll(*e, ns, tokens);
    whole = MatchAndRestore(*e, ns, tokens);
    first_two = MatchAndRestore(*e, ns, Tokens(2 * kBlockTokens));
    ASSERT_OK(e->Close());
  }
  ASSERT_EQ(first_two.restored_blocks, 2u);
  // Block 2's first row of keys (layer 0: [1, 2, 12, 8] float32) is unique.
  const Tensor& keys = whole.layers[0].tensors[0];
  const size_t row = 8 * sizeof(float);
  ASSERT_TRUE(DamageOnDisk(
      dir_.str(),
      std::string_view(reinterpret_cast<const char*>(keys.data() + 8 * row), row)));
  auto e = Open(OnDisk(16 << 20));
  ASSERT_NE(e, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace ns, e->RegisterModel(KvSpec()));
  CallerBuffers buffers(whole);  // room for the whole match
  ASSERT_OK_AND_ASSIGN(MatchResult m, e->Match(ns, tokens));
  ASSERT_EQ(m.keys.size(), 3u);
  ASSERT_OK_AND_ASSIGN(RestoreIntoResult r, e->RestoreInto(m, buffers.destinations));
  EXPECT_EQ(r.result.restored_blocks, 2u) << r.result.reason;
  EXPECT_EQ(r.result.blocks_from_ssd, 2u);
  ASSERT_EQ(r.written.size(), 2u);
  for (size_t l = 0; l < 2; ++l) {
    for (size_t t = 0; t < 2; ++t) {
      const Tensor& want = first_two.layers[l].tensors[t];
      EXPECT_EQ(r.written[l][t], (RestoredTensorShape{want.dtype(), want.shape()}));
      EXPECT_EQ(std::memcmp(buffers.bytes[l][t].data(), want.data(), want.nbytes()), 0)
          << "layer " << l << " tensor " << t;
    }
  }
}

// ---- RestoreInto and PlanRestore against the prefix's own bytes, concurrently

// Words that are a function of the prefix they end: row r of head k of a
// tensor salted `salt` holds hashes[r] + salt * 4096 + k * width + j, so the
// bytes any restore of a prompt's first n tokens must give are known, whatever
// concurrent stores, strips and evictions did meanwhile.
Tensor PrefixRows(const std::vector<uint32_t>& hashes, size_t rows, uint32_t salt,
                  DType dtype, int64_t width) {
  std::vector<uint32_t> w(2 * rows * static_cast<size_t>(width));
  for (size_t k = 0; k < 2; ++k) {
    for (size_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < width; ++j) {
        w[(k * rows + r) * static_cast<size_t>(width) + static_cast<size_t>(j)] =
            hashes[r] + salt * 4096 + static_cast<uint32_t>(k * width + j);
      }
    }
  }
  return Tensor(dtype, {1, 2, static_cast<int64_t>(rows), width},
                SharedBytes::Copy(w.data(), w.size() * 4));
}

// The layers of `tokens` in a namespace of `types`: full KV, quantized KV
// (uint32 packed rows and float scales) and a window of the last 4 positions.
std::vector<LayerState> PrefixLayers(const std::vector<std::string>& types,
                                     const std::vector<int32_t>& tokens) {
  std::vector<uint32_t> h(tokens.size());
  uint32_t x = 2166136261u;
  for (size_t i = 0; i < tokens.size(); ++i) {
    x = (x ^ static_cast<uint32_t>(tokens[i])) * 16777619u;
    h[i] = x;
  }
  const int64_t n = static_cast<int64_t>(tokens.size());
  std::vector<LayerState> layers;
  for (size_t l = 0; l < types.size(); ++l) {
    const auto salt = static_cast<uint32_t>(2 * l);
    LayerState layer{types[l], {std::to_string(n)}, false, {}};
    if (types[l] == "KVCache") {
      layer.tensors = {PrefixRows(h, h.size(), salt, DType::kFloat32, 8),
                       PrefixRows(h, h.size(), salt + 1, DType::kFloat32, 8)};
    } else if (types[l] == "QuantizedKVCache") {
      layer.meta = {std::to_string(n), "64", "4"};
      layer.tensors = {PrefixRows(h, h.size(), salt, DType::kUInt32, 2),
                       PrefixRows(h, h.size(), salt + 1, DType::kFloat32, 1)};
    } else {  // RotatingKVCache
      layer.meta = RotatingMeta{0, 4, n, n % 4}.ToStrings();
      const std::vector<uint32_t> last(4, h.back());
      layer.tensors = {PrefixRows(last, 4, salt, DType::kFloat32, 8),
                       PrefixRows(last, 4, salt + 1, DType::kFloat32, 8)};
    }
    layers.push_back(std::move(layer));
  }
  return layers;
}

// Many restores of prompts that concurrent stores keep extending, forking,
// stripping (supersede-on-extend) and evicting (a small hot tier over SSD),
// each by Restore, by RestoreInto into token-major caller buffers with room
// for more tokens than restored, or by PlanRestore, whose plan is applied
// again, with stores and evictions in between, just before it is released:
// every one holds exactly the bytes of the prompt's first restored tokens,
// RestoreInto leaves the positions after them untouched and reports each
// layer once, in order; with every plan released nothing is pinned and the
// audit recomputes every counter.
TEST_F(RestoreIntoTest,
       RandomRestoresIntoBuffersAndPlansUnderConcurrentStoresAreThePrefixsBytes) {
  constexpr int64_t kMaxTokens = 64;
  const std::vector<std::vector<std::string>> kinds = {{"KVCache", "RotatingKVCache"},
                                                       {"KVCache", "QuantizedKVCache"}};
  auto e = Open(OnDisk(16 * 1024));
  ASSERT_NE(e, nullptr);
  std::vector<Namespace> spaces;
  for (const std::vector<std::string>& types : kinds) {
    NamespaceSpec spec = testing::KvSpec("concurrent-" + types[1]);
    spec.layer_types = types;
    ASSERT_OK_AND_ASSIGN(Namespace ns,
                         e->RegisterModel(spec, {.store_partial_tail = true}));
    spaces.push_back(ns);
  }
  const uint64_t reader_ops = testing::Iterations(120, 4000);
  std::mutex mu;
  std::vector<std::vector<std::vector<int32_t>>> stored(kinds.size());  // by mu
  std::atomic<int> readers_left{2};
  std::atomic<uint64_t> restored_into{0}, planned{0};
  // The writer stores at least this much whatever the readers do (the hot
  // tier spills long before), and the readers start once it stored a few:
  // a reader scheduled ahead of the writer used up its reads on an empty
  // cache, and a run with no spill checked nothing under eviction.
  const uint64_t min_stores = 300;
  std::atomic<uint64_t> stores{0};
  std::atomic<bool> writer_done{false};

  auto writer = [&](uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<std::vector<std::vector<int32_t>>> convs(kinds.size());
    for (uint64_t op = 0;
         (readers_left.load() > 0 || op < min_stores) && op < 100 * reader_ops; ++op) {
      const size_t k = rng() % kinds.size();
      std::vector<std::vector<int32_t>>& mine = convs[k];
      if (mine.empty() || rng() % 4 == 0) {  // a new conversation or a fork
        std::vector<int32_t> from =
            mine.empty() ? std::vector<int32_t>{} : mine[rng() % mine.size()];
        from.resize(from.empty() ? 0 : rng() % (from.size() + 1));
        mine.push_back(std::move(from));
      }
      std::vector<int32_t>& c = mine[rng() % mine.size()];
      if (c.size() + 10 > static_cast<size_t>(kMaxTokens)) c.resize(rng() % 8);
      for (uint64_t n = 1 + rng() % 9; n > 0; --n)
        c.push_back(static_cast<int32_t>(rng() % 3));
      EXPECT_OK(e->Store(spaces[k], c, PrefixLayers(kinds[k], c))) << "op " << op;
      std::lock_guard<std::mutex> lock(mu);
      stored[k].push_back(c);
      stores.fetch_add(1);
    }
    writer_done.store(true);
  };

  // What a restore of the first `n` tokens of `prompt` holds.
  auto expected = [&](size_t k, const std::vector<int32_t>& prompt, uint64_t n) {
    return PrefixLayers(kinds[k],
                        std::vector<int32_t>(prompt.begin(), prompt.begin() + n));
  };

  auto read = [&](uint64_t seed) {
    std::mt19937_64 rng(seed);
    struct HeldPlan {
      RestorePlan plan;
      std::vector<LayerState> want;
    };
    std::optional<HeldPlan> held;
    auto check_plan = [&](const HeldPlan& p, const char* when) {
      for (size_t l = 0; l < p.plan.layers.size(); ++l) {
        std::vector<uint8_t> layout(p.plan.layers[l].bytes, kSentinel);
        CopyPlannedLayer(p.plan.layers[l], layout.data());
        ASSERT_EQ(p.plan.layers[l].tensors.size(), p.want[l].tensors.size());
        for (size_t t = 0; t < p.want[l].tensors.size(); ++t) {
          const PlannedTensor& planned = p.plan.layers[l].tensors[t];
          const Tensor& want = p.want[l].tensors[t];
          ASSERT_EQ(planned.shape.shape, want.shape()) << when;
          EXPECT_EQ(
              std::memcmp(layout.data() + planned.offset, want.data(), want.nbytes()), 0)
              << when << ": plan of " << p.plan.result.restored_tokens
              << " tokens, layer " << l << " tensor " << t;
        }
      }
    };
    while (stores.load() < 20 && !writer_done.load()) std::this_thread::yield();
    for (uint64_t op = 0; op < reader_ops && !::testing::Test::HasFailure(); ++op) {
      const size_t k = rng() % kinds.size();
      std::vector<int32_t> prompt;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (!stored[k].empty()) prompt = stored[k][rng() % stored[k].size()];
      }
      if (prompt.empty()) {
        std::this_thread::yield();
        continue;
      }
      if (rng() % 2) prompt.resize(1 + rng() % prompt.size());
      if (rng() % 2 && prompt.size() < static_cast<size_t>(kMaxTokens))
        prompt.push_back(7);
      StatusOr<MatchResult> m = e->Match(spaces[k], prompt);
      ASSERT_OK(m);
      switch (rng() % 3) {
        case 0: {
          ASSERT_OK_AND_ASSIGN(RestoreResult r, e->Restore(*m));
          if (r.restored_tokens == 0) break;
          const std::vector<LayerState> want = expected(k, prompt, r.restored_tokens);
          for (size_t l = 0; l < want.size(); ++l) {
            EXPECT_EQ(r.layers[l].tensors, want[l].tensors) << "Restore, layer " << l;
          }
          break;
        }
        case 1: {
          // Token-major [tokens, heads, width] buffers of kMaxTokens positions,
          // described as the [1, heads, tokens, width] arrays restored.
          std::vector<std::vector<std::vector<uint8_t>>> bytes(kinds[k].size());
          std::vector<LayerDestination> dests(kinds[k].size());
          const std::vector<LayerState> shapes = PrefixLayers(kinds[k], {0});
          for (size_t l = 0; l < dests.size(); ++l) {
            for (const Tensor& t : shapes[l].tensors) {
              const int64_t w = t.dim(3), es = static_cast<int64_t>(DTypeSize(t.dtype()));
              bytes[l].emplace_back(static_cast<size_t>(kMaxTokens * 2 * w * es),
                                    kSentinel);
              dests[l].tensors.push_back({.data = bytes[l].back().data(),
                                          .size_bytes = bytes[l].back().size(),
                                          .dtype = t.dtype(),
                                          .strides_bytes = {0, w * es, 2 * w * es, es},
                                          .shape = {1, 2, kMaxTokens, w}});
            }
          }
          std::vector<size_t> told;
          ASSERT_OK_AND_ASSIGN(
              RestoreIntoResult r,
              e->RestoreInto(*m, dests, [&](size_t l) { told.push_back(l); }));
          const uint64_t n = r.result.restored_tokens;
          if (n == 0) {
            EXPECT_TRUE(told.empty());
            break;
          }
          ++restored_into;
          EXPECT_EQ(told, (std::vector<size_t>{0, 1}));
          const std::vector<LayerState> want = expected(k, prompt, n);
          for (size_t l = 0; l < want.size(); ++l) {
            for (size_t t = 0; t < want[l].tensors.size(); ++t) {
              const Tensor& wt = want[l].tensors[t];
              const int64_t rows = wt.dim(2), w = wt.dim(3);
              const size_t row = static_cast<size_t>(w) * DTypeSize(wt.dtype());
              ASSERT_EQ(r.written[l][t].shape, wt.shape());
              for (int64_t p = 0; p < kMaxTokens; ++p) {
                for (int64_t h = 0; h < 2; ++h) {
                  const uint8_t* got = bytes[l][t].data() + (p * 2 + h) * row;
                  if (p < rows) {
                    EXPECT_EQ(std::memcmp(got, wt.data() + (h * rows + p) * row, row), 0)
                        << "RestoreInto of " << n << " tokens, layer " << l << " tensor "
                        << t << " position " << p;
                  } else {
                    EXPECT_EQ(std::count(got, got + row, kSentinel),
                              static_cast<int64_t>(row))
                        << "RestoreInto of " << n << " tokens wrote position " << p
                        << " of layer " << l << " tensor " << t;
                  }
                }
              }
            }
          }
          break;
        }
        default: {
          if (held) {
            check_plan(*held, "applied again before its release");
            held->plan.Release();
            held.reset();
          }
          ASSERT_OK_AND_ASSIGN(RestorePlan plan, e->PlanRestore(*m));
          if (plan.result.restored_tokens == 0) break;
          ++planned;
          const uint64_t n = plan.result.restored_tokens;
          for (const PlannedLayer& layer : plan.layers) {
            for (const PlanRange& range : layer.ranges) {
              EXPECT_TRUE(e->memory_resource()->Contains(
                  range.src, (range.count - 1) * range.src_stride_bytes + range.bytes))
                  << "a range outside the memory resource's regions";
            }
          }
          held = HeldPlan{std::move(plan), expected(k, prompt, n)};
          check_plan(*held, "applied at once");
        }
      }
    }
    if (held) check_plan(*held, "applied again before its release");
  };
  auto reader = [&](uint64_t seed) {
    read(seed);
    readers_left.fetch_sub(1);  // also after a failed assertion
  };

  const uint64_t seed = rng_();
  std::vector<std::thread> threads;
  threads.emplace_back(writer, seed);
  threads.emplace_back(reader, seed + 1);
  threads.emplace_back(reader, seed + 2);
  for (std::thread& t : threads) t.join();
  EXPECT_GT(restored_into.load(), 0u);
  EXPECT_GT(planned.load(), 0u);
  const EngineStats stats = e->Stats();
  EXPECT_GT(stats.hot.evictions, 0u) << "the hot tier should have spilled";
  EXPECT_EQ(stats.hot.pinned_bytes, 0u) << "every plan was released";
  ASSERT_OK_AND_ASSIGN(EngineAudit audit, e->Audit());
  for (const AuditFinding& f : audit.findings) ADD_FAILURE() << f.what << " " << f.detail;
  EXPECT_TRUE(audit.orphans.empty());
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
  ASSERT_OK(EngineSsdTier(*e)->PutManifest(NamespaceRoot(KvSpec()).value(),
                                           EncodeManifest(other).value()));
  StatusOr<Namespace> ns = e->RegisterModel(KvSpec());
  EXPECT_TRUE(ns.status().IsCorruption()) << ns.status().ToString();
  EXPECT_EQ(e->model_count(), 0u);
}

// `prompt` and one more block: the adopting model went on from another
// model's blocks, which become interior blocks its sample does not look at.
std::vector<int32_t> ExtendedByABlock(const std::vector<int32_t>& prompt) {
  std::vector<int32_t> extended = prompt;
  for (int32_t t : Tokens(kBlockTokens, 6000)) extended.push_back(t);
  return extended;
}

// An engine on `dir` with a hot tier of 16 MiB.
EngineOptions InDir(const std::string& dir) {
  EngineOptions o;
  o.data_dir = dir;
  o.hot_capacity_bytes = 16 << 20;
  return o;
}

// A namespace kept from before its layer shapes were keyed (docs/format.md
// §5.1) is adopted when a sample of its blocks, chain ends first, fits the
// shapes. Another model of the same name and layout but other head dims
// wrote under the same old root, and blocks of it that the sample did not
// look at (here: interior blocks a later store of the adopting model
// extended) must never be restored for the shapes the namespace serves.
TEST_F(EngineViewsTest, AnAdoptedNamespaceNeverRestoresBlocksOfOtherShapes) {
  const NamespaceSpec legacy = KvSpec();
  NamespaceSpec shaped = legacy;
  shaped.layer_shapes = ParseLayerShapes("2x8,2x8").value();
  auto heads_of_4 = [&](int64_t tokens) {  // the other model: 2x4
    std::vector<LayerState> out(2);
    for (LayerState& l : out) {
      l.cache_type = "KVCache";
      l.meta = {std::to_string(tokens)};
      for (int i = 0; i < 2; ++i)
        l.tensors.push_back(
            testing::RandomTensor(rng_, DType::kFloat32, {1, 2, tokens, 4}));
    }
    return out;
  };
  const std::vector<int32_t> other = Tokens(2 * kBlockTokens, 5000);
  const std::vector<int32_t> extended = ExtendedByABlock(other);
  const EngineOptions o = InDir(dir_.str());
  {
    auto old = OpenWith(o);
    ASSERT_NE(old, nullptr);
    ASSERT_OK_AND_ASSIGN(Namespace ns, old->RegisterModel(legacy));
    ASSERT_OK(old->Store(ns, other, heads_of_4(static_cast<int64_t>(other.size()))));
    Store(*old, ns, extended);  // 2x8, deduplicates the 2x4 blocks it extends
    for (int32_t i = 0; i < 9; ++i)
      Store(*old, ns, Tokens(kBlockTokens, 10000 + 100 * i));
    ASSERT_OK(old->Close());
  }
  auto e = OpenWith(o);
  ASSERT_NE(e, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace adopted, e->RegisterModel(shaped));
  ASSERT_EQ(adopted.root, NamespaceRoot(legacy).value()) << "its chain ends fit 2x8";
  for (const std::vector<int32_t>* prompt :
       std::initializer_list<const std::vector<int32_t>*>{&other, &extended}) {
    ASSERT_OK_AND_ASSIGN(MatchResult m, e->Match(adopted, *prompt));
    EXPECT_EQ(m.matched_tokens(), prompt->size());  // the keys are the same
    ASSERT_OK_AND_ASSIGN(RestoreResult r, e->Restore(m));
    EXPECT_EQ(r.restored_tokens, 0u) << "2x4 blocks served as 2x8: " << r.reason;
    EXPECT_NE(r.reason.find("holds 2x4, not 2x8"), std::string::npos) << r.reason;
    ASSERT_OK_AND_ASSIGN(RestorePlan plan, e->PlanRestore(m));
    EXPECT_EQ(plan.result.restored_tokens, 0u) << plan.result.reason;
  }
  // Its own blocks still restore.
  const std::vector<int32_t> own = Tokens(kBlockTokens, 10000);
  ASSERT_OK_AND_ASSIGN(MatchResult m, e->Match(adopted, own));
  ASSERT_OK_AND_ASSIGN(RestoreResult r, e->Restore(m));
  EXPECT_EQ(r.restored_tokens, own.size()) << r.reason;
  // A store of those prompts by the adopting model replaces the other
  // model's blocks (they are never served here), not deduplicates against
  // them: else its stores of them were acknowledged and never restored.
  // A store of other shapes is refused, as a PKV.PUT record of them is: a
  // restore would never serve it.
  const uint64_t entries = e->Stats().hot.entries;
  EXPECT_TRUE(e->Store(adopted, Tokens(kBlockTokens, 7000), heads_of_4(kBlockTokens))
                  .status()
                  .IsInvalidArgument());
  EXPECT_EQ(e->Stats().hot.entries, entries);
  const std::vector<LayerState> layers = Store(*e, adopted, other);
  ASSERT_OK_AND_ASSIGN(m, e->Match(adopted, other));
  ASSERT_OK_AND_ASSIGN(r, e->Restore(m));
  EXPECT_EQ(r.restored_tokens, other.size()) << r.reason;
  ASSERT_EQ(r.layers.size(), layers.size());
  EXPECT_EQ(r.layers[0].tensors, layers[0].tensors);
}

// A quantized layer packs its head dim: mlx-lm's QuantizedKVCache keeps
// words of `bits`-bit values in uint32 and a scale and a bias per `group`
// values, and says (offset, group_size, bits) in its meta. An adopted
// namespace compared such a layer whole with its LayerShape, so a directory of
// a quantized model was never adopted (a cold start: every hit lost) and an
// adopted one refused every quantized block; they are compared per field: the
// heads, and the head dim as the meta's group and bits pack it. Another
// model whose tensors have the same sizes (head dim 4, 8 bits, group 2) is
// still never served for this one (head dim 8, 4 bits, group 4).
TEST_F(EngineViewsTest, AnAdoptedQuantizedNamespaceComparesThePackedHeadDimByItsMeta) {
  NamespaceSpec legacy = KvSpec();
  legacy.layer_types = {"QuantizedKVCache", "QuantizedKVCache"};
  NamespaceSpec shaped = legacy;
  shaped.layer_shapes = ParseLayerShapes("2x8,2x8").value();
  // Keys and values of 2 heads, each as words [1, 2, tokens, 1] and scales
  // and biases [1, 2, tokens, 2]: 8 values of 4 bits by groups of 4, or 4
  // values of 8 bits by groups of 2.
  auto packed = [&](int64_t tokens, const char* group, const char* bits) {
    std::vector<LayerState> out(2);
    for (LayerState& l : out) {
      l.cache_type = "QuantizedKVCache";
      l.meta = {std::to_string(tokens), group, bits};
      for (int kv = 0; kv < 2; ++kv) {
        l.tensors.push_back(
            testing::RandomTensor(rng_, DType::kUInt32, {1, 2, tokens, 1}));
        for (int sb = 0; sb < 2; ++sb)
          l.tensors.push_back(
              testing::RandomTensor(rng_, DType::kFloat32, {1, 2, tokens, 2}));
      }
    }
    return out;
  };
  auto store = [&](Engine& e, Namespace ns, const std::vector<int32_t>& tokens,
                   const char* group, const char* bits) {
    const std::vector<LayerState> layers =
        packed(static_cast<int64_t>(tokens.size()), group, bits);
    EXPECT_OK(e.Store(ns, tokens, layers));
    return layers;
  };
  const std::vector<int32_t> other = Tokens(2 * kBlockTokens, 5000);
  const std::vector<int32_t> extended = ExtendedByABlock(other);
  const EngineOptions o = InDir(dir_.str());
  std::vector<LayerState> own_layers;
  {
    auto old = OpenWith(o);
    ASSERT_NE(old, nullptr);
    ASSERT_OK_AND_ASSIGN(Namespace ns, old->RegisterModel(legacy));
    store(*old, ns, other, "2", "8");     // the other model's, interior blocks
    store(*old, ns, extended, "4", "4");  // deduplicates them
    for (int32_t i = 0; i < 9; ++i) {
      const std::vector<LayerState> l =
          store(*old, ns, Tokens(kBlockTokens, 10000 + 100 * i), "4", "4");
      if (i == 0) own_layers = l;
    }
    ASSERT_OK(old->Close());
  }
  auto e = OpenWith(o);
  ASSERT_NE(e, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace adopted, e->RegisterModel(shaped));
  ASSERT_EQ(adopted.root, NamespaceRoot(legacy).value())
      << "its chain ends pack 2x8 by their meta: not adopted, every hit lost";
  const std::vector<int32_t> own = Tokens(kBlockTokens, 10000);
  ASSERT_OK_AND_ASSIGN(MatchResult m, e->Match(adopted, own));
  ASSERT_OK_AND_ASSIGN(RestoreResult r, e->Restore(m));
  EXPECT_EQ(r.restored_tokens, own.size()) << r.reason;
  ASSERT_EQ(r.layers.size(), 2u);
  EXPECT_EQ(r.layers[1].tensors, own_layers[1].tensors);
  ASSERT_OK_AND_ASSIGN(m, e->Match(adopted, other));
  EXPECT_EQ(m.matched_tokens(), other.size());  // the keys are the same
  ASSERT_OK_AND_ASSIGN(r, e->Restore(m));
  EXPECT_EQ(r.restored_tokens, 0u) << "head dim 4 served as 8: " << r.reason;
}

// The spec without shapes registered first in a run keeps its root: the
// spec with shapes registered after it in the same run is not given that
// root (as the spec without shapes is refused once the shaped one adopted
// it). Until 2026-12-07 it adopted the root beside the live handle without
// shapes, which stores other shapes there unchecked: the adopting model's
// store of the same prompt then replaced those blocks in place (another
// model's, to it), and the first model's acknowledged prompt restored the
// second model's bytes as a hit.
TEST_F(EngineViewsTest, AShapedSpecNeverAdoptsARootItsSpecWithoutShapesHoldsInTheRun) {
  const NamespaceSpec legacy = KvSpec();
  NamespaceSpec shaped = legacy;
  shaped.layer_shapes = ParseLayerShapes("2x8,2x8").value();
  EngineOptions o;
  o.data_dir = dir_.str();
  o.hot_capacity_bytes = 16 << 20;
  {
    auto old = OpenWith(o);
    ASSERT_NE(old, nullptr);
    ASSERT_OK_AND_ASSIGN(Namespace ns, old->RegisterModel(legacy));
    for (int32_t i = 0; i < 4; ++i)
      Store(*old, ns, Tokens(kBlockTokens, 10000 + 100 * i));
    ASSERT_OK(old->Close());
  }
  auto e = OpenWith(o);
  ASSERT_NE(e, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace unshaped, e->RegisterModel(legacy));
  // ExplainMiss resolves the root the registration below gives it.
  EXPECT_EQ(e->ExplainMiss(shaped, Tokens(kBlockTokens, 10000))->root,
            NamespaceRoot(shaped).value());
  ASSERT_OK_AND_ASSIGN(Namespace with_shapes, e->RegisterModel(shaped));
  EXPECT_NE(with_shapes.root, unshaped.root);
  // A 2x4 model's prompt stored under the spec without shapes, then the 2x8
  // model's store of the same prompt.
  const std::vector<int32_t> prompt = Tokens(2 * kBlockTokens, 5000);
  std::vector<LayerState> heads_of_4(2);
  for (LayerState& l : heads_of_4) {
    l.cache_type = "KVCache";
    l.meta = {std::to_string(prompt.size())};
    for (int i = 0; i < 2; ++i)
      l.tensors.push_back(testing::RandomTensor(
          rng_, DType::kFloat32, {1, 2, static_cast<int64_t>(prompt.size()), 4}));
  }
  ASSERT_OK(e->Store(unshaped, prompt, heads_of_4));
  Store(*e, with_shapes, prompt);
  ASSERT_OK_AND_ASSIGN(MatchResult m, e->Match(unshaped, prompt));
  ASSERT_OK_AND_ASSIGN(RestoreResult r, e->Restore(m));
  ASSERT_EQ(r.restored_tokens, prompt.size()) << r.reason;
  EXPECT_EQ(r.layers[0].tensors, heads_of_4[0].tensors) << "another model's bytes";
  // The directory still holds the manifest without shapes: the spec without
  // them registers after a restart.
  ASSERT_OK(e->Close());
  e = OpenWith(o);
  ASSERT_NE(e, nullptr);
  EXPECT_OK(e->RegisterModel(legacy));
}

// A spec that differs from the stored one in any single field is another
// namespace: it does not hit, and ExplainMiss names that field (from the
// manifest on disk after a restart, and from the registered model before).
TEST_F(EngineViewsTest, ExplainMissNamesEveryFieldThatSeparatesNamespaces) {
  NamespaceSpec stored = testing::WithEveryField(KvSpec());
  // The shapes of the KV it stores (KvLayers): a store of others is refused.
  stored.layer_shapes = ParseLayerShapes("2x8,2x8").value();
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
  ASSERT_OK(EngineSsdTier(*e)->Remove(keys[1]));
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
