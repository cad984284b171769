// Engine::OpenMemoryCharge: memory held outside the blocks (live sessions'
// KV) charged to the engine's one RAM budget. A charge is a budget owner
// without blocks; it makes room by evicting cached blocks, which spill to
// SSD and stay readable; each handle returns only its own bytes, and what it
// still holds when destroyed.
//
// The engine's memory resource (EngineMemoryResource): with a fake one, every
// hot block lies in it with an exact charge, every region is reported once,
// and none is returned while a view refers into it, even after Close; a
// store copies each byte once into it and hashes it once.
//
// And what reaches the SSD tier (EngineWearTest): its wear (bytes written per
// day, rated endurance, projected lifetime) and SSD admission under a write
// budget, on a fake clock.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "prefixkv/advanced/engine_internals.h"
#include "prefixkv/advanced/hash.h"
#include "prefixkv/advanced/hot_tier.h"
#include "prefixkv/engine.h"
#include "prefixkv/memory_resource.h"
#include "tests/engine/engine_test_util.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

using testing::kBlockTokens;
using testing::KvLayers;
using testing::KvSpec;
using testing::Quiet;
using testing::TempDir;
using testing::Tokens;

constexpr uint64_t kCapacity = 64 << 10;

std::unique_ptr<Engine> OpenEngine(const std::string& dir,
                                   uint64_t capacity = kCapacity) {
  EngineOptions o;
  o.data_dir = dir;
  o.hot_capacity_bytes = capacity;
  o.log = [](std::string_view) {};
  auto engine = Engine::Open(o);
  EXPECT_OK(engine);
  return engine.ok() ? std::move(engine).value() : nullptr;
}

const EngineOwnerStats* Owner(const EngineStats& stats, const std::string& name) {
  for (const EngineOwnerStats& o : stats.owners) {
    if (o.name == name) return &o;
  }
  return nullptr;
}
// The result points into `stats`: a temporary would dangle.
const EngineOwnerStats* Owner(EngineStats&& stats, const std::string& name) = delete;

TEST(EngineMemoryCharge, OpeningANameAgainReturnsAnotherHandleOfTheSameOwner) {
  TempDir dir;
  auto engine = OpenEngine(dir.str());
  ASSERT_OK_AND_ASSIGN(auto first, engine->OpenMemoryCharge("sessions", 32 << 10));
  ASSERT_OK_AND_ASSIGN(auto second, engine->OpenMemoryCharge("sessions", 32 << 10));
  EXPECT_EQ(engine->Stats().owners.size(), 1u);
  EXPECT_EQ(first->name(), "sessions");
  EXPECT_EQ(first->limit_bytes(), uint64_t{32} << 10);

  ASSERT_OK(first->Charge(1000, nullptr));
  ASSERT_OK(second->Charge(500, nullptr));
  {
    const EngineStats charged = engine->Stats();
    ASSERT_NE(Owner(charged, "sessions"), nullptr);
    EXPECT_EQ(Owner(charged, "sessions")->hot.external_bytes, 1500u);
  }
  EXPECT_TRUE(second->Uncharge(501).IsInvalidArgument()) << "only its own bytes";
  ASSERT_OK(second->Uncharge(500));
  second.reset();
  first.reset();                              // returns its 1000 bytes
  const EngineStats stats = engine->Stats();  // Owner() points into it
  const EngineOwnerStats* owner = Owner(stats, "sessions");
  ASSERT_NE(owner, nullptr);
  EXPECT_EQ(owner->hot.bytes, 0u);
  EXPECT_EQ(owner->hot_quota_bytes, std::optional<uint64_t>(32 << 10));
}

TEST(EngineMemoryCharge, RejectsBadNamesQuotasAndEnginesWithoutAHotTier) {
  TempDir dir;
  auto engine = OpenEngine(dir.str());
  NamespaceSpec spec{.model = "llama",
                     .block_tokens = 4,
                     .dtype = DType::kFloat32,
                     .layer_types = {"KVCache"}};
  ASSERT_OK(engine->RegisterModel(spec));
  ASSERT_OK(engine->OpenMemoryCharge("sessions"));
  EXPECT_TRUE(engine->OpenMemoryCharge("llama").status().IsInvalidArgument());
  EXPECT_TRUE(engine->OpenMemoryCharge("").status().IsInvalidArgument());
  EXPECT_TRUE(engine->OpenMemoryCharge("zero", 0).status().IsInvalidArgument());
  EXPECT_TRUE(engine->OpenMemoryCharge("sessions", 4096).status().IsInvalidArgument())
      << "another quota than it was opened with";
  ASSERT_OK(engine->Close());
  EXPECT_TRUE(engine->OpenMemoryCharge("sessions").status().IsInvalidArgument());

  TempDir cold;
  auto ssd_only = OpenEngine(cold.str(), /*capacity=*/0);
  EXPECT_TRUE(ssd_only->OpenMemoryCharge("sessions").status().IsInvalidArgument());
}

