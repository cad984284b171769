// TierStack: hot over SSD as one store (write-back, write-through, promotion,
// rewrite in place, removal from both, the per-key guard against racing
// promotions and flushes), on MemTiers so capacities are exact.
#include "prefixkv/advanced/tier_stack.h"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <list>
#include <random>
#include <thread>
#include <unordered_map>

#include "tests/storage/stack/gated_tier.h"
#include "tests/support/mem_tier.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

constexpr size_t kPayload = 1000;
constexpr uint64_t kCharge = MemTier::Charge(kPayload);

BlockMeta Meta(uint64_t i) {
  return BlockMeta{BlockKey{7, i}, BlockKey{7, i - 1}, {}, 0};
}
SharedBytes Payload(char c, size_t size = kPayload) {
  return SharedBytes::Copy(std::string(size, c));
}

class TierStackTest : public ::testing::Test {
 protected:
  MemTier hot_{{.capacity_bytes = 3 * kCharge}};
  MemTier ssd_;
  TierStack stack_{&hot_, &ssd_};
};

TEST_F(TierStackTest, PutIsWriteBackUntilTheHotTierEvicts) {
  for (uint64_t i = 1; i <= 3; ++i) ASSERT_OK(stack_.Put(Meta(i), Payload('a')));
  EXPECT_EQ(ssd_.Totals().entries, 0u);
  EXPECT_EQ(stack_.dirty_blocks(), 3u);
  ASSERT_OK(stack_.Put(Meta(4), Payload('a')));
  // Block 1 (least recently used) was evicted and written below.
  EXPECT_FALSE(hot_.Contains(Meta(1).key));
  EXPECT_TRUE(ssd_.Contains(Meta(1).key));
  EXPECT_EQ(stack_.Locate(Meta(1).key), TierLevel::kSsd);
  EXPECT_EQ(stack_.dirty_blocks(), 3u);
}

// Issue 14, point 3: the new bytes are in RAM only until written back; the
// older SSD copy must not survive them (a kill -9 would serve it).
TEST_F(TierStackTest, AWriteBackPutRemovesTheOlderSsdCopyFirst) {
  ASSERT_OK(ssd_.Put(Meta(1), Payload('o'), false));
  ASSERT_OK(stack_.Put(Meta(1), Payload('n')));
  EXPECT_FALSE(ssd_.Contains(Meta(1).key)) << "the overwritten value stays below";
  EXPECT_EQ(stack_.dirty_blocks(), 1u);
  StatusOr<TierHit> hit = stack_.Get(Meta(1).key);
  ASSERT_OK(hit);
  EXPECT_EQ(hit->payload.view(), std::string(kPayload, 'n'));
  // A promoted (clean) hot copy: overwriting it removes the SSD copy too.
  ASSERT_OK(ssd_.Put(Meta(2), Payload('o'), false));
  ASSERT_OK(stack_.Get(Meta(2).key));
  ASSERT_TRUE(hot_.Contains(Meta(2).key));
  ASSERT_OK(stack_.Put(Meta(2), Payload('n')));
  EXPECT_FALSE(ssd_.Contains(Meta(2).key));
  // The new bytes still reach the SSD tier when evicted.
  ASSERT_OK(stack_.Flush());
  StatusOr<SharedBytes> below = ssd_.Get(Meta(2).key);
  ASSERT_OK(below);
  EXPECT_EQ(below->view(), std::string(kPayload, 'n'));
}

TEST_F(TierStackTest, GetServesHotFirstThenPromotesAnSsdHit) {
  ASSERT_OK(ssd_.Put(Meta(1), Payload('s'), false));
  StatusOr<TierHit> hit = stack_.Get(Meta(1).key);
  ASSERT_OK(hit);
  EXPECT_EQ(hit->level, TierLevel::kSsd);
  EXPECT_TRUE(hot_.Contains(Meta(1).key));
  hit = stack_.Get(Meta(1).key);
  EXPECT_EQ(hit->level, TierLevel::kHot);
  // A promoted copy is clean: evicting it writes nothing.
  EXPECT_EQ(stack_.dirty_blocks(), 0u);
  EXPECT_TRUE(stack_.Get(Meta(9).key).status().IsNotFound());
}

TEST_F(TierStackTest, GetWithoutPromotionLeavesTheHotTierAlone) {
  ASSERT_OK(ssd_.Put(Meta(1), Payload('s'), false));
  ASSERT_OK(stack_.Get(Meta(1).key, /*allow_promotion=*/false));
  EXPECT_FALSE(hot_.Contains(Meta(1).key));
}

TEST_F(TierStackTest, FlushWritesDirtyBlocksBelowOnce) {
  ASSERT_OK(stack_.Put(Meta(1), Payload('a')));
  ASSERT_OK(stack_.Put(Meta(2), Payload('b')));
  ASSERT_OK(stack_.Flush());
  EXPECT_EQ(ssd_.Totals().entries, 2u);
  EXPECT_EQ(stack_.dirty_blocks(), 0u);
  EXPECT_EQ(ssd_.Get(Meta(2).key)->view(), Payload('b').view());
  // Evicting the now-clean copies writes nothing more.
  for (uint64_t i = 3; i <= 5; ++i) ASSERT_OK(stack_.Put(Meta(i), Payload('c')));
  EXPECT_EQ(ssd_.Totals().inserts, 2u);
}

