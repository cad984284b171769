// The spill gap: between the moment the hot tier evicts a dirty block and the
// moment its eviction listener (the SSD write-back) has taken it, the block is
// in neither tier. Lookups and removals of that key must wait for the listener
// instead of answering "absent" (a GET returning nil, a DEL returning 0 and the
// deleted value then resurrected by the write-back). Checked on HotTier and on
// MemTier. Run under ThreadSanitizer by `tools/run test`.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "prefixkv/advanced/hot_tier.h"
#include "tests/storage/hot/hot_test_util.h"
#include "tests/support/gate.h"
#include "tests/support/mem_tier.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

using hot_test::kCharge;
using hot_test::Meta;
using hot_test::Payload;

// Blocks every OnEvict until Open(); records the keys it was handed.
class GatedListener final : public EvictionListener {
 public:
  void OnEvict(const BlockMeta& meta, const SharedBytes&, bool dirty) override {
    gate_.Pass();
    std::lock_guard<std::mutex> lock(mu_);
    keys_.push_back(meta.key);
    dirty_ = dirty_ || dirty;
  }
  void WaitEntered(int n) { gate_.WaitForArrivals(n); }
  void Open() { gate_.Open(); }
  std::vector<BlockKey> keys() {
    std::lock_guard<std::mutex> lock(mu_);
    return keys_;
  }

 private:
  testing::Gate gate_;
  std::mutex mu_;
  bool dirty_ = false;
  std::vector<BlockKey> keys_;
};

// The whole check, on any tier that holds exactly one block of kPayload bytes.
void ExpectNoSpillGap(BlockTier* tier) {
  GatedListener gate;
  tier->SetEvictionListener(&gate);
  ASSERT_OK(tier->Put(Meta(1), Payload(), /*dirty=*/true));
  std::thread evictor([&] { EXPECT_OK(tier->Put(Meta(2), Payload(), true)); });
  gate.WaitEntered(1);  // block 1 is out of the hot tier, not yet handed over

  std::atomic<int> finished{0};
  bool contained = true;
  Status removed;
  StatusOr<SharedBytes> got = Status::Internal("not looked up yet");
  std::thread contains([&] {
    contained = tier->Contains(Meta(1).key);
    finished++;
  });
  std::thread remove([&] {
    removed = tier->Remove(Meta(1).key);
    finished++;
  });
  std::thread get([&] {
    got = tier->Get(Meta(1).key);
    finished++;
  });
  // A correct tier keeps all three waiting however long this sleeps; a tier
  // that answers "absent" finishes them at once.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(finished.load(), 0) << "a lookup answered while the block was in no tier";
  gate.Open();
  for (std::thread* t : {&evictor, &contains, &remove, &get}) t->join();
  EXPECT_EQ(finished.load(), 3);
  // Now the listener holds block 1: the hot tier rightly says it is absent.
  EXPECT_FALSE(contained);
  EXPECT_TRUE(removed.IsNotFound()) << removed.ToString();
  EXPECT_TRUE(got.status().IsNotFound());
  ASSERT_EQ(gate.keys().size(), 1u);
  EXPECT_EQ(gate.keys()[0], Meta(1).key);
  // Other keys never wait on a spill.
  EXPECT_TRUE(tier->Contains(Meta(2).key));
}

TEST(HotTierSpill, LookupsAndRemovalOfABlockBeingSpilledWaitForTheListener) {
  auto tier = HotTier::Create({.capacity_bytes = kCharge}).value();  // one block
  ExpectNoSpillGap(tier.get());
}

TEST(MemTierSpill, LookupsAndRemovalOfABlockBeingSpilledWaitForTheListener) {
  MemTier tier(MemTierOptions{MemTier::Charge(hot_test::kPayload)});  // one block
  ExpectNoSpillGap(&tier);
}

TEST(HotTierSpill, CleanEvictionsDoNotMakeLookupsWait) {
  auto tier = HotTier::Create({.capacity_bytes = kCharge}).value();
  GatedListener gate;
  tier->SetEvictionListener(&gate);
  ASSERT_OK(tier->Put(Meta(1), Payload(), /*dirty=*/false));
  std::thread evictor([&] { EXPECT_OK(tier->Put(Meta(2), Payload(), false)); });
  gate.WaitEntered(1);
  // A clean block is already in a lower tier: "absent here" is the truth.
  EXPECT_FALSE(tier->Contains(Meta(1).key));
  EXPECT_TRUE(tier->Remove(Meta(1).key).IsNotFound());
  gate.Open();
  evictor.join();
}

}  // namespace
}  // namespace prefixkv
