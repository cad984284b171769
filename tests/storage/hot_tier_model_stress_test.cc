// Model-based randomized test of SharedHotBudget + HotTier views.
//
// A plain reference model (maps and linear scans, no trees, no tentative
// victims) runs the same random operations — insert/replace, lookup, pin,
// unpin, remove, quota changes, across several owners, under both policies —
// and after EVERY operation the test checks: the status matches; the victims
// handed to each owner's listener, in order, match the model's; every owner's
// counters match the model (state counters recomputed from its entries); the
// budget total equals the sum of the owners; the budget is never exceeded;
// and Audit() finds nothing.
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

#include "prefixkv/hot_tier.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

constexpr int kOwners = 4;      // owner 3 has no listener
constexpr uint64_t kKeys = 24;  // ids 1..kKeys per owner
constexpr uint64_t kCapacity = 64 << 10;
constexpr size_t kMaxPins = 12;

BlockKey KeyOf(uint64_t id) { return id == 0 ? BlockKey{} : BlockKey{0x5EED, id}; }

// Chains of eight: 1 <- 2 <- ... <- 8, 9 <- 10 ...
uint64_t DefaultParent(uint64_t id) { return id % 8 == 1 ? 0 : id - 1; }

struct Victim {
  OwnerId owner;
  uint64_t id;
  bool dirty;
  bool operator==(const Victim&) const = default;
};

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

// The reference: what the budget must do, written as plainly as possible.
class Model {
 public:
  struct Entry {
    uint64_t charge, seq, parent, version;
    uint32_t pins = 0;
    bool dirty;
  };
  struct Owner {
    std::optional<uint64_t> quota;
    bool has_listener = true;
    std::map<uint64_t, Entry> entries;
    TierCounters events;  // event counters only; state is recomputed
  };

  explicit Model(bool leaf) : leaf_(leaf) { owners_[kOwners - 1].has_listener = false; }

  Owner& owner(OwnerId o) { return owners_[o]; }
  std::vector<Victim> TakeVictims() { return std::exchange(victims_, {}); }

  TierCounters Counters(OwnerId o) const {
    TierCounters c = owners_[o].events;
    for (const auto& [id, e] : owners_[o].entries) {
      ++c.entries;
      c.bytes += e.charge;
      if (e.pins > 0) c.pinned_bytes += e.charge;
    }
    return c;
  }

  bool Put(OwnerId o, uint64_t id, uint64_t parent, uint64_t size, bool dirty,
           uint64_t ver) {
    const uint64_t charge = HotEntryCharge(size);
    Owner& own = owners_[o];
    if (charge > kCapacity || (own.quota && charge > *own.quota)) return false;
    auto existing = own.entries.find(id);
    const uint64_t old = existing != own.entries.end() ? existing->second.charge : 0;
    Plan plan{o, id, existing == own.entries.end() ? parent : 0, {}, {}};
    plan.children = ChildCounts(plan);
    uint64_t owner_after = Bytes(o) - old + charge,
             total_after = TotalBytes() - old + charge;
    while (own.quota && owner_after > *own.quota) {
      auto v = Oldest(plan, o);
      if (!v) return false;
      const uint64_t freed = Doom(&plan, *v);
      owner_after -= freed;
      total_after -= freed;
    }
    while (total_after > kCapacity) {
      auto v = Oldest(plan, std::nullopt);
      if (!v) return false;
      total_after -= Doom(&plan, *v);
    }
    for (const auto& [vo, vid] : plan.doomed) Evict(vo, vid);
    Entry& e = own.entries[id];
    e = Entry{charge, ++seq_, parent, ver, e.pins, dirty};
    ++own.events.inserts;
    return true;
  }

  std::optional<Entry> Lookup(OwnerId o, uint64_t id, bool pin) {
    auto it = owners_[o].entries.find(id);
    if (it == owners_[o].entries.end()) {
      ++owners_[o].events.misses;
      return std::nullopt;
    }
    ++owners_[o].events.hits;
    it->second.seq = ++seq_;
    if (pin) ++it->second.pins;
    return it->second;
  }

  void Unpin(OwnerId o, uint64_t id) { --owners_[o].entries.at(id).pins; }

  // 0 ok, 1 not found, 2 busy.
  int Remove(OwnerId o, uint64_t id) {
    auto it = owners_[o].entries.find(id);
    if (it == owners_[o].entries.end()) return 1;
    if (it->second.pins > 0) return 2;
    owners_[o].entries.erase(it);
    ++owners_[o].events.removes;
    return 0;
  }

  void SetQuota(OwnerId o, std::optional<uint64_t> quota) {
    owners_[o].quota = quota;
    Plan plan{o, 0, 0, {}, {}};
    plan.children = ChildCounts(plan);
    uint64_t bytes = Bytes(o);
    while (quota && bytes > *quota) {
      auto v = Oldest(plan, o);
      if (!v) break;
      bytes -= Doom(&plan, *v);
    }
    for (const auto& [vo, vid] : plan.doomed) Evict(vo, vid);
  }

 private:
  using Slot = std::pair<OwnerId, uint64_t>;
  struct Plan {
    OwnerId owner;
    uint64_t id;          // the block being inserted (never a victim); 0 for none
    uint64_t new_parent;  // a new block's parent: counts as having a child
    std::vector<Slot> doomed;
    std::map<Slot, uint32_t> children;  // resident children, doomed excluded
  };