// The key-value space's owner is registered by the first value put; a
// charge or a model that took its name "values" before made every later
// PutValue and GetValue fail (the owner "values" was registered already),
// for as long as the engine was open.
TEST(EngineMemoryCharge, AChargeOrAModelNamedValuesLeavesTheKeyValueSpaceWorking) {
  TempDir dir;
  auto engine = OpenEngine(dir.str());
  StatusOr<std::shared_ptr<MemoryCharge>> charge = engine->OpenMemoryCharge("values");
  EXPECT_TRUE(charge.status().IsInvalidArgument()) << "the key-value space's name";
  ASSERT_OK(engine->PutValue("k", SharedBytes::Copy("v")));
  ASSERT_OK_AND_ASSIGN(SharedBytes value, engine->GetValue("k"));
  EXPECT_EQ(value.view(), "v");

  TempDir other;
  auto models = OpenEngine(other.str());
  NamespaceSpec spec = KvSpec("values");
  ASSERT_OK(models->RegisterModel(spec));
  ASSERT_OK(models->PutValue("k", SharedBytes::Copy("v")));
  ASSERT_OK_AND_ASSIGN(value, models->GetValue("k"));
  EXPECT_EQ(value.view(), "v");
  std::vector<std::string> names;
  for (const EngineOwnerStats& o : models->Stats().owners) names.push_back(o.name);
  EXPECT_EQ(std::count(names.begin(), names.end(), "values"), 1);
  ASSERT_OK_AND_ASSIGN(EngineAudit audit, models->Audit());
  EXPECT_TRUE(audit.ok());
}

TEST(EngineMemoryCharge, AChargeSpillsCachedBlocksToSsdWhereTheyStayReadable) {
  TempDir dir;
  auto engine = OpenEngine(dir.str());
  for (int i = 0; i < 12; ++i) {
    ASSERT_OK(engine->PutValue("v" + std::to_string(i),
                               SharedBytes::Copy(std::string(4000, 'a' + i))));
  }
  const EngineStats before = engine->Stats();
  ASSERT_OK_AND_ASSIGN(auto sessions, engine->OpenMemoryCharge("sessions"));
  ASSERT_OK(sessions->Charge(kCapacity - 8000, nullptr));
  const EngineStats after = engine->Stats();
  EXPECT_GT(after.hot.evictions, before.hot.evictions);
  EXPECT_LE(after.hot.bytes, kCapacity);
  EXPECT_EQ(after.hot.external_bytes, kCapacity - 8000);
  for (int i = 0; i < 12; ++i) {
    ASSERT_OK_AND_ASSIGN(SharedBytes value, engine->GetValue("v" + std::to_string(i)));
    EXPECT_EQ(value.size(), 4000u);
    EXPECT_EQ(value.data()[0], static_cast<uint8_t>('a' + i)) << i;
  }
  ASSERT_OK_AND_ASSIGN(EngineAudit audit, engine->Audit());
  EXPECT_TRUE(audit.ok());
}

// A handle keeps the budget alive past Close (and past the engine), and the
// engine's hot blocks stay in it; a charge then evicts them. Those evictions
// must not be reported to the engine's event sink: after Close it is a closed
// log, and once the engine is destroyed the budget's pointer to it dangles.
TEST(EngineMemoryCharge, AChargeAfterCloseReportsNothingToTheClosedEngine) {
  TempDir dir;
  std::atomic<bool> closed{false};
  std::atomic<int> after_close{0};
  EngineOptions o;
  o.data_dir = dir.str();
  o.hot_capacity_bytes = kCapacity;
  o.log = [](std::string_view) {};
  o.on_kv_event = [&](const KvEvent&) {
    if (closed.load()) after_close.fetch_add(1);
  };
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Engine> engine, Engine::Open(o));
  for (int i = 0; i < 12; ++i) {
    ASSERT_OK(engine->PutValue("v" + std::to_string(i),
                               SharedBytes::Copy(std::string(4000, 'a' + i))));
  }
  ASSERT_OK_AND_ASSIGN(auto sessions, engine->OpenMemoryCharge("sessions"));
  ASSERT_OK(engine->Close());
  closed.store(true);
  // Room for it only by evicting the blocks Close left in the budget.
  ASSERT_OK(sessions->Charge(kCapacity - 8000, nullptr));
  EXPECT_EQ(after_close.load(), 0) << "evictions reported to a closed engine";
  engine.reset();
  ASSERT_OK(sessions->Charge(4000, nullptr));  // the rest: nothing to report to
  EXPECT_EQ(after_close.load(), 0);
  ASSERT_OK(sessions->Uncharge(kCapacity - 4000));
}

