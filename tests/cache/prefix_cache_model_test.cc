// Model-based randomized test of the prefix cache: conversations that grow,
// fork and restore, over a small hot tier spilling to a lower tier. Tensor
// bytes are a function of the token prefix, so the expected restore of any
// prompt is known exactly (the restarting runs store half their turns as
// PKV.PUT's records, StoreRecords). After every operation:
//   - a restore never serves a wrong byte: KV rows and the rotating window
//     equal the reference for the restored prefix, offset == restored tokens
//     (and so does every layer of every family, EveryFamily), and
//     RestoreInto and the engine's restore plan give the same bytes;
//   - a conversation nobody continued restores all of its exact prompt, and
//     its previous turn (the walk-back fallback supersede-on-extend keeps)
//     all of that turn while no other conversation holds its tokens;
//   - the hot budget's and the lower tier's counters agree with their contents.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>

#include "tests/cache/cache_test_util.h"
#include "tests/support/mem_tier.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

constexpr int64_t kWindow = testing::kWindow;

// Running hash of the prefix ending at each position.
std::vector<uint32_t> PrefixHashes(const std::vector<int32_t>& tokens) {
  std::vector<uint32_t> h(tokens.size());
  uint32_t x = 2166136261u;
  for (size_t i = 0; i < tokens.size(); ++i) {
    x = (x ^ static_cast<uint32_t>(tokens[i])) * 16777619u;
    h[i] = x;
  }
  return h;
}

// [1, 2, rows, width] words: row r of head k holds hashes[r] + k * width + j.
Tensor Rows(const std::vector<uint32_t>& hashes, size_t rows, uint32_t salt,
            DType dtype = DType::kFloat32, size_t width = 8) {
  std::vector<uint32_t> w(2 * rows * width);
  for (size_t k = 0; k < 2; ++k) {
    for (size_t r = 0; r < rows; ++r) {
      for (size_t j = 0; j < width; ++j)
        w[(k * rows + r) * width + j] = hashes[r] + salt + k * width + j;
    }
  }
  return Tensor(dtype, {1, 2, static_cast<int64_t>(rows), static_cast<int64_t>(width)},
                SharedBytes::Copy(w.data(), w.size() * 4));
}

std::vector<LayerState> Reference(const std::vector<int32_t>& tokens) {
  const std::vector<uint32_t> h = PrefixHashes(tokens);
  const int64_t n = static_cast<int64_t>(tokens.size());
  LayerState kv{"KVCache",
                {std::to_string(n)},
                false,
                {Rows(h, h.size(), 0), Rows(h, h.size(), 1)}};
  std::vector<uint32_t> last(kWindow, h.empty() ? 0 : h.back());
  LayerState rot{"RotatingKVCache",
                 RotatingMeta{0, kWindow, n, n % kWindow}.ToStrings(),
                 false,
                 {Rows(last, kWindow, 2), Rows(last, kWindow, 3)}};
  return {kv, rot};
}

// One layer of every family, each a function of the prefix: full KV; quantized
// KV (uint32 packed rows and float scales, mlx-lm's meta (offset, group_size,
// bits)); a window; a recurrent state (a conv ring and a state, no meta) and
// a CacheList, the last two of the prefix's last hash and length.
std::vector<LayerState> EveryFamily(const std::vector<int32_t>& tokens) {
  const std::vector<uint32_t> h = PrefixHashes(tokens);
  const int64_t n = static_cast<int64_t>(tokens.size());
  std::vector<LayerState> layers = Reference(tokens);
  layers.insert(layers.begin() + 1,
                LayerState{"QuantizedKVCache",
                           {std::to_string(n), "64", "4"},
                           false,
                           {Rows(h, h.size(), 4, DType::kUInt32, 2),
                            Rows(h, h.size(), 5, DType::kFloat32, 1)}});
  const uint32_t last = h.empty() ? 0 : h.back() + static_cast<uint32_t>(n);
  layers.push_back(LayerState{"ArraysCache",
                              {},
                              false,
                              {Rows(std::vector<uint32_t>(3, last), 3, 6),
                               Rows(std::vector<uint32_t>(4, last), 4, 7)}});
  layers.push_back(
      LayerState{"CacheList",
                 {std::to_string(n)},
                 false,
                 {Rows(std::vector<uint32_t>(1, last), 1, 8, DType::kInt32)}});
  return layers;
}