// A flush is maintenance, not a read: it counts no hot hit or insert and
// leaves the eviction order alone (it used to Get and re-Put every dirty
// block, touching them in hash order).
TEST_F(TierStackTest, FlushCountsNoHitNorInsertAndKeepsTheEvictionOrder) {
  for (uint64_t i = 1; i <= 3; ++i) ASSERT_OK(stack_.Put(Meta(i), Payload('a')));
  ASSERT_OK(stack_.Get(Meta(1).key));  // LRU order now 2, 3, 1
  const TierCounters before = hot_.Totals();
  ASSERT_OK(stack_.Flush());
  const TierCounters after = hot_.Totals();
  EXPECT_EQ(after.hits, before.hits);
  EXPECT_EQ(after.inserts, before.inserts);
  EXPECT_EQ(stack_.dirty_blocks(), 0u);
  ASSERT_OK(stack_.Put(Meta(4), Payload('b')));
  ASSERT_OK(stack_.Put(Meta(5), Payload('b')));
  EXPECT_TRUE(hot_.Contains(Meta(1).key));
  EXPECT_FALSE(hot_.Contains(Meta(2).key));
  EXPECT_FALSE(hot_.Contains(Meta(3).key));
  // They were clean: evicting them wrote nothing more below.
  EXPECT_EQ(ssd_.Totals().inserts, 3u);
}

TEST_F(TierStackTest, RewriteReplacesTheBlockInEveryTierHoldingIt) {
  ASSERT_OK(stack_.Put(Meta(1), Payload('a')));
  ASSERT_OK(stack_.Flush());
  ASSERT_OK(ssd_.Put(Meta(2), Payload('a'), false));  // SSD only
  ASSERT_OK(stack_.Rewrite(Meta(1), Payload('z', 10)));
  ASSERT_OK(stack_.Rewrite(Meta(2), Payload('z', 10)));
  EXPECT_EQ(hot_.Get(Meta(1).key)->view(), Payload('z', 10).view());
  EXPECT_EQ(ssd_.Get(Meta(1).key)->view(), Payload('z', 10).view());
  EXPECT_EQ(ssd_.Get(Meta(2).key)->view(), Payload('z', 10).view());
  EXPECT_FALSE(hot_.Contains(Meta(2).key));
  EXPECT_EQ(hot_.Totals().bytes, MemTier::Charge(10));
  EXPECT_EQ(ssd_.Totals().bytes, 2 * MemTier::Charge(10));
  EXPECT_TRUE(stack_.Rewrite(Meta(3), Payload('z')).IsNotFound());
}

TEST_F(TierStackTest, RemoveTakesTheBlockOutOfBothTiers) {
  ASSERT_OK(stack_.Put(Meta(1), Payload('a')));
  ASSERT_OK(stack_.Flush());
  ASSERT_OK(stack_.Remove(Meta(1).key));
  EXPECT_FALSE(stack_.Contains(Meta(1).key));
  EXPECT_TRUE(stack_.Remove(Meta(1).key).IsNotFound());
}

TEST_F(TierStackTest, BlockTooBigForTheHotTierGoesToSsd) {
  ASSERT_OK(stack_.Put(Meta(1), Payload('a', 4 * kCharge)));
  EXPECT_EQ(stack_.Locate(Meta(1).key), TierLevel::kSsd);
  EXPECT_EQ(stack_.dirty_blocks(), 0u);
}

TEST(TierStack, WithoutAHotTierPutsGoStraightToSsd) {
  MemTier ssd;
  TierStack stack(nullptr, &ssd);
  ASSERT_OK(stack.Put(Meta(1), Payload('a')));
  EXPECT_EQ(stack.Get(Meta(1).key)->level, TierLevel::kSsd);
  EXPECT_EQ(stack.lowest(), &ssd);
}

TEST(TierStack, WriteThroughStoresBothCopiesAtOnce) {
  MemTier hot, ssd;
  TierStack stack(&hot, &ssd, nullptr, {.write_through = true});
  ASSERT_OK(stack.Put(Meta(1), Payload('a')));
  EXPECT_TRUE(hot.Contains(Meta(1).key));
  EXPECT_TRUE(ssd.Contains(Meta(1).key));
  EXPECT_EQ(stack.dirty_blocks(), 0u);
}

TEST(TierStack, WriteThroughCopiesLeaveRamCleanWithoutAnotherSsdWrite) {
  MemTier hot({.capacity_bytes = 2 * kCharge}), ssd;
  TierStack stack(&hot, &ssd, nullptr, {.write_through = true});
  for (uint64_t i = 1; i <= 3; ++i) ASSERT_OK(stack.Put(Meta(i), Payload('a')));
  EXPECT_FALSE(hot.Contains(Meta(1).key));  // evicted clean
  EXPECT_EQ(ssd.Totals().inserts, 3u);      // one write per Put, none at eviction
  EXPECT_EQ(stack.Get(Meta(1).key)->payload.view(), Payload('a').view());
}