  std::map<Slot, uint32_t> ChildCounts(const Plan& plan) const {
    std::map<Slot, uint32_t> counts;
    for (OwnerId o = 0; o < kOwners; ++o) {
      for (const auto& [id, e] : owners_[o].entries) {
        if (e.parent != 0 && e.parent != id) ++counts[{o, e.parent}];
      }
    }
    if (plan.new_parent != 0 && plan.new_parent != plan.id) {
      ++counts[{plan.owner, plan.new_parent}];
    }
    return counts;
  }

  std::optional<Slot> Oldest(const Plan& plan, std::optional<OwnerId> only) const {
    std::optional<Slot> best;
    uint64_t best_seq = UINT64_MAX;
    for (OwnerId o = 0; o < kOwners; ++o) {
      if (only && *only != o) continue;
      for (const auto& [id, e] : owners_[o].entries) {
        const Slot slot{o, id};
        if ((o == plan.owner && id == plan.id) || e.pins > 0 || e.seq >= best_seq)
          continue;
        if (std::find(plan.doomed.begin(), plan.doomed.end(), slot) != plan.doomed.end())
          continue;
        auto c = plan.children.find(slot);
        if (leaf_ && c != plan.children.end() && c->second > 0) continue;
        best = slot;
        best_seq = e.seq;
      }
    }
    return best;
  }

  uint64_t Doom(Plan* plan, const Slot& v) {
    const Entry& e = owners_[v.first].entries.at(v.second);
    if (e.parent != 0 && e.parent != v.second) --plan->children[{v.first, e.parent}];
    plan->doomed.push_back(v);
    return e.charge;
  }

  void Evict(OwnerId o, uint64_t id) {
    Owner& own = owners_[o];
    const Entry e = own.entries.at(id);
    own.entries.erase(id);
    ++own.events.evictions;
    if (own.has_listener) {
      if (e.dirty) ++own.events.spills;
      victims_.push_back({o, id, e.dirty});
    }
  }

  uint64_t Bytes(OwnerId o) const { return Counters(o).bytes; }
  uint64_t TotalBytes() const {
    uint64_t sum = 0;
    for (OwnerId o = 0; o < kOwners; ++o) sum += Bytes(o);
    return sum;
  }

  const bool leaf_;
  Owner owners_[kOwners];
  uint64_t seq_ = 0;
  std::vector<Victim> victims_;
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
      : model_(policy == EvictionPolicyKind::kLeafLru), rng_(seed) {
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
    } else if (dice < 58) {
      DoGet(o, id);
    } else if (dice < 70) {
      pins_.size() < kMaxPins ? DoPin(o, id) : DoUnpin();
    } else if (dice < 82) {
      DoUnpin();
    } else if (dice < 92) {
      DoRemove(o, id);
    } else if (dice < 94) {
      DoQuota(o);
    } else {
      EXPECT_EQ(tiers_[o]->Contains(KeyOf(id)), model_.owner(o).entries.contains(id));
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
        "spills %llu removes %llu\n",
        static_cast<unsigned long long>(t.inserts),
        static_cast<unsigned long long>(rejected_puts_),
        static_cast<unsigned long long>(t.hits),
        static_cast<unsigned long long>(t.misses),
        static_cast<unsigned long long>(t.evictions),
        static_cast<unsigned long long>(t.spills),
        static_cast<unsigned long long>(t.removes));
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
    meta.key = KeyOf(id);
    meta.parent = KeyOf(parent);
    const bool expect_ok = model_.Put(o, id, parent, size, dirty, version);
    const Status s = tiers_[o]->Put(meta, MakePayload(size, version), dirty);
    EXPECT_EQ(s.ok(), expect_ok) << s.ToString();
    EXPECT_TRUE(s.ok() || s.IsNoSpace()) << s.ToString();
    rejected_puts_ += s.ok() ? 0 : 1;
  }

  void DoGet(OwnerId o, uint64_t id) {
    const auto expected = model_.Lookup(o, id, /*pin=*/false);
    StatusOr<SharedBytes> got = tiers_[o]->Get(KeyOf(id));
    ASSERT_EQ(got.ok(), expected.has_value());
    if (expected) ExpectPayload(*got, *expected);
  }

  void DoPin(OwnerId o, uint64_t id) {
    const auto expected = model_.Lookup(o, id, /*pin=*/true);
    std::optional<PinnedBlock> pin = tiers_[o]->Pin(KeyOf(id));
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
    const Status s = tiers_[o]->Remove(KeyOf(id));
    EXPECT_EQ(s.ok(), expected == 0);
    EXPECT_EQ(s.IsNotFound(), expected == 1);
    EXPECT_EQ(s.IsBusy(), expected == 2);
  }

  void DoQuota(OwnerId o) {
    std::optional<uint64_t> quota;
    if (rng_() % 3 != 0) quota = HotEntryCharge(0) + rng_() % kCapacity;
    model_.SetQuota(o, quota);
    EXPECT_TRUE(budget_->SetOwnerQuota(o, quota).ok());
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
    }
    const TierCounters total = budget_->Totals();
    EXPECT_EQ(total, sum) << "budget total must equal the sum of its owners";
    EXPECT_LE(total.bytes, kCapacity);
    findings_.clear();
    EXPECT_TRUE(budget_->Audit(&findings_).ok());
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
};

void RunModel(EvictionPolicyKind policy, const char* name) {
  const uint64_t seed = testing::TestSeed(name);
  // Half the CI budget per policy: 1,000,000 operations in total.
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

}  // namespace
}  // namespace prefixkv