NamespaceSpec EveryFamilySpec() {
  NamespaceSpec spec = testing::HybridSpec();
  spec.model = "every-family";
  spec.layer_types = {"KVCache", "QuantizedKVCache", "RotatingKVCache", "ArraysCache",
                      "CacheList"};
  return spec;
}

struct Conversation {
  std::vector<int32_t> tokens;
  size_t last_turn = 0;      // its length at its last store (0: none yet)
  size_t previous_turn = 0;  // ... and at the one before
};

// True when another conversation holds `c`'s first `n` tokens: its stores
// may then strip the tip c left there (after it extended a tip of its own).
bool SharedWithAnother(const std::vector<Conversation>& convs, const Conversation& c,
                       size_t n) {
  for (const Conversation& d : convs) {
    if (&d != &c && d.tokens.size() >= n &&
        std::equal(c.tokens.begin(), c.tokens.begin() + n, d.tokens.begin())) {
      return true;
    }
  }
  return false;
}

// True when another conversation continued past all of `c`'s tokens: its
// stores may then legitimately strip c's tips (they are its grandparents).
bool ExtendedByAnother(const std::vector<Conversation>& convs, const Conversation& c) {
  for (const Conversation& d : convs) {
    if (&d != &c && d.tokens.size() > c.tokens.size() &&
        std::equal(c.tokens.begin(), c.tokens.end(), d.tokens.begin())) {
      return true;
    }
  }
  return false;
}

using Audit = std::function<void(uint64_t, std::vector<AuditFinding>*)>;
using Layers = std::function<std::vector<LayerState>(const std::vector<int32_t>&)>;

// The cache the next operation runs on (a restart between two opens another).
struct ModelTarget {
  PrefixCache* cache = nullptr;
  Namespace ns;
  Engine* engine = nullptr;  // the cache's engine, if any: its restore plans are checked
  NamespaceSpec spec;        // set: half the stores are StoreRecords of this spec's
};

// The records a store of `layers` over `tokens` writes, encoded by a cache
// of its own (every block from the root, the tip with its real state): what a
// client sends PKV.PUT.
std::vector<SharedBytes> RecordsOf(const NamespaceSpec& spec,
                                   const std::vector<int32_t>& tokens,
                                   const std::vector<LayerState>& layers) {
  MemTier tier;
  TierStack stack(nullptr, &tier);
  PrefixCache encoder(&stack);
  const Namespace ns = encoder.RegisterModel(spec, {.store_partial_tail = true}).value();
  EXPECT_OK(encoder.Store(ns, tokens, layers));
  std::vector<SharedBytes> records;
  BlockKey parent = ns.root;
  for (size_t start = 0; start < tokens.size(); start += spec.block_tokens) {
    const size_t count = std::min<size_t>(spec.block_tokens, tokens.size() - start);
    parent = ChainKey(parent, std::span<const int32_t>(tokens).subspan(start, count));
    StatusOr<SharedBytes> record = encoder.GetBlock(ns, parent);
    EXPECT_OK(record);
    if (record.ok()) records.push_back(std::move(record).value());
  }
  return records;
}