TEST_F(TierStackTest, APutTooLargeForRamDropsTheStaleHotCopy) {
  ASSERT_OK(stack_.Put(Meta(1), Payload('s')));
  ASSERT_OK(stack_.Put(Meta(1), Payload('L', 4 * kCharge)));
  EXPECT_FALSE(hot_.Contains(Meta(1).key));
  EXPECT_EQ(stack_.dirty_blocks(), 0u);
  EXPECT_EQ(stack_.Get(Meta(1).key)->payload.view(), Payload('L', 4 * kCharge).view());
  ASSERT_OK(stack_.Flush());  // nothing stale is written over the new SSD copy
  EXPECT_EQ(ssd_.Get(Meta(1).key)->view(), Payload('L', 4 * kCharge).view());
}

TEST(TierStack, AWriteThroughPutTooLargeForRamDropsTheStaleHotCopy) {
  MemTier hot({.capacity_bytes = 2 * kCharge}), ssd;
  TierStack stack(&hot, &ssd, nullptr, {.write_through = true});
  ASSERT_OK(stack.Put(Meta(1), Payload('s')));
  ASSERT_OK(stack.Put(Meta(1), Payload('L', 3 * kCharge)));
  EXPECT_FALSE(hot.Contains(Meta(1).key));
  EXPECT_EQ(stack.Get(Meta(1).key)->payload.view(), Payload('L', 3 * kCharge).view());
}

TEST(TierStack, WithOnlyAFullHotTierAPutTooLargeIsNoSpaceAndChangesNothing) {
  MemTier hot({.capacity_bytes = kCharge});
  TierStack stack(&hot, nullptr);
  ASSERT_OK(stack.Put(Meta(1), Payload('s')));
  EXPECT_TRUE(stack.Put(Meta(1), Payload('L', 2 * kCharge)).IsNoSpace());
  EXPECT_EQ(stack.Get(Meta(1).key)->payload.view(), Payload('s').view());
  EXPECT_TRUE(stack.Put(Meta(2), Payload('L', 2 * kCharge)).IsNoSpace());
  EXPECT_TRUE(stack.Get(Meta(2).key).status().IsNotFound());
}

// The per-key guard. Each test stops one stack operation half way (GatedTier)
// and runs a second operation of the same key there. With the guard the
// second one waits; without it, it runs at once and the first one then
// finishes on stale state: these tests fail.
constexpr auto kPatience = std::chrono::milliseconds(300);
using testing::GatedTier;
using testing::Racer;

// A stack whose SSD tier (`below`, behind the gate `ssd`) can hold an
// operation half way; the hot tier holds `hot_capacity_bytes` (0: unlimited).
struct GatedSsdStack {
  explicit GatedSsdStack(uint64_t hot_capacity_bytes = 0)
      : hot({.capacity_bytes = hot_capacity_bytes}) {}
  MemTier hot, below;
  GatedTier ssd{&below};
  TierStack stack{&hot, &ssd};
};

// A kill -9 during a rewrite (supersede-on-extend strips a tip this way) must
// find the old or the new copy below, never neither: the SSD copy is replaced
// by one Put. Removing it first cut the chain through it and orphaned its
// children (found by the hybrid sessions' kill loop).
TEST(TierStackGuard, ARewriteNeverLeavesTheBlockAbsentBelow) {
  GatedSsdStack s(3 * kCharge);
  ASSERT_OK(s.stack.Put(Meta(1), Payload('o')));
  ASSERT_OK(s.stack.Flush());
  s.ssd.Arm(GatedTier::Op::kPut, Meta(1).key);
  std::thread rewriter([&] { EXPECT_OK(s.stack.Rewrite(Meta(1), Payload('n'))); });
  s.ssd.WaitHeld();  // the new bytes are about to be stored below
  StatusOr<SharedBytes> below = s.below.Get(Meta(1).key);
  EXPECT_TRUE(below.ok()) << "the block is on no durable tier mid-rewrite";
  if (below.ok()) {
    EXPECT_EQ(below->view(), Payload('o').view());
  }
  s.ssd.Open();
  rewriter.join();
  EXPECT_EQ(s.below.Get(Meta(1).key)->view(), Payload('n').view());
  EXPECT_EQ(s.stack.Get(Meta(1).key)->payload.view(), Payload('n').view());
}

// Runs `first` on a thread until `gate` holds it at its armed operation, then
// `while_held` on this thread, then `second` on another thread. Returns
// whether `second` finished within kPatience while `first` was held: with the
// per-key guard it waits. Lets `first` go and joins both.
bool SecondOvertakesHeldFirst(
    GatedTier& gate, const std::function<void()>& first,
    const std::function<void()>& second,
    const std::function<void()>& while_held = [] {}) {
  std::thread held(first);
  gate.WaitHeld();
  while_held();
  Racer racer(second);
  const bool overtook = racer.FinishesWithin(kPatience);
  gate.Open();
  held.join();
  racer.Join();
  return overtook;
}