TEST(EngineMemoryCharge, AChargeThatCannotFitReportsItsShortfall) {
  TempDir dir;
  auto engine = OpenEngine(dir.str());
  ASSERT_OK_AND_ASSIGN(auto a, engine->OpenMemoryCharge("a"));
  ASSERT_OK_AND_ASSIGN(auto b, engine->OpenMemoryCharge("b"));
  ASSERT_OK(a->Charge(kCapacity - 100, nullptr));
  uint64_t shortfall = 0;
  EXPECT_TRUE(b->Charge(150, &shortfall).IsNoSpace());
  EXPECT_EQ(shortfall, 50u) << "charges are never evicted";
  EXPECT_EQ(b->charged_bytes(), 0u);
  EXPECT_TRUE(b->Charge(kCapacity + 1, &shortfall).IsNoSpace());
  EXPECT_EQ(shortfall, UINT64_MAX);
  ASSERT_OK(a->Uncharge(50));
  ASSERT_OK(b->Charge(150, nullptr));
  EXPECT_EQ(engine->Stats().hot.bytes, kCapacity);
}

// A MemoryResource whose every allocation is a region of its own, reported
// when made and before it is returned; a returned one is scribbled over
// first, so a view that outlived it would read garbage.
class FakeMemoryResource final : public MemoryResource {
 public:
  void* Allocate(size_t bytes, size_t /*alignment*/) override {
    void* p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    RegionCallbacks callbacks;
    {
      std::lock_guard<std::mutex> lock(mu_);
      live_[p] = bytes;
      allocated_bytes_ += bytes;
      callbacks = callbacks_;
    }
    if (callbacks.mapped) callbacks.mapped(p, bytes);
    return p;
  }
  void Deallocate(void* p, size_t bytes, size_t /*alignment*/) override {
    RegionCallbacks callbacks;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = live_.find(p);
      EXPECT_TRUE(it != live_.end() && it->second == bytes) << "returned as allocated";
      if (it != live_.end()) live_.erase(it);
      callbacks = callbacks_;
    }
    if (callbacks.unmapping) callbacks.unmapping(p, bytes);
    std::memset(p, 0xdd, bytes);
    std::free(p);
  }
  bool Contains(const void* p, size_t bytes) const override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.upper_bound(p);
    if (it == live_.begin()) return false;
    --it;
    const auto* base = static_cast<const uint8_t*>(it->first);
    const auto* q = static_cast<const uint8_t*>(p);
    return q + bytes <= base + it->second;
  }
  std::vector<MemoryRegion> Regions() const override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<MemoryRegion> out;
    for (const auto& [p, n] : live_) out.push_back({const_cast<void*>(p), n});
    return out;
  }
  void SetRegionCallbacks(RegionCallbacks callbacks) override {
    for (const MemoryRegion& r : Regions()) {
      if (callbacks.mapped) callbacks.mapped(r.base, r.bytes);
    }
    std::lock_guard<std::mutex> lock(mu_);
    callbacks_ = std::move(callbacks);
  }
  size_t live() const {
    std::lock_guard<std::mutex> lock(mu_);
    return live_.size();
  }
  // Bytes of every allocation ever made.
  uint64_t allocated_bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return allocated_bytes_;
  }

 private:
  mutable std::mutex mu_;
  std::map<const void*, size_t> live_;
  uint64_t allocated_bytes_ = 0;
  RegionCallbacks callbacks_;
};

