// A write-back stack over a real SSD tier whose segment writes fail (a
// read-only segments/ directory, through FaultInjectionFileSystem): once the
// SSD tier's write-back fails, the stack refuses new Puts with that error
// instead of acknowledging bytes it cannot persist, and accepts them again
// once write-back succeeds (issue 14, point 7).
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <thread>

#include "prefixkv/advanced/hot_tier.h"
#include "prefixkv/advanced/ssd_tier.h"
#include "prefixkv/advanced/tier_stack.h"
#include "tests/storage/stack/gated_tier.h"
#include "tests/support/fault_injection_file_system.h"
#include "tests/support/mem_tier.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

constexpr size_t kPayload = 1000;

BlockMeta Meta(uint64_t i) { return BlockMeta{BlockKey{7, i}, BlockKey{7, i}, {}, 0}; }
SharedBytes Payload(uint64_t i) {
  return SharedBytes::Copy(std::string(kPayload, static_cast<char>('a' + i % 26)));
}

// A small SSD tier in `dir` on `fs`, with one writer thread.
StatusOr<std::unique_ptr<SsdTier>> OpenSsd(const testing::TempDir& dir,
                                           FaultInjectionFileSystem& fs) {
  SsdTierOptions o;
  o.path = dir.str() + "/ssd";
  o.write_buffer_bytes = 4 << 20;
  o.segment_bytes = 4 << 20;
  o.reserve_bytes = 1 << 20;
  o.log = [](std::string_view) {};
  o.file_system = &fs;
  o.writer_threads = 1;
  return SsdTier::Open(o);
}