// RestoreInto of `match` into buffers of the tensors `restored` holds writes
// exactly what Restore returned: the same length, layers and bytes.
void ExpectRestoreIntoWritesTheSame(PrefixCache& cache, const MatchResult& match,
                                    const RestoreResult& restored, uint64_t op) {
  std::vector<std::vector<std::vector<uint8_t>>> buffers(restored.layers.size());
  std::vector<LayerDestination> destinations(restored.layers.size());
  for (size_t l = 0; l < restored.layers.size(); ++l) {
    for (const Tensor& t : restored.layers[l].tensors) {
      std::vector<uint8_t>& buffer = buffers[l].emplace_back(t.nbytes() + 1);
      destinations[l].tensors.push_back({buffer.data(), t.nbytes(), t.dtype(), {}, {}});
    }
  }
  StatusOr<RestoreIntoResult> into = cache.RestoreInto(match, destinations, {});
  ASSERT_OK(into);
  ASSERT_EQ(into->result.restored_tokens, restored.restored_tokens) << "op " << op;
  ASSERT_EQ(into->result.layers.size(), restored.layers.size()) << "op " << op;
  for (size_t l = 0; l < restored.layers.size(); ++l) {
    const LayerState& want = restored.layers[l];
    EXPECT_EQ(into->result.layers[l].cache_type, want.cache_type) << "op " << op;
    EXPECT_EQ(into->result.layers[l].meta, want.meta) << "op " << op << " layer " << l;
    for (size_t t = 0; t < want.tensors.size(); ++t) {
      EXPECT_EQ(into->written[l][t].shape, want.tensors[t].shape()) << "op " << op;
      EXPECT_EQ(std::memcmp(buffers[l][t].data(), want.tensors[t].data(),
                            want.tensors[t].nbytes()),
                0)
          << "op " << op << " layer " << l << " tensor " << t;
    }
  }
}

// The engine's restore plan of `match`, applied, lays out exactly what
// Restore returned.
void ExpectThePlanLaysOutTheSame(Engine& engine, const MatchResult& match,
                                 const RestoreResult& restored, uint64_t op) {
  StatusOr<RestorePlan> plan = engine.PlanRestore(match);
  ASSERT_OK(plan);
  ASSERT_EQ(plan->result.restored_tokens, restored.restored_tokens) << "op " << op;
  ASSERT_EQ(plan->layers.size(), restored.layers.size()) << "op " << op;
  for (size_t l = 0; l < restored.layers.size(); ++l) {
    const LayerState& want = restored.layers[l];
    EXPECT_EQ(plan->result.layers[l].meta, want.meta) << "op " << op << " layer " << l;
    const PlannedLayer& layer = plan->layers[l];
    std::vector<uint8_t> laid_out(layer.bytes + 1);
    CopyPlannedLayer(layer, laid_out.data());
    ASSERT_EQ(layer.tensors.size(), want.tensors.size()) << "op " << op;
    for (size_t t = 0; t < want.tensors.size(); ++t) {
      EXPECT_EQ(layer.tensors[t].shape.shape, want.tensors[t].shape()) << "op " << op;
      EXPECT_EQ(std::memcmp(laid_out.data() + layer.tensors[t].offset,
                            want.tensors[t].data(), want.tensors[t].nbytes()),
                0)
          << "op " << op << " layer " << l << " tensor " << t;
    }
  }
}

// Restores the longest cached prefix of `prompt` and checks every restored
// layer against `reference` at the restored length (and RestoreInto, and the
// engine's restore plan, against Restore); the tokens restored.
StatusOr<uint64_t> RestoreAndCheck(const ModelTarget& target,
                                   const std::vector<int32_t>& prompt,
                                   const Layers& reference, uint64_t op) {
  PrefixCache& cache = *target.cache;
  PKV_ASSIGN_OR_RETURN(MatchResult m, cache.Match(target.ns, prompt));
  PKV_ASSIGN_OR_RETURN(RestoreResult r, cache.Restore(m));
  EXPECT_LE(r.restored_tokens, m.matched_tokens());
  if (r.restored_tokens == 0) return r.restored_tokens;
  ExpectRestoreIntoWritesTheSame(cache, m, r, op);
  if (target.engine != nullptr) ExpectThePlanLaysOutTheSame(*target.engine, m, r, op);
  const std::vector<int32_t> restored(prompt.begin(), prompt.begin() + r.restored_tokens);
  const std::vector<LayerState> want = reference(restored);
  EXPECT_EQ(r.layers.size(), want.size()) << "op " << op;
  for (size_t l = 0; l < want.size() && l < r.layers.size(); ++l) {
    // A restored window is named kRestoredRotatingType; every other layer
    // is exactly the reference.
    if (CacheTypeRegistry::IsRotatingFamily(want[l].cache_type)) {
      EXPECT_EQ(r.layers[l].tensors, want[l].tensors) << "op " << op << " layer " << l;
      EXPECT_EQ(r.layers[l].meta, want[l].meta) << "op " << op << " layer " << l;
    } else {
      EXPECT_EQ(r.layers[l], want[l]) << "op " << op << " layer " << l;
    }
  }
  return r.restored_tokens;
}