TEST(TierStackGuard, AnSsdHitBeingPromotedNeverOverwritesANewerPut) {
  GatedSsdStack s;
  ASSERT_OK(s.below.Put(Meta(1), Payload('o'), false));
  s.ssd.Arm(GatedTier::Op::kGet, Meta(1).key);
  // The reader holds the old value and is about to promote it.
  const bool overtook = SecondOvertakesHeldFirst(
      s.ssd, [&] { EXPECT_OK(s.stack.Get(Meta(1).key)); },
      [&] { EXPECT_OK(s.stack.Put(Meta(1), Payload('n'))); });
  EXPECT_FALSE(overtook) << "a Put ran while an SSD hit of its key was being promoted";
  EXPECT_EQ(s.stack.Get(Meta(1).key)->payload.view(), Payload('n').view());
  EXPECT_EQ(s.stack.dirty_blocks(), 1u);  // the new value still has to reach SSD
}

TEST(TierStackGuard, AnSsdHitBeingPromotedNeverBringsBackARemovedBlock) {
  GatedSsdStack s;
  ASSERT_OK(s.below.Put(Meta(1), Payload('o'), false));
  s.ssd.Arm(GatedTier::Op::kGet, Meta(1).key);
  const bool overtook = SecondOvertakesHeldFirst(
      s.ssd, [&] { EXPECT_OK(s.stack.Get(Meta(1).key)); },
      [&] { EXPECT_OK(s.stack.Remove(Meta(1).key)); });
  EXPECT_FALSE(overtook);
  EXPECT_FALSE(s.stack.Contains(Meta(1).key)) << "a removed block came back";
  EXPECT_TRUE(s.stack.Get(Meta(1).key).status().IsNotFound());
}

TEST(TierStackGuard, FlushNeverMarksANewerPutCleanNorOverwritesIt) {
  GatedSsdStack s;
  ASSERT_OK(s.stack.Put(Meta(1), Payload('o')));
  s.ssd.Arm(GatedTier::Op::kPut, Meta(1).key);
  // Flush read the old value and is about to write it below.
  const bool overtook = SecondOvertakesHeldFirst(
      s.ssd, [&] { EXPECT_OK(s.stack.Flush()); },
      [&] { EXPECT_OK(s.stack.Put(Meta(1), Payload('n'))); });
  EXPECT_FALSE(overtook);
  EXPECT_EQ(s.stack.Get(Meta(1).key)->payload.view(), Payload('n').view());
  EXPECT_EQ(s.stack.dirty_blocks(), 1u);
  ASSERT_OK(s.stack.Flush());
  EXPECT_EQ(s.below.Get(Meta(1).key)->view(), Payload('n').view());
}

TEST(TierStackGuard, TheLateEvictionOfAnOlderCopyLeavesTheNewerCopyDirty) {
  MemTier ram({.capacity_bytes = kCharge}), ssd;  // one block fits
  GatedTier hot(&ram);
  TierStack stack(&hot, &ssd);
  ASSERT_OK(stack.Put(Meta(1), Payload('o')));
  hot.Arm(GatedTier::Op::kEvict, Meta(1).key);
  std::thread evictor([&] { EXPECT_OK(stack.Put(Meta(2), Payload('x'))); });
  hot.WaitHeld();  // 'o' left RAM; the stack has not heard of it yet
  ASSERT_OK(stack.Put(Meta(1), Payload('n')));
  hot.Open();  // now the stack hears of the old copy's eviction
  evictor.join();
  EXPECT_EQ(stack.dirty_blocks(), 1u) << "the eviction of 'o' unmarked 'n'";
  ASSERT_OK(stack.Flush());
  EXPECT_EQ(ssd.Get(Meta(1).key)->view(), Payload('n').view());
}

// Rewrite checks which tiers hold the block, then replaces the hot copy; the
// hot tier evicts without the key's stripe, so the copy can go below in
// between. The new bytes must still land, and the old copy must never be
// dropped while they are not stored.
void EvictWhileRewriteRemoves(GatedTier& hot, MemTier& ram, TierStack& stack,
                              bool clean_below) {
  ASSERT_OK(stack.Put(Meta(1), Payload('o')));
  if (clean_below) {
    ASSERT_OK(stack.Flush());
  }
  // A block also below has its RAM copy removed, then put again clean; one
  // only RAM holds is replaced there by a dirty Put in place.
  hot.Arm(clean_below ? GatedTier::Op::kRemove : GatedTier::Op::kPut, Meta(1).key);
  Status rewritten;
  std::thread writer([&] { rewritten = stack.Rewrite(Meta(1), Payload('n')); });
  hot.WaitHeld();  // the stack saw block 1 in RAM and is about to replace it
  ASSERT_OK(ram.Put(Meta(2), Payload('x'), /*dirty=*/false));  // evicts block 1
  hot.Open();
  writer.join();
  EXPECT_OK(rewritten) << "a block evicted half way through its rewrite was lost";
}

