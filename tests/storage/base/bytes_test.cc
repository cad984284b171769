// SharedBytes: copies share bytes; large buffers are recycled once freed (a
// fresh one costs a page fault per 4 KiB), small ones are not; a buffer from
// AllocateBuffer is adopted without a copy, or released with free().
// The arena MemoryResource: every region reported once when mapped and once
// before it is unmapped, which is only after the last view into it is gone.
#include "prefixkv/bytes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "prefixkv/memory_resource.h"

namespace prefixkv {
namespace {

TEST(SharedBytes, CopiesAndSlicesShareTheBytes) {
  const SharedBytes b = SharedBytes::Copy("hello world");
  const SharedBytes same = b;
  const SharedBytes world = b.Slice(6, 5);
  EXPECT_EQ(same.data(), b.data());
  EXPECT_EQ(world.view(), "world");
  EXPECT_EQ(world.data(), b.data() + 6);
  EXPECT_EQ(b.use_count(), 3);
}

TEST(SharedBytes, AllocateIs64ByteAlignedWithZeroedPadding) {
  uint8_t* out = nullptr;
  const SharedBytes b = SharedBytes::Allocate(100, &out);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
  EXPECT_EQ(b.size(), 100u);
  for (size_t i = 100; i < 128; ++i) EXPECT_EQ(out[i], 0) << i;
}

TEST(SharedBytes, AFreedLargeBufferIsReusedForTheSameSize) {
  constexpr size_t kSize = 1 << 20;
  const uint8_t* first = nullptr;
  {
    uint8_t* out = nullptr;
    SharedBytes b = SharedBytes::Allocate(kSize, &out);
    std::memset(out, 0xab, kSize);
    first = b.data();
  }
  uint8_t* out = nullptr;
  const SharedBytes again = SharedBytes::Allocate(kSize, &out);
  EXPECT_EQ(again.data(), first) << "the freed buffer, already paged in";
  EXPECT_EQ(out[kSize / 2], 0xab) << "its pages, not fresh zeroed ones";
  // While it is in use, another one of the same size is a different buffer.
  const SharedBytes other = SharedBytes::Allocate(kSize, &out);
  EXPECT_NE(other.data(), again.data());
}

TEST(SharedBytes, AnAdoptedBufferIsNotCopiedAndIsRecycled) {
  constexpr size_t kCapacity = 300000;
  void* p = SharedBytes::AllocateBuffer(kCapacity);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % SharedBytes::kBufferAlign, 0u);
  std::memset(p, 7, kCapacity);
  {
    const SharedBytes b = SharedBytes::AdoptBuffer(p, kCapacity, kCapacity - 1);
    EXPECT_EQ(b.data(), p);
    EXPECT_EQ(b.size(), kCapacity - 1);
    EXPECT_EQ(b.data()[kCapacity - 2], 7);
  }
  EXPECT_EQ(SharedBytes::AllocateBuffer(kCapacity), p) << "back from the recycler";
  std::free(p);  // free() may release any of them (losing only the recycling)
  void* small = SharedBytes::AllocateBuffer(10);
  std::free(small);
}

// Records every region callback.
struct RegionLog {
  std::vector<MemoryRegion> mapped, unmapped;
  RegionCallbacks Callbacks() {
    return {.mapped =
                [this](void* p, size_t n) {
                  mapped.push_back({p, n});
                },
            .unmapping =
                [this](void* p, size_t n) {
                  unmapped.push_back({p, n});
                }};
  }
};

ArenaOptions SmallArena(RegionLog* log, size_t retain_bytes = 0) {
  return {.max_region_bytes = 4 << 20,
          .min_region_bytes = 2 << 20,
          .retain_bytes = retain_bytes,
          .callbacks = log->Callbacks()};
}

bool Inside(const MemoryRegion& r, const SharedBytes& b) {
  const auto* base = static_cast<const uint8_t*>(r.base);
  return b.data() >= base && b.data() + b.size() <= base + r.bytes;
}

TEST(ArenaMemoryResource, ARegionIsUnmappedOnlyAfterItsLastViewGoes) {
  RegionLog log;
  std::shared_ptr<MemoryResource> arena = NewArenaMemoryResource(SmallArena(&log));
  uint8_t* out = nullptr;
  SharedBytes b = SharedBytes::AllocateIn(arena, 100000, 100000, 4096, &out);
  ASSERT_NE(out, nullptr);
  std::memset(out, 0x5a, 100000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 4096, 0u);
  ASSERT_EQ(log.mapped.size(), 1u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(log.mapped[0].base) % (2 << 20), 0u);
  EXPECT_TRUE(Inside(log.mapped[0], b));
  EXPECT_TRUE(arena->Contains(b.data(), b.size()));
  EXPECT_EQ(arena->Regions(), log.mapped);
  SharedBytes slice = b.Slice(50000, 10);
  b = SharedBytes();
  arena.reset();  // the views hold the arena
  EXPECT_TRUE(log.unmapped.empty()) << "a slice still views the region";
  EXPECT_EQ(slice.data()[9], 0x5a);
  slice = SharedBytes();
  ASSERT_EQ(log.unmapped.size(), 1u);
  EXPECT_EQ(log.unmapped[0], log.mapped[0]);
  EXPECT_EQ(log.mapped.size(), 1u) << "each region reported once";
}

TEST(ArenaMemoryResource, GrowsByRegionsReusesFreedRangesAndKeepsItsRetainBudget) {
  RegionLog log;
  std::shared_ptr<MemoryResource> arena =
      NewArenaMemoryResource(SmallArena(&log, /*retain_bytes=*/6 << 20));
  // Just under 1 MiB each (with ASan's red zone too): two fill the first
  // 2 MiB region, four the next one of 4 MiB.
  constexpr size_t kBlock = (1 << 20) - 128;
  std::vector<SharedBytes> blocks;
  for (int i = 0; i < 6; ++i) {
    uint8_t* out = nullptr;
    blocks.push_back(SharedBytes::AllocateIn(arena, kBlock, kBlock, 64, &out));
    ASSERT_NE(out, nullptr);
    std::memset(out, i, kBlock);
  }
  ASSERT_EQ(log.mapped.size(), 2u);
  EXPECT_EQ(log.mapped[0].bytes, size_t{2} << 20);
  EXPECT_EQ(log.mapped[1].bytes, size_t{4} << 20);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(blocks[i].data()[12345], i);
  const uint8_t* freed = blocks[1].data();
  blocks[1] = SharedBytes();
  uint8_t* out = nullptr;
  blocks[1] = SharedBytes::AllocateIn(arena, kBlock, kBlock, 64, &out);
  EXPECT_EQ(blocks[1].data(), freed) << "the freed range, already faulted in";
  // A large allocation gets a region of its own, unmapped when it is freed
  // since the arena then maps more than it retains.
  SharedBytes big = SharedBytes::AllocateIn(arena, 9 << 20, 9 << 20, 64, &out);
  ASSERT_NE(out, nullptr);
  ASSERT_EQ(log.mapped.size(), 3u);
  EXPECT_GE(log.mapped[2].bytes, size_t{9} << 20);
  big = SharedBytes();
  ASSERT_EQ(log.unmapped.size(), 1u);
  EXPECT_EQ(log.unmapped[0], log.mapped[2]);
  blocks.clear();  // within the retain budget: both regions stay mapped
  EXPECT_EQ(log.unmapped.size(), 1u);
  EXPECT_EQ(arena->Regions().size(), 2u);
}

// A block just over a region class (an SSD read of a 2 MiB payload plus
// its record header, rounded to 4 KiB) packs into larger regions instead of
// getting a region of its own twice its size: the arena maps little more
// than it hands out, so a retain budget of the live bytes plus one region
// holds the steady state and refilling maps nothing new.
TEST(ArenaMemoryResource, BlocksJustOverARegionClassPackWithLittleUnused) {
  constexpr size_t kBlock = (size_t{2} << 20) + 4096;
  constexpr size_t kMaxRegion = size_t{64} << 20;
  constexpr int kBlocks = 62;  // two full regions of 31
  RegionLog log;
  std::shared_ptr<MemoryResource> arena =
      NewArenaMemoryResource({.max_region_bytes = kMaxRegion,
                              .min_region_bytes = 2 << 20,
                              .retain_bytes = kBlocks * kBlock + kMaxRegion,
                              .callbacks = log.Callbacks()});
  auto fill = [&](std::vector<SharedBytes>* blocks) {
    for (int i = 0; i < kBlocks; ++i) {
      uint8_t* out = nullptr;
      blocks->push_back(SharedBytes::AllocateIn(arena, kBlock, kBlock, 4096, &out));
      ASSERT_NE(out, nullptr);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(out) % 4096, 0u);
      std::memset(out, i, kBlock);
    }
  };
  std::vector<SharedBytes> blocks;
  fill(&blocks);
  size_t mapped = 0;
  for (const MemoryRegion& r : arena->Regions()) mapped += r.bytes;
  EXPECT_LE(mapped, kBlocks * kBlock + kBlocks * kBlock / 32)
      << arena->Regions().size() << " regions for " << kBlocks << " blocks";
  for (int i = 0; i < kBlocks; ++i) EXPECT_EQ(blocks[i].data()[kBlock - 1], i);
  const size_t regions = log.mapped.size();
  blocks.clear();
  fill(&blocks);
  EXPECT_EQ(log.mapped.size(), regions) << "the refill found its regions kept";
  EXPECT_TRUE(log.unmapped.empty());
}

