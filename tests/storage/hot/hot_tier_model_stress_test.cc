// Model-based randomized test of SharedHotBudget + HotTier views.
//
// A plain reference model (tests/storage/hot/hot_reference_model.h: maps and
// linear scans, no trees, no tentative victims) runs the same random
// operations (insert/replace, lookup, pin, unpin, remove, reuse hints, quota changes,
// external charges and uncharges, several owners, both policies), and after
// EVERY operation the test checks: the status matches (and a failed charge's
// shortfall); the victims handed to each owner's listener, in order,
// match the model's; every owner's counters match the model (state counters
// recomputed from its entries); the budget total equals the sum of the
// owners; the budget is never exceeded; and Audit() finds nothing.
//
// PREFIXKV_SEED replays a failure; PREFIXKV_LONG=1 runs 20M operations.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "prefixkv/advanced/hot_tier.h"
#include "tests/storage/hot/hot_reference_model.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

using hot_test::Model;
using hot_test::Victim;

constexpr int kOwners = 4;      // owner 3 has no listener
constexpr uint64_t kKeys = 24;  // ids 1..kKeys per owner
constexpr uint64_t kCapacity = 64 << 10;
constexpr size_t kMaxPins = 12;

// The budget has one key space for every owner (as the SSD tier): each owner
// of the model has its own ids, so its blocks get keys of its own.
BlockKey KeyOf(OwnerId o, uint64_t id) {
  return id == 0 ? BlockKey{} : BlockKey{0x5EED0000ull + o, id};
}

// Chains of eight: 1 <- 2 <- ... <- 8, 9 <- 10 ...
uint64_t DefaultParent(uint64_t id) { return id % 8 == 1 ? 0 : id - 1; }

class SharedRecorder {
 public:
  class Listener final : public EvictionListener {
   public:
    Listener(SharedRecorder* r, OwnerId owner) : r_(r), owner_(owner) {}
    void OnEvict(const BlockMeta& meta, const SharedBytes&, bool dirty) override {
      r_->victims.push_back({owner_, meta.key.lo, dirty});
    }

   private:
    SharedRecorder* r_;
    OwnerId owner_;
  };
  std::vector<Victim> victims;
};

SharedBytes MakePayload(uint64_t size, uint64_t version) {
  uint8_t* out = nullptr;
  SharedBytes b = SharedBytes::Allocate(size, &out);
  if (size > 0) std::memset(out, static_cast<int>(version & 0xff), size);
  return b;
}

struct Pin {
  PinnedBlock block;
  OwnerId owner;
  uint64_t id;
  uint64_t version;
};

class Harness {
 public:
  Harness(EvictionPolicyKind policy, uint64_t seed)
      : model_(policy == EvictionPolicyKind::kLeafLru, kOwners, kCapacity, kOwners - 1,
               policy == EvictionPolicyKind::kChain),
        rng_(seed) {
    budget_ =
        SharedHotBudget::Create({.capacity_bytes = kCapacity, .policy = policy}).value();
    for (OwnerId o = 0; o < kOwners; ++o) {
      tiers_.push_back(
          HotTier::Open(budget_, budget_->RegisterOwner("m" + std::to_string(o)).value())
              .value());
      listeners_.push_back(std::make_unique<SharedRecorder::Listener>(&recorder_, o));
      if (o != kOwners - 1) tiers_[o]->SetEvictionListener(listeners_[o].get());
    }
  }