// Every region callback, in order.
struct RegionEvents {
  std::mutex mu;
  std::vector<MemoryRegion> mapped, unmapped;
  std::vector<std::pair<bool, MemoryRegion>> order;  // (mapped?, region)
  RegionCallbacks Callbacks() {
    return {.mapped =
                [this](void* p, size_t n) {
                  std::lock_guard<std::mutex> lock(mu);
                  mapped.push_back({p, n});
                  order.push_back({true, {p, n}});
                },
            .unmapping =
                [this](void* p, size_t n) {
                  std::lock_guard<std::mutex> lock(mu);
                  unmapped.push_back({p, n});
                  order.push_back({false, {p, n}});
                }};
  }
  // Whether the region `p` was last mapped in has been unmapped since (the
  // fake resource's heap may hand an address out again after it went).
  bool Unmapped(const void* p) {
    std::lock_guard<std::mutex> lock(mu);
    const auto holds = [p](const MemoryRegion& r) {
      return p >= r.base && p < static_cast<const uint8_t*>(r.base) + r.bytes;
    };
    bool gone = false;
    for (const auto& [was_mapped, r] : order) {
      if (holds(r)) gone = !was_mapped;
    }
    return gone;
  }
};

// Every hot block of `ns` lies in `memory`, charged its exact payload bytes
// plus the entry overhead; returns the sum of those charges.
uint64_t ExpectHotBlocksIn(Engine& e, Namespace ns, const MemoryResource& memory) {
  std::vector<std::pair<BlockKey, uint64_t>> charged;
  EngineHotTier(e, ns)->ForEach([&](const BlockMeta& meta, uint64_t bytes) {
    charged.emplace_back(meta.key, bytes);
  });
  EXPECT_FALSE(charged.empty());
  uint64_t sum = 0;
  for (const auto& [key, bytes] : charged) {
    StatusOr<SharedBytes> payload = EngineHotTier(e, ns)->PeekPayload(key);
    EXPECT_OK(payload);
    if (!payload.ok()) continue;
    EXPECT_TRUE(memory.Contains(payload->data(), payload->size())) << key.ToHex();
    EXPECT_EQ(bytes, HotEntryCharge(payload->size())) << "exact bytes, not regions";
    sum += bytes;
  }
  return sum;
}

TEST(EngineMemoryResource, HotBlocksLiveInItAndNoRegionGoesBeforeItsLastView) {
  TempDir dir;
  auto memory = std::make_shared<FakeMemoryResource>();
  RegionEvents events;
  EngineOptions o;
  o.data_dir = dir.str();
  o.hot_capacity_bytes = 1 << 20;
  o.memory_resource = memory;
  o.on_region = events.Callbacks();
  std::mt19937_64 rng(testing::TestSeed("EngineMemoryResource"));
  const std::vector<int32_t> tokens = Tokens(3 * kBlockTokens);
  const std::vector<LayerState> layers = KvLayers(2, 12, rng);
  {
    ASSERT_OK_AND_ASSIGN(auto e, Engine::Open(Quiet(o)));
    ASSERT_OK_AND_ASSIGN(Namespace ns, e->RegisterModel(KvSpec()));
    ASSERT_OK(e->Store(ns, tokens, layers).status());
    EXPECT_EQ(e->Stats().hot.bytes, ExpectHotBlocksIn(*e, ns, *memory));
    // Stats carry the resource's regions next to the charged bytes.
    const EngineStats s = e->Stats();
    const std::vector<MemoryRegion> regions = memory->Regions();
    uint64_t mapped = 0;
    for (const MemoryRegion& r : regions) mapped += r.bytes;
    EXPECT_EQ(s.memory_regions, regions.size());
    EXPECT_EQ(s.memory_mapped_bytes, mapped);
    EXPECT_GE(s.memory_mapped_bytes, s.hot.bytes - 3 * HotEntryCharge(0));
    ASSERT_OK_AND_ASSIGN(EngineAudit audit, e->Audit());
    EXPECT_TRUE(audit.ok());
  }
  EXPECT_EQ(memory->live(), 0u) << "closed with no view left: everything returned";
  PinnedRestore views;
  {
    // Reopened: the blocks come from SSD and are promoted into the resource.
    ASSERT_OK_AND_ASSIGN(auto e, Engine::Open(Quiet(o)));
    ASSERT_OK_AND_ASSIGN(Namespace ns, e->RegisterModel(KvSpec()));
    ASSERT_OK_AND_ASSIGN(MatchResult m, e->Match(ns, tokens));
    ASSERT_OK_AND_ASSIGN(views, e->RestorePinned(m));
    EXPECT_EQ(views.result.blocks_from_ssd, 3u);
    for (const LayerState& layer : views.result.layers) {
      for (const Tensor& t : layer.tensors) {
        EXPECT_TRUE(memory->Contains(t.data(), t.nbytes())) << "restored layers too";
      }
    }
    EXPECT_EQ(e->Stats().hot.bytes, ExpectHotBlocksIn(*e, ns, *memory));
    ASSERT_OK_AND_ASSIGN(EngineAudit audit, e->Audit());
    EXPECT_TRUE(audit.ok());
    ASSERT_OK(e->Close());
  }
  // The engine is gone; the views still read the hot tier's bytes.
  ASSERT_EQ(views.blocks.size(), 3u);
  const Tensor& keys = views.blocks[2].record.layers[1].tensors[0];
  EXPECT_EQ(views.blocks[2].level, TierLevel::kHot);
  EXPECT_TRUE(memory->Contains(keys.data(), keys.nbytes()));
  EXPECT_FALSE(events.Unmapped(keys.data()));
  const Tensor want =
      layers[1].tensors[0].SliceAxis(2, 2 * kBlockTokens, kBlockTokens).value();
  EXPECT_EQ(std::memcmp(keys.data(), want.data(), want.nbytes()), 0);
  const uint8_t* key_bytes = keys.data();  // `keys` goes with the views
  views = PinnedRestore{};
  EXPECT_EQ(memory->live(), 0u);
  EXPECT_TRUE(events.Unmapped(key_bytes)) << "returned with its last view";
  // Each region reported once when mapped and once before it went.
  std::lock_guard<std::mutex> lock(events.mu);
  auto by_base = [](const MemoryRegion& a, const MemoryRegion& b) {
    return std::make_pair(a.base, a.bytes) < std::make_pair(b.base, b.bytes);
  };
  std::vector<MemoryRegion> mapped = events.mapped, unmapped = events.unmapped;
  EXPECT_EQ(mapped.size(), unmapped.size());
  std::sort(mapped.begin(), mapped.end(), by_base);
  std::sort(unmapped.begin(), unmapped.end(), by_base);
  EXPECT_EQ(mapped, unmapped);
}