// Runs `write` (it must fail) on its own thread until the gate holds it
// about to write block 1 below; then makes segment writes fail and, on
// another thread, evicts block 1's dirty copy from `hot` (one block) by
// putting block 2. With the fixes the eviction's hand-over waits for the
// held write, so both are joined only after the gate opens.
void EvictBlock1WhileAHeldWriteFails(testing::GatedTier& gate,
                                     FaultInjectionFileSystem& fs, MemTier& hot,
                                     const std::function<void()>& write) {
  gate.Arm(testing::GatedTier::Op::kPut, Meta(1).key);
  std::thread writer(write);
  gate.WaitHeld();
  fs.AddFault({.op = FaultOp::kWrite, .path_contains = ".seg"});
  std::thread evictor([&] { EXPECT_OK(hot.Put(Meta(2), Payload(2), /*dirty=*/false)); });
  EXPECT_TRUE(testing::WaitUntil([&] { return hot.Totals().evictions > 0; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // to the stack
  gate.Open();
  writer.join();
  evictor.join();
  fs.ClearFaults();
}

TEST(TierStackWriteBackFailure, PutsAreRefusedWhileWriteBackFailsAndAcceptedAfter) {
  testing::TempDir dir;
  FaultInjectionFileSystem fs;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<SsdTier> ssd, OpenSsd(dir, fs));
  MemTier hot({.capacity_bytes = 4 * MemTier::Charge(kPayload)});
  TierStack stack(&hot, ssd.get(), ssd.get());
  fs.AddFault({.op = FaultOp::kWrite, .path_contains = ".seg"});
  // The hot tier evicts from the fifth Put on; the write-back fails. Once
  // the writer thread has met the failure, the next Put is refused. (200
  // Puts 2 ms apart once gave the writer thread its chance: a loaded machine
  // could keep it off a CPU for all 400 ms.)
  std::vector<uint64_t> acked;
  for (uint64_t i = 1; i <= 5; ++i) {
    ASSERT_OK(stack.Put(Meta(i), Payload(i))) << i;
    acked.push_back(i);
  }
  ASSERT_TRUE(testing::WaitUntil([&] { return !ssd->WriteBackStatus().ok(); }))
      << "the evicted block's write-back never failed";
  const Status refused = stack.Put(Meta(6), Payload(6));
  ASSERT_FALSE(refused.ok()) << "a Put acknowledged while the write-back fails";
  EXPECT_TRUE(refused.IsIOError()) << refused.ToString();
  EXPECT_FALSE(stack.Put(Meta(1000), Payload(0)).ok()) << "refused again";
  // Every acknowledged block is still served (RAM, or queued for the SSD).
  for (uint64_t i : acked) {
    StatusOr<TierHit> hit = stack.Get(Meta(i).key);
    ASSERT_OK(hit);
    EXPECT_EQ(hit->payload.view(), Payload(i).view());
  }
  fs.ClearFaults();
  ASSERT_OK(ssd->Flush());
  EXPECT_OK(ssd->WriteBackStatus());
  ASSERT_OK(stack.Put(Meta(1000), Payload(0)));
  ASSERT_OK(stack.Flush());
  for (uint64_t i : acked) {
    EXPECT_TRUE(ssd->Contains(Meta(i).key))
        << "acknowledged block " << i << " not stored";
  }
}

// A Rewrite (a tip given its real state, or stripped) whose new bytes are too
// large for the hot tier goes to SSD only. When that SSD write fails, the
// Rewrite fails and the block keeps its old bytes. (The RAM copy, the only
// one, was removed before the new bytes were written: a failed write lost the
// block, and with it the chain through it.)
TEST(TierStackWriteBackFailure, AFailedRewriteTooLargeForRamKeepsTheOldBlock) {
  testing::TempDir dir;
  FaultInjectionFileSystem fs;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<SsdTier> ssd, OpenSsd(dir, fs));
  MemTier hot({.capacity_bytes = 4 * MemTier::Charge(kPayload)});
  TierStack stack(&hot, ssd.get(), ssd.get());
  ASSERT_OK(stack.Put(Meta(1), Payload(1)));  // dirty, in RAM only
  ASSERT_FALSE(ssd->Contains(Meta(1).key));
  fs.AddFault({.op = FaultOp::kWrite, .path_contains = ".seg"});
  const SharedBytes big = SharedBytes::Copy(std::string(8 * kPayload, 'n'));
  EXPECT_FALSE(stack.Rewrite(Meta(1), big).ok());
  EXPECT_GT(fs.faults_injected(), 0u);
  fs.ClearFaults();
  StatusOr<TierHit> hit = stack.Get(Meta(1).key);
  ASSERT_OK(hit);
  EXPECT_EQ(hit->payload.view(), Payload(1).view());
  // Still dirty: a Flush writes the old bytes below.
  ASSERT_OK(stack.Flush());
  ASSERT_OK_AND_ASSIGN(SharedBytes below, ssd->Get(Meta(1).key));
  EXPECT_EQ(below.view(), Payload(1).view());
}

// A Put that fits in RAM but finds no room there now (every other block is
// pinned by a reader) goes to SSD only. When that SSD write fails, the Put
// fails and the key keeps its old bytes, on SSD, now and after a reopen.
// (The older SSD copy was removed before the hot Put, for write-back, so the
// failed write left the key absent: an acknowledged value lost.)
TEST(TierStackWriteBackFailure, AFailedPutThatFindsNoRoomInRamKeepsTheOldSsdCopy) {
  testing::TempDir dir;
  FaultInjectionFileSystem fs;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<SsdTier> ssd, OpenSsd(dir, fs));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<HotTier> hot,
                       HotTier::Create({.capacity_bytes = 2 * HotEntryCharge(kPayload)}));
  {
    TierStack stack(hot.get(), ssd.get(), ssd.get());
    ASSERT_OK(stack.Put(Meta(1), Payload(1)));
    ASSERT_OK(stack.Flush());
    ASSERT_OK(hot->Remove(Meta(1).key));  // on SSD only
    ASSERT_OK(stack.Put(Meta(2), Payload(2)));
    ASSERT_OK(stack.Put(Meta(3), Payload(3)));
    std::optional<PinnedBlock> pin2 = hot->Pin(Meta(2).key);
    std::optional<PinnedBlock> pin3 = hot->Pin(Meta(3).key);
    ASSERT_TRUE(pin2 && pin3);
    fs.AddFault({.op = FaultOp::kWrite, .path_contains = ".seg"});
    EXPECT_FALSE(stack.Put(Meta(1), Payload(11)).ok());
    EXPECT_GT(fs.faults_injected(), 0u);
    fs.ClearFaults();
    StatusOr<TierHit> hit = stack.Get(Meta(1).key, /*allow_promotion=*/false);
    ASSERT_OK(hit);
    EXPECT_EQ(hit->payload.view(), Payload(1).view());
    ASSERT_OK(ssd->Flush());
  }
  ssd.reset();
  ASSERT_OK_AND_ASSIGN(ssd, OpenSsd(dir, fs));
  ASSERT_OK_AND_ASSIGN(SharedBytes below, ssd->Get(Meta(1).key));
  EXPECT_EQ(below.view(), Payload(1).view());
}