// With map_ahead, the next region is mapped and faulted in on another
// thread once less than its size is free, so the allocations that follow
// find it mapped; never beyond retain_bytes (past it the caller maps, as
// without map_ahead).
TEST(ArenaMemoryResource, MapAheadMapsTheNextRegionOnAnotherThreadWithinTheRetainBudget) {
  std::mutex mu;
  std::vector<std::pair<size_t, std::thread::id>> mapped;  // bytes, thread
  ArenaOptions o{.max_region_bytes = 4 << 20,
                 .min_region_bytes = 2 << 20,
                 .retain_bytes = 6 << 20,
                 .map_ahead = true};
  o.callbacks.mapped = [&](void*, size_t n) {
    std::lock_guard<std::mutex> lock(mu);
    mapped.emplace_back(n, std::this_thread::get_id());
  };
  auto mapped_now = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return mapped;
  };
  std::shared_ptr<MemoryResource> arena = NewArenaMemoryResource(o);
  constexpr size_t kBlock = (1 << 20) - 128;  // two fill the first 2 MiB region
  std::vector<SharedBytes> blocks;
  auto allocate = [&] {
    uint8_t* out = nullptr;
    blocks.push_back(SharedBytes::AllocateIn(arena, kBlock, kBlock, 64, &out));
    ASSERT_NE(out, nullptr);
    std::memset(out, static_cast<int>(blocks.size()), kBlock);
  };
  allocate();
  // No room: the caller maps 2 MiB while the next region's 4 MiB is mapped
  // ahead.
  for (int i = 0; i < 1000 && mapped_now().size() < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(mapped_now().size(), 2u);
  for (int i = 0; i < 5; ++i) allocate();  // fills both: 6 MiB, all retained
  std::vector<std::pair<size_t, std::thread::id>> m = mapped_now();
  ASSERT_EQ(m.size(), 2u) << "nothing mapped ahead beyond the retain budget";
  // The first by the caller, the next ahead (at once: both fault in at the
  // same time, so either may be reported first).
  std::sort(m.begin(), m.end());
  EXPECT_EQ(m[0].first, size_t{2} << 20);
  EXPECT_EQ(m[0].second, std::this_thread::get_id()) << "the first, by the caller";
  EXPECT_EQ(m[1].first, size_t{4} << 20);
  EXPECT_NE(m[1].second, std::this_thread::get_id()) << "the next, ahead";
  allocate();  // beyond the budget: mapped by the caller when needed
  m = mapped_now();
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[2].second, std::this_thread::get_id());
  for (size_t i = 0; i < blocks.size(); ++i) {
    EXPECT_EQ(blocks[i].data()[kBlock - 1], static_cast<uint8_t>(i + 1));
  }
}