// A store copies each byte once, straight into the block's final memory
// (the resource: nothing else is allocated in it for the store, no slice
// first), and hashes it once (docs/architecture.md, "A store, hop by hop").
TEST(EngineMemoryResource, AStoreCopiesAndHashesEachByteOnce) {
  auto memory = std::make_shared<FakeMemoryResource>();
  EngineOptions o;
  o.hot_capacity_bytes = 1 << 20;
  o.memory_resource = memory;
  std::mt19937_64 rng(testing::TestSeed("EngineMemoryResource.Once"));
  const std::vector<int32_t> tokens = Tokens(3 * kBlockTokens);
  // [1, 2, tokens, 8] tensors: two heads, so each block's rows are two runs.
  const std::vector<LayerState> layers = KvLayers(2, 3 * kBlockTokens, rng);
  uint64_t tensor_bytes = 0;
  for (const LayerState& l : layers) {
    for (const Tensor& t : l.tensors) tensor_bytes += t.nbytes();
  }
  ASSERT_OK_AND_ASSIGN(auto e, Engine::Open(Quiet(o)));
  ASSERT_OK_AND_ASSIGN(Namespace ns, e->RegisterModel(KvSpec()));
  const uint64_t allocated_before = memory->allocated_bytes();
  const uint64_t hashed_before = ThreadHashedBytes();
  ASSERT_OK_AND_ASSIGN(StoreResult stored, e->Store(ns, tokens, layers));
  const uint64_t hashed = ThreadHashedBytes() - hashed_before;
  ASSERT_EQ(stored.blocks_written, 3u);
  std::vector<BlockKey> keys;  // peeked outside ForEach, which holds the lock
  EngineHotTier(*e, ns)->ForEach(
      [&](const BlockMeta& meta, uint64_t) { keys.push_back(meta.key); });
  uint64_t payload_bytes = 0;
  for (const BlockKey& key : keys) {
    ASSERT_OK_AND_ASSIGN(SharedBytes payload, EngineHotTier(*e, ns)->PeekPayload(key));
    payload_bytes += payload.size();
  }
  EXPECT_EQ(memory->allocated_bytes() - allocated_before, payload_bytes)
      << "one allocation per block, its record: no slice copied first";
  // Each tensor byte once; besides them only the records' headers and the
  // chain keys (16 bytes of parent key and 4 per token per block).
  EXPECT_GE(hashed, tensor_bytes);
  EXPECT_LE(hashed, payload_bytes + 3 * 16 + 4 * tokens.size());
}