TEST(TierStackGuard, ARewriteOfADirtyBlockEvictedMeanwhileLandsBelow) {
  MemTier ram({.capacity_bytes = kCharge}), ssd;  // one block fits
  GatedTier hot(&ram);
  TierStack stack(&hot, &ssd);
  EvictWhileRewriteRemoves(hot, ram, stack, /*clean_below=*/false);
  ASSERT_TRUE(stack.Contains(Meta(1).key));
  EXPECT_EQ(stack.Get(Meta(1).key, /*allow_promotion=*/false)->payload.view(),
            Payload('n').view());
  ASSERT_OK(stack.Flush());
  EXPECT_EQ(ssd.Get(Meta(1).key)->view(), Payload('n').view());
}

TEST(TierStackGuard, ARewriteOfACleanBlockEvictedMeanwhileLandsBelow) {
  MemTier ram({.capacity_bytes = kCharge}), ssd;
  GatedTier hot(&ram);
  TierStack stack(&hot, &ssd);
  EvictWhileRewriteRemoves(hot, ram, stack, /*clean_below=*/true);
  EXPECT_EQ(ssd.Get(Meta(1).key)->view(), Payload('n').view());
  EXPECT_EQ(stack.Get(Meta(1).key, false)->payload.view(), Payload('n').view());
  EXPECT_EQ(stack.dirty_blocks(), 0u);
}

// A dirty copy evicted from RAM reaches the stack's listener after the hot
// tier let go of its lock: by then a newer Put or a Remove of the key may
// have run. Such a late copy must not land below.
class TierStackLateWriteBack : public ::testing::Test {
 protected:
  // Evicts block 1 ('o', dirty) on a thread and holds it before the stack
  // hears of it.
  void EvictOldCopyAndHold() {
    ASSERT_OK(stack_.Put(Meta(1), Payload('o')));
    hot_.Arm(GatedTier::Op::kEvict, Meta(1).key);
    evictor_ = std::thread([&] { EXPECT_OK(stack_.Put(Meta(2), Payload('x'))); });
    hot_.WaitHeld();
  }
  void Release() {
    hot_.Open();
    evictor_.join();
  }

  MemTier ram_{{.capacity_bytes = kCharge}};  // one block fits
  GatedTier hot_{&ram_};
  MemTier ssd_;
  TierStack stack_{&hot_, &ssd_};
  std::thread evictor_;
};

TEST_F(TierStackLateWriteBack, NeverBringsBackARemovedBlock) {
  EvictOldCopyAndHold();
  ASSERT_OK(stack_.Put(Meta(1), Payload('n')));
  ASSERT_OK(stack_.Remove(Meta(1).key));
  Release();
  EXPECT_FALSE(stack_.Contains(Meta(1).key)) << "the evicted old copy came back";
}

TEST_F(TierStackLateWriteBack, NeverLandsOverANewerValueStoredBelow) {
  EvictOldCopyAndHold();
  // (Without a resident copy the hot tier would make the Put wait for the
  // eviction: no spill gap.)
  ASSERT_OK(stack_.Put(Meta(1), Payload('n')));
  ASSERT_OK(stack_.Put(Meta(1), Payload('L', 2 * kCharge)));  // too big: SSD only
  Release();
  EXPECT_EQ(stack_.Get(Meta(1).key)->payload.view(), Payload('L', 2 * kCharge).view());
}

TEST(TierStackGuard, ARemoveWaitsForTheWriteBackOfTheKeyInFlight) {
  GatedSsdStack s(/*hot_capacity_bytes=*/kCharge);
  ASSERT_OK(s.stack.Put(Meta(1), Payload('o')));
  s.ssd.Arm(GatedTier::Op::kPut, Meta(1).key);
  // The Put of block 2 evicts 'o', which is on its way below when block 1 is
  // stored again ('n') and then removed. (A write-back Put of the key waits
  // for that write too: AWriteBackPutWaitsForTheOlderCopyInFlight.)
  const bool overtook = SecondOvertakesHeldFirst(
      s.ssd, [&] { EXPECT_OK(s.stack.Put(Meta(2), Payload('x'))); },
      [&] {
        EXPECT_OK(s.stack.Put(Meta(1), Payload('n')));
        EXPECT_OK(s.stack.Remove(Meta(1).key));
      });
  EXPECT_FALSE(overtook);
  EXPECT_FALSE(s.stack.Contains(Meta(1).key)) << "the write-back landed after the Remove";
}