  // One random operation, then every check. Returns false after a failure.
  bool Step(uint64_t op) {
    const OwnerId o = static_cast<OwnerId>(rng_() % kOwners);
    const uint64_t id = 1 + rng_() % kKeys;
    const int dice = static_cast<int>(rng_() % 100);
    if (dice < 38) {
      DoPut(o, id, op);
    } else if (dice < 55) {
      DoGet(o, id);
    } else if (dice < 58) {
      EXPECT_EQ(tiers_[o]->HintUnlikelyReuse(KeyOf(o, id)), model_.Hint(o, id)) << id;
    } else if (dice < 70) {
      pins_.size() < kMaxPins ? DoPin(o, id) : DoUnpin();
    } else if (dice < 82) {
      DoUnpin();
    } else if (dice < 92) {
      DoRemove(o, id);
    } else if (dice < 94) {
      DoQuota(o);
    } else if (dice < 96) {
      DoCharge(o);
    } else if (dice < 98) {
      DoUncharge(o);
    } else {
      EXPECT_EQ(tiers_[o]->Contains(KeyOf(o, id)), model_.owner(o).entries.contains(id));
    }
    CheckInvariants();
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << "first failure at operation " << op;
      return false;
    }
    return true;
  }

  // What the run exercised, so a reader can see the test is not vacuous.
  void PrintSummary() const {
    const TierCounters t = budget_->Totals();
    std::printf(
        "[model] inserts %llu (rejected %llu) hits %llu misses %llu evictions %llu "
        "spills %llu removes %llu charges %llu (rejected %llu)\n",
        static_cast<unsigned long long>(t.inserts),
        static_cast<unsigned long long>(rejected_puts_),
        static_cast<unsigned long long>(t.hits),
        static_cast<unsigned long long>(t.misses),
        static_cast<unsigned long long>(t.evictions),
        static_cast<unsigned long long>(t.spills),
        static_cast<unsigned long long>(t.removes),
        static_cast<unsigned long long>(charges_),
        static_cast<unsigned long long>(rejected_charges_));
  }

  void ReleaseAll() {
    while (!pins_.empty()) DoUnpin();
    CheckInvariants();
  }

 private:
  void DoPut(OwnerId o, uint64_t id, uint64_t version) {
    // Mostly small blocks; sometimes a big one that must evict several.
    const uint64_t size = rng_() % 16 == 0 ? rng_() % (kCapacity / 2) : rng_() % 3000;
    const uint64_t parent = rng_() % 20 == 0 ? rng_() % (kKeys + 1) : DefaultParent(id);
    const bool dirty = rng_() % 3 != 0;
    BlockMeta meta;
    meta.key = KeyOf(o, id);
    meta.parent = KeyOf(o, parent);
    const bool expect_ok = model_.Put(o, id, parent, size, dirty, version);
    const Status s = tiers_[o]->Put(meta, MakePayload(size, version), dirty);
    EXPECT_EQ(s.ok(), expect_ok) << s.ToString();
    EXPECT_TRUE(s.ok() || s.IsNoSpace()) << s.ToString();
    rejected_puts_ += s.ok() ? 0 : 1;
  }

  void DoGet(OwnerId o, uint64_t id) {
    const auto expected = model_.Lookup(o, id, /*pin=*/false);
    StatusOr<SharedBytes> got = tiers_[o]->Get(KeyOf(o, id));
    ASSERT_EQ(got.ok(), expected.has_value());
    if (expected) ExpectPayload(*got, *expected);
  }

  void DoPin(OwnerId o, uint64_t id) {
    const auto expected = model_.Lookup(o, id, /*pin=*/true);
    std::optional<PinnedBlock> pin = tiers_[o]->Pin(KeyOf(o, id));
    ASSERT_EQ(pin.has_value(), expected.has_value());
    if (!pin) return;
    ExpectPayload(pin->payload(), *expected);
    pins_.push_back({std::move(*pin), o, id, expected->version});
  }

  void DoUnpin() {
    if (pins_.empty()) return;
    const size_t i = rng_() % pins_.size();
    // A pin keeps the bytes it saw even if the block was replaced since.
    const SharedBytes& seen = pins_[i].block.payload();
    EXPECT_TRUE(seen.empty() || uint64_t{seen.data()[0]} == (pins_[i].version & 0xff));
    model_.Unpin(pins_[i].owner, pins_[i].id);
    pins_[i].block.Release();
    pins_.erase(pins_.begin() + static_cast<ptrdiff_t>(i));
  }

  void DoRemove(OwnerId o, uint64_t id) {
    const int expected = model_.Remove(o, id);
    const Status s = tiers_[o]->Remove(KeyOf(o, id));
    EXPECT_EQ(s.ok(), expected == 0);
    EXPECT_EQ(s.IsNotFound(), expected == 1);
    EXPECT_EQ(s.IsBusy(), expected == 2);
  }

  void DoQuota(OwnerId o) {
    std::optional<uint64_t> quota;
    if (rng_() % 3 != 0) quota = HotEntryCharge(0) + rng_() % kCapacity;
    model_.SetQuota(o, quota);
    EXPECT_OK(budget_->SetOwnerQuota(o, quota));
  }

  void DoCharge(OwnerId o) {
    // Mostly a few blocks' worth; sometimes more than any owner may hold.
    const uint64_t bytes = rng_() % 32 == 0 ? rng_() % (2 * kCapacity) : rng_() % 6000;
    uint64_t expected_shortfall = 0, shortfall = 0;
    const bool expect_ok = model_.Charge(o, bytes, &expected_shortfall);
    const Status s = budget_->Charge(o, bytes, &shortfall);
    EXPECT_EQ(s.ok(), expect_ok) << s.ToString();
    EXPECT_TRUE(s.ok() || s.IsNoSpace()) << s.ToString();
    EXPECT_EQ(shortfall, expected_shortfall);
    ++(s.ok() ? charges_ : rejected_charges_);
  }

  void DoUncharge(OwnerId o) {
    const uint64_t held = model_.owner(o).charged;
    // Sometimes everything, sometimes one byte more than it holds (refused).
    const uint64_t dice = rng_() % 10;
    const uint64_t bytes = dice == 0 ? held + 1 : dice < 4 ? held : rng_() % (held + 1);
    const bool expect_ok = model_.Uncharge(o, bytes);
    const Status s = budget_->Uncharge(o, bytes);
    EXPECT_EQ(s.ok(), expect_ok) << s.ToString();
    EXPECT_TRUE(s.ok() || s.IsInvalidArgument()) << s.ToString();
  }

  void ExpectPayload(const SharedBytes& got, const Model::Entry& expected) {
    EXPECT_EQ(HotEntryCharge(got.size()), expected.charge);
    if (!got.empty()) {
      EXPECT_EQ(uint64_t{got.data()[0]}, expected.version & 0xff);
    }
  }

  void CheckInvariants() {
    EXPECT_EQ(recorder_.victims, model_.TakeVictims()) << "victims or their order differ";
    recorder_.victims.clear();
    TierCounters sum;
    for (OwnerId o = 0; o < kOwners; ++o) {
      const TierCounters c = budget_->OwnerCounters(o);
      EXPECT_EQ(c, model_.Counters(o)) << "owner " << o;
      sum.entries += c.entries;
      sum.bytes += c.bytes;
      sum.pinned_bytes += c.pinned_bytes;
      sum.hits += c.hits;
      sum.misses += c.misses;
      sum.inserts += c.inserts;
      sum.removes += c.removes;
      sum.evictions += c.evictions;
      sum.spills += c.spills;
      sum.external_bytes += c.external_bytes;
    }
    const TierCounters total = budget_->Totals();
    EXPECT_EQ(total, sum) << "budget total must equal the sum of its owners";
    EXPECT_LE(total.bytes, kCapacity);
    findings_.clear();
    EXPECT_OK(budget_->Audit(&findings_));
    for (const AuditFinding& f : findings_) ADD_FAILURE() << f.what << ": " << f.detail;
  }

  Model model_;
  std::mt19937_64 rng_;
  std::shared_ptr<SharedHotBudget> budget_;
  std::vector<std::unique_ptr<HotTier>> tiers_;
  SharedRecorder recorder_;
  std::vector<std::unique_ptr<SharedRecorder::Listener>> listeners_;
  std::vector<Pin> pins_;
  std::vector<AuditFinding> findings_;
  uint64_t rejected_puts_ = 0;
  uint64_t charges_ = 0;
  uint64_t rejected_charges_ = 0;
};

void RunModel(EvictionPolicyKind policy, const char* name) {
  const uint64_t seed = testing::TestSeed(name);
  // 500,000 operations per policy in CI (three policies).
  const uint64_t ops = testing::Iterations(500000, 10000000);
  Harness harness(policy, seed);
  for (uint64_t op = 0; op < ops; ++op) {
    if (!harness.Step(op)) return;
  }
  harness.ReleaseAll();
  harness.PrintSummary();
}

TEST(HotTierModel, LruMatchesTheReferenceModelAfterEveryOperation) {
  RunModel(EvictionPolicyKind::kLru, "HotTierModel.Lru");
}

TEST(HotTierModel, LeafLruMatchesTheReferenceModelAfterEveryOperation) {
  RunModel(EvictionPolicyKind::kLeafLru, "HotTierModel.LeafLru");
}

TEST(HotTierModel, ChainMatchesTheReferenceModelAfterEveryOperation) {
  RunModel(EvictionPolicyKind::kChain, "HotTierModel.Chain");
}

}  // namespace
}  // namespace prefixkv