// SSD wear and admission (docs/ssd.md "Wear", docs/eviction.md "SSD
// admission"), on a fake clock.
class EngineWearTest : public testing::EngineFixture {
 protected:
  EngineWearTest() : EngineFixture("EngineWearTest") {}
  static constexpr uint64_t kDayNanos = 86400ull * 1'000'000'000;
  // One KVCache block's SSD charge (its payload bytes) and hot charge.
  void MeasureBlock() {
    auto probe = Open(
        {.data_dir = (dir_.path() / "probe").string(), .hot_capacity_bytes = 16 << 20});
    ASSERT_NE(probe, nullptr);
    ASSERT_OK_AND_ASSIGN(Namespace ns, probe->RegisterModel(KvSpec()));
    StoreAll(*probe, ns, Tokens(kBlockTokens));
    hot_charge_ = probe->Stats().hot.bytes;
    ASSERT_OK(probe->Flush());
    payload_ = probe->Stats().ssd.bytes;
    ASSERT_GT(payload_, 0u);
  }
  // Room for `blocks` blocks in RAM; write-back of the rest under `admission`.
  EngineOptions Budgeted(uint64_t blocks, EvictionPolicyKind policy,
                         uint64_t budget_bytes_per_day) {
    EngineOptions o = OnDiskOnFakeClock();
    o.hot_capacity_bytes = blocks * hot_charge_;
    o.hot_policy = policy;
    o.ssd_admission = SsdAdmissionKind::kBudget;
    o.ssd_write_budget_bytes_per_day = budget_bytes_per_day;
    o.ssd_write_budget_burst_seconds = 86400;  // the bucket holds one day
    return o;
  }
  uint64_t hot_charge_ = 0;
  uint64_t payload_ = 0;
};

TEST_F(EngineWearTest, TheWriteRateIsSegmentBytesPerDayOverTheWindow) {
  EngineOptions o = OnDiskOnFakeClock();
  o.hot_capacity_bytes = 0;  // every block straight to SSD
  o.ssd_drive_writes_per_day = 1;
  o.ssd_drive_capacity_bytes = 1'000'000'000'000;
  o.ssd_wear_window_seconds = 3600;
  auto e = Open(o);
  ASSERT_NE(e, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace ns, e->RegisterModel(KvSpec()));
  const uint64_t endurance = 1'000'000'000'000ull * 365 * 5;
  EXPECT_EQ(e->Stats().ssd_endurance_bytes, endurance);
  const uint64_t b0 = e->Stats().ssd_bytes_written;
  StoreAll(*e, ns, Tokens(kBlockTokens, 100));
  const uint64_t b1 = e->Stats().ssd_bytes_written;
  // One extent: the payload rounded up to 4096 with its footer.
  EXPECT_EQ(b1 - b0, (e->Stats().ssd.bytes + 64 + 4095) / 4096 * 4096);
  EXPECT_EQ(e->Stats().ssd_write_bytes_per_day, 0);  // no time has passed
  EXPECT_EQ(e->Stats().ssd_projected_lifetime_days, 0);
  clock_.AdvanceNanos(kDayNanos / 48);  // 30 minutes
  EngineStats s = e->Stats();
  EXPECT_DOUBLE_EQ(s.ssd_write_bytes_per_day, 48.0 * b1);
  EXPECT_DOUBLE_EQ(s.ssd_projected_lifetime_days, double(endurance) / (48.0 * b1));
  clock_.AdvanceNanos(kDayNanos / 24);  // 1.5 h: the write left the window
  EXPECT_EQ(e->Stats().ssd_write_bytes_per_day, 0);
  StoreAll(*e, ns, Tokens(2 * kBlockTokens, 200));
  const uint64_t b2 = e->Stats().ssd_bytes_written - b1;
  EXPECT_EQ(b2, 2 * (b1 - b0));
  clock_.AdvanceNanos(kDayNanos / 48);  // 2 h: the window starts at 0.5 h
  EXPECT_DOUBLE_EQ(e->Stats().ssd_write_bytes_per_day, 16.0 * b2);
}