TEST(ArenaMemoryResource, CallbacksSetLaterHearOfTheRegionsMappedBefore) {
  std::shared_ptr<MemoryResource> arena = NewArenaMemoryResource({.retain_bytes = 0});
  uint8_t* out = nullptr;
  SharedBytes b = SharedBytes::CopyIn(arena, "abc", 3);
  ASSERT_NE(b.data(), nullptr);
  EXPECT_EQ(b.view(), "abc");
  RegionLog log;
  arena->SetRegionCallbacks(log.Callbacks());
  EXPECT_EQ(log.mapped, arena->Regions());
  ASSERT_EQ(log.mapped.size(), 1u);
  b = SharedBytes();
  EXPECT_EQ(log.unmapped, log.mapped);
  EXPECT_EQ(arena->Allocate(0, 64), nullptr) << "zero bytes";
  EXPECT_EQ(arena->Allocate(64, 48), nullptr) << "not a power of two";
  EXPECT_EQ(arena->Allocate(64, 8192), nullptr) << "beyond 4096";
  EXPECT_FALSE(arena->Contains(&out, 1));
}

TEST(ArenaMemoryResource, PrefaultedRegionsAreMappedAndReportedUpFront) {
  RegionLog log;
  ArenaOptions o = SmallArena(&log, /*retain_bytes=*/8 << 20);
  o.prefault_bytes = 5 << 20;
  std::shared_ptr<MemoryResource> arena = NewArenaMemoryResource(o);
  ASSERT_EQ(log.mapped.size(), 2u) << "4 MiB, then the rest rounded to 2 MiB";
  EXPECT_EQ(log.mapped[0].bytes + log.mapped[1].bytes, size_t{6} << 20);
  uint8_t* out = nullptr;
  const SharedBytes b = SharedBytes::AllocateIn(arena, 1 << 20, 1 << 20, 4096, &out);
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(log.mapped.size(), 2u) << "no new region";
}

#if defined(__SANITIZE_ADDRESS__)
TEST(ArenaMemoryResourceDeathTest, AsanSeesAnOverflowIntoTheNextAllocation) {
  std::shared_ptr<MemoryResource> arena = NewArenaMemoryResource();
  uint8_t* a = nullptr;
  uint8_t* b = nullptr;
  SharedBytes first = SharedBytes::AllocateIn(arena, 128, 128, 64, &a);
  SharedBytes second = SharedBytes::AllocateIn(arena, 128, 128, 64, &b);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  volatile uint8_t* past = a + 128;
  EXPECT_DEATH(*past = 1, "AddressSanitizer");
  SharedBytes freed = SharedBytes::AllocateIn(arena, 256, 256, 64, &a);
  const uint8_t* stale = freed.data();
  freed = SharedBytes();
  EXPECT_DEATH((void)*static_cast<const volatile uint8_t*>(stale), "AddressSanitizer");
}
#endif

}  // namespace
}  // namespace prefixkv