// A Rewrite of a block only RAM holds, whose new bytes fit in RAM but find no
// room there now (they are larger, a tip given its real state, and every
// other block is pinned), goes to SSD only. When that SSD write fails, the
// block keeps its old bytes. (The RAM copy was removed before the hot Put
// found no room: the failed write lost the block.)
TEST(TierStackWriteBackFailure, AFailedRewriteThatFindsNoRoomInRamKeepsTheOldBlock) {
  testing::TempDir dir;
  FaultInjectionFileSystem fs;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<SsdTier> ssd, OpenSsd(dir, fs));
  constexpr size_t kSmall = 100;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<HotTier> hot,
                       HotTier::Create({.capacity_bytes = 2 * HotEntryCharge(kPayload) +
                                                          HotEntryCharge(kSmall)}));
  TierStack stack(hot.get(), ssd.get(), ssd.get());
  const SharedBytes old = SharedBytes::Copy(std::string(kSmall, 'o'));
  ASSERT_OK(stack.Put(Meta(1), old));  // dirty, in RAM only
  ASSERT_OK(stack.Put(Meta(2), Payload(2)));
  ASSERT_OK(stack.Put(Meta(3), Payload(3)));
  std::optional<PinnedBlock> pin2 = hot->Pin(Meta(2).key);
  std::optional<PinnedBlock> pin3 = hot->Pin(Meta(3).key);
  ASSERT_TRUE(pin2 && pin3);
  ASSERT_FALSE(ssd->Contains(Meta(1).key));
  fs.AddFault({.op = FaultOp::kWrite, .path_contains = ".seg"});
  EXPECT_FALSE(stack.Rewrite(Meta(1), Payload(11)).ok());
  EXPECT_GT(fs.faults_injected(), 0u);
  fs.ClearFaults();
  StatusOr<TierHit> hit = stack.Get(Meta(1).key);
  ASSERT_OK(hit);
  EXPECT_EQ(hit->payload.view(), old.view());
  // Still dirty: a Flush writes the old bytes below.
  ASSERT_OK(stack.Flush());
  ASSERT_OK_AND_ASSIGN(SharedBytes below, ssd->Get(Meta(1).key));
  EXPECT_EQ(below.view(), old.view());
}

// A Flush writing a dirty block below while the hot tier evicts that very
// block: when the Flush's write fails, the block must still reach the SSD
// tier through its eviction (queued, retried). (Flush cleared the block's
// dirty mark before its write, so the eviction found none and dropped the
// block; the failed write then marked a copy no longer in RAM: an
// acknowledged block lost.)
TEST(TierStackWriteBackFailure, AFailedFlushOfABlockEvictedMeanwhileKeepsIt) {
  testing::TempDir dir;
  FaultInjectionFileSystem fs;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<SsdTier> ssd, OpenSsd(dir, fs));
  testing::GatedTier gate(ssd.get());
  MemTier hot({.capacity_bytes = MemTier::Charge(kPayload)});  // one block
  TierStack stack(&hot, &gate, ssd.get());
  ASSERT_OK(stack.Put(Meta(1), Payload(1)));  // dirty, in RAM only
  // The Flush read block 1 and is about to write it below.
  EvictBlock1WhileAHeldWriteFails(gate, fs, hot,
                                  [&] { EXPECT_FALSE(stack.Flush().ok()); });
  ASSERT_OK(ssd->Flush());  // stores what the write-back queue holds
  StatusOr<TierHit> hit = stack.Get(Meta(1).key, /*allow_promotion=*/false);
  ASSERT_OK(hit) << "an acknowledged block was lost";
  EXPECT_EQ(hit->payload.view(), Payload(1).view());
  ASSERT_OK_AND_ASSIGN(SharedBytes below, ssd->Get(Meta(1).key));
  EXPECT_EQ(below.view(), Payload(1).view());
}