// Runs `ops` random operations on the cache `target` gives before each one,
// storing `reference(tokens)` and checking every restore against it, and calls
// `audit(op, findings)` after each one.
void RunModel(const std::function<ModelTarget()>& target, uint64_t ops,
              std::mt19937_64& rng, const Layers& reference, const Audit& audit) {
  std::vector<Conversation> convs(1);
  for (uint64_t op = 0; op < ops; ++op) {
    const ModelTarget t = target();
    PrefixCache& cache = *t.cache;
    const Namespace ns = t.ns;
    const uint64_t kind = rng() % 10;
    Conversation* c = &convs[rng() % convs.size()];
    if (kind < 2 && !c->tokens.empty()) {  // fork: a new conversation from a prefix
      const size_t keep = rng() % (c->tokens.size() + 1);
      convs.push_back(
          {std::vector<int32_t>(c->tokens.begin(), c->tokens.begin() + keep)});
      c = &convs.back();
    }
    if (kind < 7) {  // a turn: extend and store
      for (uint64_t n = 1 + rng() % 9; n > 0; --n) {
        c->tokens.push_back(static_cast<int32_t>(rng() % 5));
      }
      if (!t.spec.layer_types.empty() && rng() % 2 == 0) {
        ASSERT_OK(
            cache.StoreRecords(ns, RecordsOf(t.spec, c->tokens, reference(c->tokens))));
      } else {
        ASSERT_OK(cache.Store(ns, c->tokens, reference(c->tokens)));
      }
      c->previous_turn = c->last_turn;
      c->last_turn = c->tokens.size();
    }
    // A prompt: a prefix of a conversation, maybe with new tokens after it.
    std::vector<int32_t> prompt = c->tokens;
    if (rng() % 2) prompt.resize(rng() % (prompt.size() + 1));
    const bool exact = prompt.size() == c->tokens.size() && !ExtendedByAnother(convs, *c);
    if (rng() % 2) prompt.push_back(99);
    StatusOr<uint64_t> restored = RestoreAndCheck(t, prompt, reference, op);
    ASSERT_OK(restored);
    ASSERT_FALSE(::testing::Test::HasFailure());
    if (exact && !c->tokens.empty()) {
      ASSERT_EQ(*restored, c->tokens.size()) << "op " << op;
    }
    // Its previous turn re-sent with another message (a regenerated answer):
    // supersede-on-extend keeps that tip whole as the walk-back fallback,
    // unless another conversation holds its tokens too.
    const size_t previous = c->previous_turn;
    if (previous > 0 && !SharedWithAnother(convs, *c, previous)) {
      std::vector<int32_t> resent(c->tokens.begin(), c->tokens.begin() + previous);
      resent.push_back(99);
      restored = RestoreAndCheck(t, resent, reference, op);
      ASSERT_OK(restored);
      ASSERT_FALSE(::testing::Test::HasFailure());
      ASSERT_EQ(*restored, previous) << "op " << op << ": the previous turn";
    }
    std::vector<AuditFinding> findings;
    audit(op, &findings);
    for (const AuditFinding& f : findings)
      FAIL() << "op " << op << ": " << f.what << " " << f.detail;
  }
}

Namespace RegisterWithTail(PrefixCache& cache) {
  NamespaceOptions options;
  options.store_partial_tail = true;
  return cache.RegisterModel(testing::HybridSpec(), options).value();
}