TEST_F(EngineWearTest, WearAndAdmissionOptionsAreChecked) {
  EngineOptions o = OnDisk();
  o.ssd_endurance_bytes = 1;
  o.ssd_drive_writes_per_day = 1;
  EXPECT_TRUE(Engine::Open(Quiet(o)).status().IsInvalidArgument());
  o = OnDisk();
  o.ssd_admission = SsdAdmissionKind::kBudget;  // no budget
  EXPECT_TRUE(Engine::Open(Quiet(o)).status().IsInvalidArgument());
  o = OnDisk();
  o.ssd_write_budget_bytes_per_day = 1000;  // a budget under "all"
  EXPECT_TRUE(Engine::Open(Quiet(o)).status().IsInvalidArgument());
  o = OnDisk();
  o.ssd_wear_window_seconds = 0;
  EXPECT_TRUE(Engine::Open(Quiet(o)).status().IsInvalidArgument());
  EXPECT_TRUE(ParseSsdAdmission("some").status().IsInvalidArgument());
  ASSERT_OK_AND_ASSIGN(SsdAdmissionKind k, ParseSsdAdmission("budget"));
  EXPECT_EQ(SsdAdmissionName(k), "budget");
}

// Single-block chains (no parent to lose, no child below): the budget holds
// exactly three blocks; the rest are skipped until the clock refills it.
TEST_F(EngineWearTest, ABudgetWritesWhatItAllowsAndSkipsAndCountsTheRest) {
  MeasureBlock();
  EngineOptions o = Budgeted(2, EvictionPolicyKind::kLru, 3 * payload_);
  o.promote_on_ssd_hit = false;  // reading back evicts nothing
  auto e = Open(o);
  ASSERT_NE(e, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace ns, e->RegisterModel(KvSpec()));
  std::vector<std::vector<LayerState>> layers;
  for (int i = 0; i < 10; ++i)
    layers.push_back(StoreAll(*e, ns, Tokens(kBlockTokens, 1000 * i)));
  SsdAdmissionCounters c = e->Stats().ssd_admission_counters;
  EXPECT_EQ(c.written_blocks, 3u);
  EXPECT_EQ(c.written_bytes, 3 * payload_);
  EXPECT_EQ(c.skipped_blocks, 5u);
  EXPECT_EQ(c.skipped_bytes, 5 * payload_);
  EXPECT_EQ(c.forced_blocks, 0u);
  clock_.AdvanceNanos(kDayNanos / 3);  // one block's worth
  layers.push_back(StoreAll(*e, ns, Tokens(kBlockTokens, 10000)));
  c = e->Stats().ssd_admission_counters;
  EXPECT_EQ(c.written_blocks, 4u);
  EXPECT_EQ(c.skipped_blocks, 5u);
  // Written: the first three and the ninth; skipped: the fourth to eighth;
  // in RAM: the last two. Each is found with its bytes or not at all.
  for (int i = 0; i < 11; ++i) {
    const std::vector<int32_t> tokens = Tokens(kBlockTokens, 1000 * i);
    const bool kept = i < 3 || i >= 8;
    RestoreResult r = MatchAndRestore(*e, ns, tokens);
    EXPECT_EQ(r.restored_tokens, kept ? tokens.size() : 0u) << "chain " << i;
    if (kept) {
      EXPECT_EQ(r.layers, layers[i]) << "chain " << i;
    }
  }
  ASSERT_OK_AND_ASSIGN(EngineAudit audit, e->Audit());
  EXPECT_TRUE(audit.ok());
}

// Reject first with a ghost (SsdAdmissionKind::kGhost): a leaf's first
// eviction skips it and remembers its key; stored again after a miss and
// evicted again, it is written, and restored from SSD with its bytes.
TEST_F(EngineWearTest, AGhostSkipsAFirstEvictionAndWritesTheNext) {
  MeasureBlock();
  EngineOptions o = Budgeted(2, EvictionPolicyKind::kLru, 0);
  o.ssd_admission = SsdAdmissionKind::kGhost;
  o.promote_on_ssd_hit = false;
  auto e = Open(o);
  ASSERT_NE(e, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace ns, e->RegisterModel(KvSpec()));
  auto tokens = [](int i) { return Tokens(kBlockTokens, 1000 * i); };
  for (int i = 0; i < 6; ++i) StoreAll(*e, ns, tokens(i));  // 0..3 evicted
  SsdAdmissionCounters c = e->Stats().ssd_admission_counters;
  EXPECT_EQ(c.written_blocks, 0u);
  EXPECT_EQ(c.skipped_blocks, 4u);
  EXPECT_EQ(MatchAndRestore(*e, ns, tokens(0)).restored_tokens, 0u);
  const std::vector<LayerState> again = StoreAll(*e, ns, tokens(0));  // evicts 4
  StoreAll(*e, ns, tokens(6));                                        // evicts 5
  StoreAll(*e, ns, tokens(7));  // evicts 0 again: in the ghost, written
  c = e->Stats().ssd_admission_counters;
  EXPECT_EQ(c.written_blocks, 1u);
  EXPECT_EQ(c.written_bytes, payload_);
  EXPECT_EQ(c.skipped_blocks, 6u);
  EXPECT_EQ(c.forced_blocks, 0u);
  const RestoreResult r = MatchAndRestore(*e, ns, tokens(0));
  EXPECT_EQ(r.restored_tokens, tokens(0).size());
  EXPECT_EQ(r.layers, again);
  EXPECT_EQ(MatchAndRestore(*e, ns, tokens(1)).restored_tokens, 0u);
  ASSERT_OK_AND_ASSIGN(EngineAudit audit, e->Audit());
  EXPECT_TRUE(audit.ok());
}