// A Put too large for RAM writes its bytes to SSD while the key's older copy
// is still dirty in RAM. When the hot tier evicts that older copy during the
// write and the write fails, the older copy must still reach the SSD tier.
// (Its dirty mark had been moved to the new bytes before the write, so the
// eviction dropped it: the failed Put lost the key's acknowledged value.)
TEST(TierStackWriteBackFailure,
     AFailedPutTooLargeForRamKeepsTheOlderCopyEvictedMeanwhile) {
  testing::TempDir dir;
  FaultInjectionFileSystem fs;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<SsdTier> ssd, OpenSsd(dir, fs));
  testing::GatedTier gate(ssd.get());
  MemTier hot({.capacity_bytes = MemTier::Charge(kPayload)});  // one block
  TierStack stack(&hot, &gate, ssd.get());
  ASSERT_OK(stack.Put(Meta(1), Payload(1)));  // dirty, in RAM only
  const SharedBytes big = SharedBytes::Copy(std::string(8 * kPayload, 'n'));
  // The new bytes are about to be written below.
  EvictBlock1WhileAHeldWriteFails(gate, fs, hot,
                                  [&] { EXPECT_FALSE(stack.Put(Meta(1), big).ok()); });
  ASSERT_OK(ssd->Flush());  // stores what the write-back queue holds
  StatusOr<TierHit> hit = stack.Get(Meta(1).key, /*allow_promotion=*/false);
  ASSERT_OK(hit) << "the failed Put lost the key's value";
  EXPECT_EQ(hit->payload.view(), Payload(1).view());
}

// Found in review (2026-12-06; failed before the fix): a write-back Put marks
// its new bytes before the hot Put. The key's older dirty copy, evicted just
// before by another thread and handed to the stack only then, found the new
// mark and was dropped; the hot Put then found no room (every other block
// pinned) and the SSD write failed: the key's acknowledged value was lost.
TEST(TierStackWriteBackFailure,
     AFailedPutKeepsTheOlderCopyWhoseEvictionArrivedMeanwhile) {
  testing::TempDir dir;
  FaultInjectionFileSystem fs;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<SsdTier> ssd, OpenSsd(dir, fs));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<HotTier> hot,
                       HotTier::Create({.capacity_bytes = 2 * HotEntryCharge(kPayload)}));
  testing::GatedTier evictions(hot.get());
  testing::GatedTier puts(&evictions);
  TierStack stack(&puts, ssd.get(), ssd.get());
  ASSERT_OK(stack.Put(Meta(1), Payload(1)));  // dirty, in RAM only
  ASSERT_OK(hot->Put(Meta(2), Payload(2), /*dirty=*/false));
  std::optional<PinnedBlock> pin2 = hot->Pin(Meta(2).key);
  ASSERT_TRUE(pin2);
  evictions.Arm(testing::GatedTier::Op::kEvict, Meta(1).key);
  std::thread evictor([&] { EXPECT_OK(hot->Put(Meta(3), Payload(3), /*dirty=*/false)); });
  evictions.WaitHeld();  // block 1 left RAM; its hand-over to the stack waits
  std::optional<PinnedBlock> pin3 = hot->Pin(Meta(3).key);
  ASSERT_TRUE(pin3);
  puts.Arm(testing::GatedTier::Op::kPut, Meta(1).key);
  std::thread writer([&] { EXPECT_FALSE(stack.Put(Meta(1), Payload(11)).ok()); });
  puts.WaitHeld();  // the new bytes are marked, their hot Put about to run
  evictions.Open();
  evictor.join();
  fs.AddFault({.op = FaultOp::kWrite, .path_contains = ".seg"});
  puts.Open();  // no room in RAM: written below, and that write fails
  writer.join();
  EXPECT_GT(fs.faults_injected(), 0u);
  fs.ClearFaults();
  ASSERT_OK(ssd->Flush());  // stores what the write-back queue holds
  StatusOr<TierHit> hit = stack.Get(Meta(1).key, /*allow_promotion=*/false);
  ASSERT_OK(hit) << "the failed Put lost the key's value";
  EXPECT_EQ(hit->payload.view(), Payload(1).view());
}