TEST(PrefixCacheModel, RandomConversationsNeverRestoreAWrongByte) {
  std::mt19937_64 rng(testing::TestSeed("PrefixCacheModel"));
  MemTier lower;
  auto budget = SharedHotBudget::Create({.capacity_bytes = 48 * 1024}).value();
  auto hot = HotTier::Open(budget, budget->RegisterOwner("m").value()).value();
  TierStack stack(hot.get(), &lower);
  PrefixCache cache(&stack);
  const ModelTarget target{&cache, RegisterWithTail(cache)};
  RunModel([&] { return target; }, testing::Iterations(300, 20000), rng, Reference,
           [&](uint64_t, std::vector<AuditFinding>* findings) {
             ASSERT_OK(budget->Audit(findings));
             ASSERT_OK(lower.Audit(findings));
           });
  EXPECT_GT(hot->Totals().evictions, 0u) << "the hot tier should have spilled";
}

TEST(PrefixCacheModel, RandomConversationsOverTheSsdTier) {
  std::mt19937_64 rng(testing::TestSeed("PrefixCacheModelSsd"));
  testing::TempDir dir;
  testing::TestTiers tiers(24 * 1024, dir.str());
  PrefixCache& cache = tiers.cache();
  const Namespace ns =
      tiers.Register(testing::HybridSpec(), {.store_partial_tail = true}).value();
  RunModel(
      [&] {
        return ModelTarget{&cache, ns, tiers.engine.get()};
      },
      testing::Iterations(120, 3000), rng, Reference,
      [&](uint64_t op, std::vector<AuditFinding>* findings) {
        ASSERT_OK(tiers.budget->Audit(findings));
        if (op % 30 == 29) {
          ASSERT_OK(tiers.ssd->Audit(findings));
        }
      });
  EXPECT_GT(tiers.hot->Totals().evictions, 0u);
  EXPECT_GT(tiers.ssd->Totals().hits, 0u) << "restores should have read from SSD";
}

// RunModel over the SSD tier with `spec` (partial tails on), the engine
// closed and reopened every 30 operations (the hot tier written back, the tip
// lineage read back from SSD, the next restores read from SSD).
void RunWithRestarts(const NamespaceSpec& spec, const Layers& reference,
                     const std::string& seed_name) {
  std::mt19937_64 rng(testing::TestSeed(seed_name));
  testing::TempDir dir;
  std::unique_ptr<testing::TestTiers> tiers;
  ModelTarget target;
  auto open = [&] {
    tiers.reset();  // closes the engine before the next one opens the directory
    tiers = std::make_unique<testing::TestTiers>(24 * 1024, dir.str());
    target = {&tiers->cache(),
              tiers->Register(spec, {.store_partial_tail = true}).value(),
              tiers->engine.get(), spec};
  };
  open();
  uint64_t restarts = 0;
  RunModel([&] { return target; }, testing::Iterations(120, 3000), rng, reference,
           [&](uint64_t op, std::vector<AuditFinding>* findings) {
             ASSERT_OK(tiers->budget->Audit(findings));
             if (op % 30 != 29) return;
             ASSERT_OK(tiers->ssd->Audit(findings));
             open();
             ++restarts;
           });
  EXPECT_GT(restarts, 0u);
}

// Every family at once (full and quantized KV, a window, a recurrent state, a
// CacheList): whatever a conversation's turns stored, extended and stripped,
// a restore gives each layer exactly its state at the restored length.
TEST(PrefixCacheModel, EveryFamilyRestoresExactlyAcrossRestarts) {
  RunWithRestarts(EveryFamilySpec(), EveryFamily, "PrefixCacheModelEveryFamily");
}

// Full and quantized KV only: RestoreInto copies each block read from SSD as
// it arrives (and again when the restore ends short of the match).
TEST(PrefixCacheModel, SliceableFamiliesRestoreExactlyAcrossRestarts) {
  NamespaceSpec spec = EveryFamilySpec();
  spec.layer_types.resize(2);  // KVCache, QuantizedKVCache
  RunWithRestarts(
      spec,
      [](const std::vector<int32_t>& tokens) {
        std::vector<LayerState> layers = EveryFamily(tokens);
        layers.resize(2);
        return layers;
      },
      "PrefixCacheModelSliceable");
}

}  // namespace
}  // namespace prefixkv