// Issue 14, point 3: a newer value stored in RAM only must not leave the older
// copy, still on its way below, on SSD after it: a kill -9 would serve it.
TEST(TierStackGuard, AWriteBackPutWaitsForTheOlderCopyInFlight) {
  GatedSsdStack s(/*hot_capacity_bytes=*/kCharge);
  ASSERT_OK(s.stack.Put(Meta(1), Payload('o')));
  s.ssd.Arm(GatedTier::Op::kPut, Meta(1).key);
  const bool overtook = SecondOvertakesHeldFirst(
      s.ssd, [&] { EXPECT_OK(s.stack.Put(Meta(2), Payload('x'))); },
      [&] { EXPECT_OK(s.stack.Put(Meta(1), Payload('n'))); });
  EXPECT_FALSE(overtook);
  EXPECT_FALSE(s.below.Contains(Meta(1).key))
      << "the older copy stays below the newer one";
  EXPECT_EQ(s.stack.Get(Meta(1).key)->payload.view(), Payload('n').view());
}

// A write-back Put keeps the older SSD copy until its new bytes are in RAM
// (so a failed SSD write of a Put that finds no room there keeps the old
// value), then removes it. The new copy may be evicted meanwhile: its
// write-back waits for that removal, so the removal never takes the new bytes.
TEST(TierStackGuard, TheNewCopyEvictedWhileTheOlderIsRemovedLandsBelowAfterIt) {
  GatedSsdStack s(/*hot_capacity_bytes=*/kCharge);  // one block fits
  ASSERT_OK(s.below.Put(Meta(1), Payload('o'), /*dirty=*/false));
  s.ssd.Arm(GatedTier::Op::kRemove, Meta(1).key);
  const bool overtook = SecondOvertakesHeldFirst(
      s.ssd, [&] { EXPECT_OK(s.stack.Put(Meta(1), Payload('n'))); },
      [&] { EXPECT_OK(s.stack.Put(Meta(2), Payload('x'))); });  // evicts 'n'
  EXPECT_FALSE(overtook)
      << "the new copy's write-back ran before the older copy's removal";
  ASSERT_TRUE(s.below.Contains(Meta(1).key)) << "the removal of 'o' took 'n'";
  EXPECT_EQ(s.below.Get(Meta(1).key)->view(), Payload('n').view());
}

// Flush must not return while a dirty block stored before it is still on its
// way below: an eviction that holds no stripe Flush waits for (here an SSD hit
// promoted into RAM; a memory charge or a write-through Put does the same) has
// taken the block out of RAM and out of the dirty set, but not yet handed it
// to the SSD tier (in the engine: not yet queued, or written inline because
// the queue is full). Before, Flush saw no dirty block and returned OK at
// once, and the block was on no durable tier: a crash then lost it.
TEST(TierStackGuard, FlushWaitsForADirtyBlockOnItsWayBelow) {
  GatedSsdStack s(/*hot_capacity_bytes=*/kCharge);  // one block fits
  ASSERT_OK(s.stack.Put(Meta(1), Payload('o')));    // dirty, in RAM only
  ASSERT_OK(s.below.Put(Meta(2), Payload('p'), /*dirty=*/false));
  s.ssd.Arm(GatedTier::Op::kPut, Meta(1).key);
  bool below_when_flushed = false;
  const bool overtook = SecondOvertakesHeldFirst(
      s.ssd, [&] { EXPECT_OK(s.stack.Get(Meta(2).key)); },  // promotes, evicts 1
      [&] {
        EXPECT_OK(s.stack.Flush());
        below_when_flushed = s.below.Contains(Meta(1).key);
      });
  EXPECT_FALSE(overtook) << "Flush returned while a dirty block was on its way below";
  EXPECT_TRUE(below_when_flushed) << "Flush returned OK before the block was below";
  EXPECT_EQ(s.below.Get(Meta(1).key)->view(), Payload('o').view());
}

// The capacity advisor (capacity_advisor.h; docs/eviction.md, "The capacity
// advisor").
namespace advisor_test {

// Replay semantics on ids: look the chain up until the first miss (an LRU
// of `capacity` blocks), then touch or insert every block. Returns the hits.
struct PrefixLru {
  explicit PrefixLru(size_t capacity) : capacity(capacity) {}
  size_t Request(const std::vector<uint64_t>& chain) {
    size_t hit = 0;
    while (hit < chain.size() && where.count(chain[hit])) Touch(chain[hit++]);
    for (size_t i = hit; i < chain.size(); ++i) {
      if (where.count(chain[i])) {
        Touch(chain[i]);
        continue;
      }
      if (order.size() == capacity) {
        where.erase(order.back());
        order.pop_back();
      }
      order.push_front(chain[i]);
      where[chain[i]] = order.begin();
    }
    return hit;
  }
  void Touch(uint64_t id) { order.splice(order.begin(), order, where.at(id)); }
  size_t capacity;
  std::list<uint64_t> order;
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> where;
};

// Random prefix traffic: chains in a tree of `fanout` children per block.
std::vector<std::vector<uint64_t>> RandomChains(uint64_t seed, size_t requests) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<uint64_t>> out;
  for (size_t r = 0; r < requests; ++r) {
    std::vector<uint64_t> chain;
    uint64_t id = 1;
    const size_t depth = 1 + rng() % 12;
    for (size_t d = 0; d < depth; ++d) {
      id = id * 5 + 1 + rng() % (d < 2 ? 3 : 5);
      chain.push_back(id);
    }
    out.push_back(std::move(chain));
  }
  return out;
}