// Write-through: a block only RAM holds (the SSD tier evicted its copy) is
// rewritten dirty. A write-through Put of that key whose SSD write fails must
// leave it dirty, so a Flush still writes it below. (The Put cleared its
// dirty mark before the write: neither Flush nor its eviction wrote it.)
TEST(TierStackWriteBackFailure, AFailedWriteThroughPutKeepsTheDirtyCopyDirty) {
  testing::TempDir dir;
  FaultInjectionFileSystem fs;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<SsdTier> ssd, OpenSsd(dir, fs));
  MemTier hot({.capacity_bytes = 4 * MemTier::Charge(kPayload)});
  TierStack stack(&hot, ssd.get(), ssd.get(), {.write_through = true});
  ASSERT_OK(stack.Put(Meta(1), Payload(1)));
  ASSERT_OK(ssd->Remove(Meta(1).key));  // as if evicted from SSD
  ASSERT_OK(stack.Rewrite(Meta(1), Payload(2)));
  ASSERT_EQ(stack.dirty_blocks(), 1u);
  fs.AddFault({.op = FaultOp::kWrite, .path_contains = ".seg"});
  EXPECT_FALSE(stack.Put(Meta(1), Payload(3)).ok());
  EXPECT_GT(fs.faults_injected(), 0u);
  fs.ClearFaults();
  EXPECT_EQ(stack.Get(Meta(1).key, false)->payload.view(), Payload(2).view());
  EXPECT_EQ(stack.dirty_blocks(), 1u) << "the rewritten block is no longer dirty";
  ASSERT_OK(stack.Flush());
  ASSERT_OK_AND_ASSIGN(SharedBytes below, ssd->Get(Meta(1).key));
  EXPECT_EQ(below.view(), Payload(2).view());
}

// A Remove whose SSD removal fails must not be acknowledged: the SSD copy
// is still there and would be served (a deleted value back). (The hot copy's
// removal made the Remove answer OK.)
TEST(TierStackWriteBackFailure, ARemoveWhoseSsdRemovalFailsIsNotAcknowledged) {
  testing::TempDir dir;
  FaultInjectionFileSystem fs;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<SsdTier> ssd, OpenSsd(dir, fs));
  MemTier hot({.capacity_bytes = 4 * MemTier::Charge(kPayload)});
  TierStack stack(&hot, ssd.get(), ssd.get());
  ASSERT_OK(stack.Put(Meta(1), Payload(1)));
  ASSERT_OK(stack.Flush());  // in RAM (clean) and on SSD
  fs.AddFault({.op = FaultOp::kWrite});
  fs.AddFault({.op = FaultOp::kSync});
  const Status removed = stack.Remove(Meta(1).key);
  EXPECT_GT(fs.faults_injected(), 0u);
  fs.ClearFaults();
  EXPECT_FALSE(removed.ok()) << "acknowledged, and the block is still served";
  if (removed.ok()) {
    EXPECT_FALSE(stack.Contains(Meta(1).key)) << "an acknowledged Remove left the block";
  }
}

}  // namespace
}  // namespace prefixkv