TEST_F(EngineWearTest, ABudgetNeverSkipsRawValues) {
  MeasureBlock();
  auto e = Open(Budgeted(2, EvictionPolicyKind::kLru, 1));
  ASSERT_NE(e, nullptr);
  const std::string big(payload_, 'v');
  for (int i = 0; i < 20; ++i) {
    ASSERT_OK(e->PutValue("key" + std::to_string(i),
                          SharedBytes::Copy(big + std::to_string(i))));
  }
  const SsdAdmissionCounters c = e->Stats().ssd_admission_counters;
  EXPECT_GT(c.written_blocks, 10u);
  EXPECT_EQ(c.forced_blocks, c.written_blocks);  // the budget was spent at once
  EXPECT_EQ(c.skipped_blocks, 0u);
  ASSERT_OK(e->Close());
  e = Open(Budgeted(2, EvictionPolicyKind::kLru, 1));
  ASSERT_NE(e, nullptr);
  for (int i = 0; i < 20; ++i) {
    ASSERT_OK_AND_ASSIGN(SharedBytes v, e->GetValue("key" + std::to_string(i)));
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(v.data()), v.size()),
              big + std::to_string(i));
  }
}

// Chains of four blocks under both hot orders: lru evicts parents before
// their children (a parent with a child in RAM is written although the budget
// is spent), leaf-lru children first (a skipped tip leaves its parent a
// leaf). The audit finds no orphan, and every full match restores the bytes
// stored.
TEST_F(EngineWearTest, SkipsLeaveNoOrphanAndTheAuditClean) {
  MeasureBlock();
  for (EvictionPolicyKind policy :
       {EvictionPolicyKind::kLru, EvictionPolicyKind::kLeafLru}) {
    SCOPED_TRACE(EvictionPolicyName(policy));
    TempDir dir;
    EngineOptions o = Budgeted(6, policy, 8 * payload_);
    o.data_dir = dir.str();
    auto e = Open(o);
    ASSERT_NE(e, nullptr);
    ASSERT_OK_AND_ASSIGN(Namespace ns, e->RegisterModel(KvSpec()));
    std::vector<std::vector<LayerState>> layers;
    for (int i = 0; i < 12; ++i) {
      layers.push_back(StoreAll(*e, ns, Tokens(4 * kBlockTokens, 1000 * i)));
      clock_.AdvanceNanos(kDayNanos / 16);  // half a block's budget
    }
    const SsdAdmissionCounters c = e->Stats().ssd_admission_counters;
    EXPECT_GT(c.skipped_blocks, 0u);
    // Under lru a chain's parents leave first, with children in RAM: forced.
    if (policy == EvictionPolicyKind::kLru) {
      EXPECT_GT(c.forced_blocks, 0u);
    }
    ASSERT_OK_AND_ASSIGN(EngineAudit audit, e->Audit());
    EXPECT_TRUE(audit.findings.empty());
    EXPECT_TRUE(audit.orphans.empty()) << audit.orphans.size() << " orphans";
    for (int i = 0; i < 12; ++i) {
      const std::vector<int32_t> tokens = Tokens(4 * kBlockTokens, 1000 * i);
      RestoreResult r = MatchAndRestore(*e, ns, tokens);
      if (r.restored_tokens == tokens.size()) {
        EXPECT_EQ(r.layers, layers[i]);
      }
    }
  }
}

}  // namespace
}  // namespace prefixkv