// Every block sampled: the per-block estimate (a block hits a cache of C
// blocks when its reuse distance is below C) equals the prefix hits that an
// LRU cache serves, stopping at the first miss, at every small size.
TEST(CapacityAdvisorTest, UnsampledEstimateEqualsPrefixHitsOfAnLruCache) {
  const uint64_t seed = testing::TestSeed("CapacityAdvisorTest");
  const auto chains = RandomChains(seed, 4000);
  CapacityAdvisor advisor({.max_keys = 1 << 15, .max_rate = 1});
  uint64_t blocks = 0;
  for (const auto& chain : chains) {
    for (uint64_t id : chain) {
      ASSERT_TRUE(advisor.Sampled(BlockKey{3, id}));
      advisor.OnGet(BlockKey{3, id}, /*hit=*/true, 1);
    }
    blocks += chain.size();
  }
  for (size_t capacity : {1u, 4u, 16u, 50u, 120u, 250u}) {
    PrefixLru lru(capacity);
    uint64_t hits = 0;
    for (const auto& chain : chains) hits += lru.Request(chain);
    EXPECT_NEAR(advisor.HitRatioAt(double(capacity)), double(hits) / double(blocks), 1e-9)
        << "capacity " << capacity << ", seed " << seed;
  }
  EXPECT_EQ(advisor.Report().sampling_rate, 1.0);
}

// A tier of 2^62 bytes (a replay's unlimited one, a huge --ssd-capacity-bytes)
// estimated at 2x to 8x: the sizes past 2^63 went through llround (undefined:
// 2^63 came out for 2x, 4x and 8x alike). They saturate at 2^64 - 1 now.
TEST(CapacityAdvisorTest, SizesPastTwoToTheSixtyThreeSaturate) {
  CapacityAdvisor advisor;
  const uint64_t huge = uint64_t{1} << 62;
  advisor.SetCapacities(huge, huge / 1024, huge, huge / 1024);
  const AdvisorReport r = advisor.Report();
  ASSERT_EQ(r.points.size(), 12u);
  for (const AdvisorPoint& p : r.points) {
    const double exact = p.factor * static_cast<double>(huge);
    const uint64_t want =
        exact >= 18446744073709551616.0 ? UINT64_MAX : static_cast<uint64_t>(exact);
    EXPECT_EQ(p.capacity_bytes, want) << p.tier << " x" << p.factor;
    EXPECT_EQ(p.capacity_blocks, static_cast<uint64_t>(p.factor * double(huge / 1024)))
        << p.tier << " x" << p.factor;
  }
}

// More distinct blocks than the budget: the sample stays at max_keys, the
// rate drops, and a loop over 4x the keys is still estimated (all misses
// below its size, all hits above).
TEST(CapacityAdvisorTest, TheSampleStaysWithinItsBudgetAndScalesDistances) {
  CapacityAdvisor advisor({.max_keys = 512});
  constexpr uint64_t kLoop = 20000;
  for (int round = 0; round < 6; ++round) {
    for (uint64_t i = 0; i < kLoop; ++i) {
      const BlockKey key{i * 0x9E3779B97F4A7C15ull, i};
      if (advisor.Sampled(key)) advisor.OnGet(key, true, 1);
    }
  }
  const AdvisorReport r = advisor.Report();
  EXPECT_LE(r.sampled_keys, 512u);
  EXPECT_LT(r.sampling_rate, 0.05);
  EXPECT_LT(r.memory_bytes, 200u * 1024);
  EXPECT_LT(advisor.HitRatioAt(kLoop * 0.8), 0.05);
  EXPECT_NEAR(advisor.HitRatioAt(kLoop * 1.2), 5.0 / 6.0, 0.05);
}

// Through the stack: a Get that misses and the Put that stores the block are
// one reference; a Put of a block not looked up (past a request's first miss)
// is one; the Put does not count a second time.
TEST(CapacityAdvisorTest, TheStackReportsEachReferenceOnce) {
  CapacityAdvisor advisor({.max_keys = 1024, .max_rate = 1});
  MemTier hot({.capacity_bytes = 100 * kCharge});
  TierStack stack(&hot, nullptr, nullptr,
                  {.advisor = &advisor, .advisor_block_tokens = 16});
  EXPECT_FALSE(stack.Get(Meta(1).key).ok());    // miss: cold reference
  ASSERT_OK(stack.Put(Meta(1), Payload('a')));  // the same reference
  ASSERT_OK(stack.Put(Meta(2), Payload('b')));  // past the miss: cold reference
  ASSERT_OK(stack.Get(Meta(1).key).status());   // distance 1
  ASSERT_OK(stack.Put(Meta(2), Payload('b')));  // resident, put again: distance 1
  const AdvisorReport r = advisor.Report();
  EXPECT_EQ(r.references, 4u);
  EXPECT_EQ(r.tokens, 4u * 16);
  EXPECT_DOUBLE_EQ(advisor.HitRatioAt(1), 0.0);
  EXPECT_DOUBLE_EQ(advisor.HitRatioAt(2), 0.5);
}

