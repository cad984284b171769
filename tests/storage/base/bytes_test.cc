// SharedBytes: copies share bytes; large buffers are recycled once freed (a
// fresh one costs a page fault per 4 KiB), small ones are not; a buffer from
// AllocateBuffer is adopted without a copy, or released with free().
// The arena MemoryResource: every region reported once when mapped and once
// before it is unmapped, which is only after the last view into it is gone.
#include "prefixkv/bytes.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "prefixkv/advanced/sanitizers.h"
#include "prefixkv/memory_resource.h"
#include "tests/support/gate.h"
#include "tests/support/test_util.h"

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

// Of the freed buffers of a size, the last one freed comes back first (its
// lines are the likeliest still in the caches; and a test repeated in one
// process finds the same buffer again).
TEST(SharedBytes, TheLastFreedBufferOfASizeIsReusedFirst) {
  constexpr size_t kSize = (1 << 20) + 4096;  // a size no other test uses
  uint8_t* out = nullptr;
  std::optional<SharedBytes> a = SharedBytes::Allocate(kSize, &out);
  std::optional<SharedBytes> b = SharedBytes::Allocate(kSize, &out);
  const uint8_t* last = b->data();
  ASSERT_NE(a->data(), last);
  a.reset();
  b.reset();
  const SharedBytes again = SharedBytes::Allocate(kSize, &out);
  EXPECT_EQ(again.data(), last);
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
// thread once less than the last region's size is free, so the allocations
// that follow find it mapped; never beyond retain_bytes (past it the caller
// maps, as without map_ahead).
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
  // No room: the caller maps 2 MiB, and with less than that free the next
  // region's 4 MiB is mapped ahead.
  for (int i = 0; i < 1000 && mapped_now().size() < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(mapped_now().size(), 2u);
  for (int i = 0; i < 5; ++i) allocate();  // fills both: 6 MiB, all retained
  std::vector<std::pair<size_t, std::thread::id>> m = mapped_now();
  ASSERT_EQ(m.size(), 2u) << "nothing mapped ahead beyond the retain budget";
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

// Small allocations that leave most of the arena free map at most one
// region ahead. (The first map-ahead compared the free bytes with the next
// region's size, which doubles with every region, so each allocation found
// the arena low again and mapped one more, up to the retain budget.)
TEST(ArenaMemoryResource, SmallAllocationsMapAtMostOneRegionAhead) {
  std::mutex mu;
  size_t regions = 0;
  ArenaOptions o{.max_region_bytes = size_t{256} << 20,
                 .min_region_bytes = 2 << 20,
                 .retain_bytes = size_t{1} << 30,
                 .map_ahead = true};
  o.callbacks.mapped = [&](void*, size_t) {
    std::lock_guard<std::mutex> lock(mu);
    ++regions;
  };
  std::shared_ptr<MemoryResource> arena = NewArenaMemoryResource(o);
  std::vector<SharedBytes> values;
  for (int i = 0; i < 100; ++i) {
    values.push_back(SharedBytes::CopyIn(arena, "value", 5));
    ASSERT_NE(values.back().data(), nullptr);
    // Spaced out, so the arena's thread is idle when the next one comes.
    if (i % 10 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_LE(regions, 2u);
  size_t mapped = 0;
  for (const MemoryRegion& r : arena->Regions()) mapped += r.bytes;
  EXPECT_LE(mapped, size_t{6} << 20) << "2 MiB and the 4 MiB one ahead";
}

// Minor page faults taken by the calling thread so far (a page the kernel
// faults in for madvise(MADV_POPULATE_WRITE) counts for the caller too).
size_t ThreadMinorFaults() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return static_cast<size_t>(u.ru_minflt);
}

// Whether every page of the region is in memory (mincore).
bool Resident(const MemoryRegion& r) {
  std::vector<unsigned char> in(r.bytes / 4096);
  if (mincore(r.base, r.bytes, in.data()) != 0) return false;
  return std::all_of(in.begin(), in.end(), [](unsigned char c) { return (c & 1) != 0; });
}

// A region an allocation needs is handed out before it is faulted in: with
// map_ahead the caller's Allocate takes almost none of the region's page
// faults, and the arena's thread faults the rest of the region in while the
// caller writes (without map_ahead the caller faults all of it in first).
// 4 KiB pages, so the faults are counted one per page.
TEST(ArenaMemoryResource, ARegionIsHandedOutAtOnceAndFaultedInByTheArenasThread) {
  constexpr size_t kRegion = size_t{64} << 20, kPages = kRegion / 4096;
  for (const bool ahead : {false, true}) {
    SCOPED_TRACE(ahead ? "map_ahead" : "without map_ahead");
    std::shared_ptr<MemoryResource> arena =
        NewArenaMemoryResource({.max_region_bytes = kRegion,
                                .min_region_bytes = kRegion,
                                .retain_bytes = kRegion,  // nothing mapped ahead
                                .map_ahead = ahead,
                                .huge_pages = false});
    const size_t before = ThreadMinorFaults();
    void* p = arena->Allocate(1 << 20, 64);
    const size_t faults = ThreadMinorFaults() - before;
    ASSERT_NE(p, nullptr);
    if (ahead) {
      EXPECT_LT(faults, kPages / 4) << "the caller waited for the region's pages";
    } else {
      EXPECT_GE(faults, kPages) << "populate faults the region in";
    }
    std::memset(p, 7, 1 << 20);
    const std::vector<MemoryRegion> regions = arena->Regions();
    ASSERT_EQ(regions.size(), 1u);
    EXPECT_TRUE(testing::WaitUntil([&] { return Resident(regions[0]); }))
        << "the rest of the region was never faulted in";
    EXPECT_EQ(arena->Regions().size(), 1u) << "nothing beyond the retain budget";
    EXPECT_EQ(static_cast<uint8_t*>(p)[(1 << 20) - 1], 7);
    arena->Deallocate(p, 1 << 20, 64);
  }
}

// The next region mapped ahead is in the arena and faulted in by its thread;
// a region freed while the thread is still faulting it in stays mapped until
// it is done, then goes (a retain budget of one region), reported once.
TEST(ArenaMemoryResource, ARegionFreedWhileTheArenasThreadFaultsItInGoesAfterwards) {
  constexpr size_t kRegion = size_t{32} << 20;
  std::mutex mu;
  RegionLog log;
  ArenaOptions o{.max_region_bytes = kRegion,
                 .min_region_bytes = kRegion,
                 .retain_bytes = 2 * kRegion,
                 .map_ahead = true,
                 .huge_pages = false};
  o.callbacks = {.mapped =
                     [&](void* p, size_t n) {
                       std::lock_guard<std::mutex> lock(mu);
                       log.mapped.push_back({p, n});
                     },
                 .unmapping =
                     [&](void* p, size_t n) {
                       std::lock_guard<std::mutex> lock(mu);
                       log.unmapped.push_back({p, n});
                     }};
  auto counts = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return std::make_pair(log.mapped.size(), log.unmapped.size());
  };
  std::shared_ptr<MemoryResource> arena = NewArenaMemoryResource(o);
  // 10 MiB blocks, three to a region. After the first, less than a region
  // is free: once the first region is faulted in, the next one is mapped
  // ahead and faulted in.
  constexpr size_t kBlock = (size_t{10} << 20) + (64 << 10);  // no region of its own
  std::vector<void*> blocks;
  auto allocate = [&] {
    blocks.push_back(arena->Allocate(kBlock, 64));
    return blocks.back() != nullptr;
  };
  ASSERT_TRUE(allocate());
  std::memset(blocks[0], 1, kBlock);
  ASSERT_TRUE(testing::WaitUntil([&] { return counts().first == 2; }));
  ASSERT_TRUE(testing::WaitUntil([&] {
    const std::vector<MemoryRegion> r = arena->Regions();
    return r.size() == 2 && Resident(r[0]) && Resident(r[1]);
  })) << "both regions faulted in";
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(allocate());  // both full
  ASSERT_EQ(counts().first, 2u) << "nothing mapped ahead beyond the budget";
  // A third region, over the budget, freed at once: whether or not the
  // thread is still faulting it in, it is unmapped exactly once, and the
  // two within the budget stay.
  ASSERT_TRUE(allocate());
  ASSERT_EQ(counts().first, 3u);
  arena->Deallocate(blocks.back(), kBlock, 64);
  blocks.pop_back();
  EXPECT_TRUE(testing::WaitUntil([&] { return counts().second == 1; }));
  EXPECT_EQ(arena->Regions().size(), 2u);
  for (void* p : blocks) arena->Deallocate(p, kBlock, 64);
  EXPECT_EQ(counts(), std::make_pair(size_t{3}, size_t{1}));
  arena.reset();
  EXPECT_EQ(counts(), std::make_pair(size_t{3}, size_t{3}));
}

// An allocation goes to the smallest free range it fits in, whichever
// region holds it: a store keeps filling the region it is in before it
// takes a newer one (the kernel maps newer regions at lower addresses, and
// the first region with room, in address order, was the newest).
TEST(ArenaMemoryResource, AnAllocationTakesTheSmallestFreeRangeOfAnyRegion) {
  RegionLog log;
  ArenaOptions o = SmallArena(&log, size_t{64} << 20);
  o.min_region_bytes = o.max_region_bytes;  // 4 MiB regions
  std::shared_ptr<MemoryResource> arena = NewArenaMemoryResource(o);
  const auto In = [](const std::shared_ptr<MemoryResource>& m, size_t n) {
    uint8_t* out = nullptr;
    return SharedBytes::AllocateIn(m, n, n, 64, &out);
  };
  // Just under 1 MiB each (with ASan's red zones too), four to a region.
  constexpr size_t kMiB = size_t{1} << 20, kUnder = kMiB - 128;
  std::vector<SharedBytes> a;
  for (int i = 0; i < 3; ++i) a.push_back(In(arena, kUnder));  // 1 MiB left
  SharedBytes b = In(arena, 2 * kUnder);  // no room: a second region, 2 MiB left
  ASSERT_EQ(log.mapped.size(), 2u);
  for (const SharedBytes& x : a) ASSERT_TRUE(Inside(log.mapped[0], x));
  ASSERT_TRUE(Inside(log.mapped[1], b));
  SharedBytes c = In(arena, kMiB / 2);
  EXPECT_TRUE(Inside(log.mapped[0], c)) << "1 MiB free there, 2 MiB in the other";
  SharedBytes d = In(arena, kMiB + kMiB / 2);
  EXPECT_TRUE(Inside(log.mapped[1], d)) << "only the second region has room";
  EXPECT_EQ(log.mapped.size(), 2u);
}

// A region mapped ahead is faulted in from its start, where the allocations
// that outgrow the others will carve first, while no allocation is in it
// (a region an allocation had to map is faulted in from its end down,
// since the caller writes from its start). 4 KiB pages, so the fill takes
// long enough to be watched.
TEST(ArenaMemoryResource, ARegionMappedAheadIsFaultedInFromItsStart) {
  constexpr size_t kRegion = size_t{256} << 20, kChunk = size_t{2} << 20;
  std::mutex mu;
  std::vector<MemoryRegion> mapped;
  ArenaOptions o{.max_region_bytes = kRegion,
                 .min_region_bytes = kRegion,
                 .retain_bytes = 2 * kRegion,
                 .map_ahead = true,
                 .huge_pages = false};
  o.callbacks.mapped = [&](void* p, size_t n) {
    std::lock_guard<std::mutex> lock(mu);
    mapped.push_back({p, n});
  };
  auto region = [&](size_t i) -> std::optional<MemoryRegion> {
    std::lock_guard<std::mutex> lock(mu);
    if (mapped.size() <= i) return std::nullopt;
    return mapped[i];
  };
  std::shared_ptr<MemoryResource> arena = NewArenaMemoryResource(o);
  // Less than a region left free: the next one is mapped ahead.
  void* p = arena->Allocate(kRegion - kChunk, 64);
  ASSERT_NE(p, nullptr);
  std::optional<MemoryRegion> ahead;
  ASSERT_TRUE(testing::WaitUntil([&] { return (ahead = region(1)).has_value(); }));
  auto* base = static_cast<uint8_t*>(ahead->base);
  const MemoryRegion first{base, kChunk}, last{base + kRegion - kChunk, kChunk};
  bool first_before_last = false, last_before_first = false;
  for (int i = 0; i < 300000; ++i) {
    const bool f = Resident(first), l = Resident(last);
    first_before_last = first_before_last || (f && !l);
    last_before_first = last_before_first || (l && !f);
    if (f && l) break;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  EXPECT_FALSE(last_before_first) << "faulted in from its end";
  EXPECT_TRUE(first_before_last) << "its start was never seen faulted in before its end";
  EXPECT_TRUE(testing::WaitUntil([&] { return Resident(*ahead); }));
  arena->Deallocate(p, kRegion - kChunk, 64);
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

// Callbacks installed while a region is being mapped (its report to the
// callbacks before them still running) hear of it too: once, and before its
// unmapping. They used to find no such region in the arena, so they heard
// only of its unmapping (an unregister of memory never registered, and a
// region handed out that the embedder never registered).
TEST(ArenaMemoryResource, CallbacksSetWhileARegionIsMappedHearOfItOnce) {
  testing::Gate reporting;
  RegionLog before;
  ArenaOptions o = SmallArena(&before);  // an empty region is unmapped at once
  o.callbacks.mapped = [&](void* p, size_t n) {
    before.mapped.push_back({p, n});
    reporting.Pass();
  };
  std::shared_ptr<MemoryResource> arena = NewArenaMemoryResource(o);
  SharedBytes b;
  std::thread allocating([&] { b = SharedBytes::CopyIn(arena, "abc", 3); });
  reporting.WaitForArrivals(1);  // mapped, its report under way
  RegionLog log;
  std::atomic<bool> set{false};
  std::thread setting([&] {
    arena->SetRegionCallbacks(log.Callbacks());
    set = true;
  });
  // The new callbacks are set now, or wait for the report to end.
  (void)testing::WaitUntil([&] { return set.load(); }, std::chrono::milliseconds(200));
  reporting.Open();
  allocating.join();
  setting.join();
  ASSERT_EQ(b.view(), "abc");
  ASSERT_EQ(before.mapped.size(), 1u);
  EXPECT_EQ(log.mapped, before.mapped) << "the new callbacks hear of the region";
  b = SharedBytes();
  EXPECT_EQ(log.unmapped, before.mapped);
  EXPECT_EQ(log.mapped.size(), 1u) << "once";
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

// A size whose footprint or region would pass 2^64 bytes is more than any
// arena holds: null, as for memory the kernel refuses. (Rounded up, such a
// size wrapped to a few bytes: a region in use handed out a pointer for it,
// and an arena without one divided by zero sizing its region.)
TEST(ArenaMemoryResource, ASizeNoRegionCanHoldIsRefused) {
  constexpr size_t kMax = std::numeric_limits<size_t>::max();
  for (const bool in_use : {true, false}) {
    SCOPED_TRACE(in_use ? "an arena with a region in use" : "an empty arena");
    RegionLog log;
    std::shared_ptr<MemoryResource> arena = NewArenaMemoryResource(SmallArena(&log));
    uint8_t* out = nullptr;
    SharedBytes small;
    if (in_use) small = SharedBytes::AllocateIn(arena, 100, 100, 64, &out);
    for (const size_t bytes : {kMax, kMax - 10, kMax - (size_t{1} << 20)}) {
      EXPECT_EQ(arena->Allocate(bytes, 64), nullptr) << bytes;
      EXPECT_EQ(arena->Allocate(bytes, 4096), nullptr) << bytes;
    }
    EXPECT_EQ(SharedBytes::AllocateIn(arena, kMax - 10, kMax - 10, 64, &out).data(),
              nullptr);
    // The arena is as it was.
    EXPECT_EQ(arena->Regions().size(), in_use ? 1u : 0u);
    const SharedBytes after = SharedBytes::AllocateIn(arena, 100, 100, 64, &out);
    ASSERT_NE(after.data(), nullptr);
    EXPECT_TRUE(Inside(arena->Regions()[0], after));
  }
}

#if PREFIXKV_ASAN
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