// A working set far smaller than max_keys is sampled at max_rate, not all of
// it: the advisor's cost per reference stays one hash compare for 7 of 8 keys
// (docs/eviction.md, "Cost"). The loop is still estimated.
TEST(CapacityAdvisorTest, TheRateIsCappedSoASmallWorkingSetIsNotAllSampled) {
  CapacityAdvisor advisor({.max_keys = 1 << 15, .max_rate = 0.125});
  constexpr uint64_t kLoop = 16000;
  uint64_t sampled = 0;
  for (int round = 0; round < 4; ++round) {
    for (uint64_t i = 0; i < kLoop; ++i) {
      const BlockKey key{i * 0x9E3779B97F4A7C15ull, i};
      advisor.Count(key, 1);
      if (!advisor.Sampled(key)) continue;
      ++sampled;
      advisor.OnGet(key, true, 1);
    }
  }
  const AdvisorReport r = advisor.Report();
  EXPECT_EQ(r.sampling_rate, 0.125);
  EXPECT_NEAR(double(r.sampled_keys), kLoop / 8.0, kLoop / 40.0);
  EXPECT_EQ(r.references, sampled);
  EXPECT_LT(advisor.HitRatioAt(kLoop * 0.8), 0.05);
  EXPECT_NEAR(advisor.HitRatioAt(kLoop * 1.2), 3.0 / 4.0, 0.05);
}

// A heavy, popular block the sample does not hold (think of a system prompt
// every request starts with): counting every reference's tokens (Count) puts
// its hits back at the smallest distance (SHARDS_adj). Without the count the
// estimate at a small cache is 0 where the truth is about 1/2.
TEST(CapacityAdvisorTest, CountingEveryReferenceRestoresAPopularBlockTheSampleMisses) {
  CapacityAdvisor advisor({.max_keys = 1 << 15, .max_rate = 0.125});
  BlockKey popular{7, 1};
  while (advisor.Sampled(popular)) ++popular.hi;
  constexpr uint64_t kKeys = 20000;
  uint64_t popular_tokens = 0, all_tokens = 0;
  for (int round = 0; round < 3; ++round) {
    for (uint64_t i = 0; i < kKeys; ++i) {
      if (i % 10 == 0) {  // 100 tokens every 10 blocks of 10: half of all tokens
        advisor.Count(popular, 100);
        if (round > 0 || i > 0) popular_tokens += 100;  // hits after its first
        all_tokens += 100;
      }
      const BlockKey key{i * 0x9E3779B97F4A7C15ull, i};
      advisor.Count(key, 10);
      all_tokens += 10;
      if (advisor.Sampled(key)) advisor.OnGet(key, true, 10);
    }
  }
  // A cache of 100 blocks holds the popular block and none of the loop's.
  const double truth = double(popular_tokens) / double(all_tokens);
  EXPECT_NEAR(advisor.HitRatioAt(100), truth, 0.04);
  // And of 1.2x the loop: every block after its first reference.
  EXPECT_NEAR(advisor.HitRatioAt(kKeys * 1.2), 2.0 / 3.0 + truth / 3.0, 0.04);
}

// Decay (the engine's clock): a traffic shift moves the estimate. A small
// loop (every reference a hit at 100 blocks) then, ten half-lives later, a
// large one (none): the estimate at 100 blocks follows the new traffic;
// cumulative it would still be 0.32.
TEST(CapacityAdvisorTest, DecayLetsATrafficShiftMoveTheEstimate) {
  FakeClock clock;
  auto run = [&](CapacityAdvisor& advisor) {
    for (int round = 0; round < 20; ++round) {
      for (uint64_t i = 0; i < 50; ++i) {
        advisor.Count(BlockKey{1, i}, 1);
        advisor.OnGet(BlockKey{1, i}, true, 1);
      }
    }
    clock.AdvanceNanos(uint64_t{600} * 1'000'000'000);
    for (int round = 0; round < 2; ++round) {
      for (uint64_t i = 0; i < 1000; ++i) {
        advisor.Count(BlockKey{2, i}, 1);
        advisor.OnGet(BlockKey{2, i}, true, 1);
      }
    }
  };
  CapacityAdvisor decaying(
      {.max_keys = 1 << 15, .max_rate = 1, .half_life_seconds = 60, .clock = &clock});
  run(decaying);
  EXPECT_LT(decaying.HitRatioAt(100), 0.01);
  EXPECT_NEAR(decaying.HitRatioAt(2000), 0.5, 0.01);
  CapacityAdvisor cumulative({.max_keys = 1 << 15, .max_rate = 1, .clock = &clock});
  run(cumulative);
  EXPECT_NEAR(cumulative.HitRatioAt(100), 950.0 / 3000.0, 0.01);
}

}  // namespace advisor_test

}  // namespace
}  // namespace prefixkv
