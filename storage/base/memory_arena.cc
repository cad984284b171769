// The default MemoryResource (memory_resource.h): an arena of large,
// 2 MiB-aligned, pre-faulted regions.
//
// Why: a fresh 1 MiB heap buffer is mmap'ed and faulted in page by page on
// its first write, which costs as much as filling it; and memory scattered
// over the heap cannot be registered with a device once. The arena maps big
// regions (faulted in up front, optionally on transparent huge pages), keeps
// them while they fit its retain budget, and carves allocations from them.
//
// Allocation is best-fit over the free ranges of all regions (64-byte
// granules), and a free coalesces with both neighbours, so the block sizes
// of a model, which repeat, reuse the same ranges, and a store fills the
// region it is in before it takes a newer one. Regions grow geometrically
// from min_region_bytes to max_region_bytes, skipping ahead to the class in
// which the allocation that needs a new region packs with at most 1/32
// unused (NewRegionBytes); an allocation that packs no better in any class
// gets a region of its own. With map_ahead, a thread of the arena's faults
// pages in ahead of the allocations: the rest of a region a caller had to
// map (handed out before it is faulted in) from its end down while the
// caller fills it from the start, then the next region once less than the
// last one's size is free (added at once) from its start up until
// allocations reach it, then from its end down, so a first fill's copies
// and the kernel's zeroing run on two cores and no allocation waits for a
// whole region to be zeroed (docs/benchmarks.md, "Stores into fresh
// pages"). A region is unmapped only when no allocation is left in it (and
// the arena maps more than retain_bytes, and the thread is not faulting it
// in) or when the arena is destroyed, which happens after the last
// SharedBytes of its memory is gone (each holds the arena).
#include <sys/mman.h>

#include <atomic>
#include <cassert>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "prefixkv/advanced/mutex.h"
#include "prefixkv/advanced/sanitizers.h"
#include "prefixkv/memory_resource.h"

#if defined(__has_include)
#if __has_include(<sanitizer/asan_interface.h>)
#include <sanitizer/asan_interface.h>
#endif
#endif
#ifndef ASAN_POISON_MEMORY_REGION
#define ASAN_POISON_MEMORY_REGION(addr, size) ((void)(addr), (void)(size))
#define ASAN_UNPOISON_MEMORY_REGION(addr, size) ((void)(addr), (void)(size))
#endif

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif

namespace prefixkv {
namespace {

constexpr size_t kGranule = 64;
constexpr size_t kRegionAlign = size_t{2} << 20;
#if PREFIXKV_ASAN
constexpr size_t kRedZone = 64;  // stays poisoned after every allocation
#else
constexpr size_t kRedZone = 0;
#endif

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

// The bytes an allocation occupies in its region.
size_t Footprint(size_t bytes) { return RoundUp(bytes, kGranule) + kRedZone; }

// Whether an allocation of `bytes` could be mapped at all. Larger sizes
// (half the address space: no kernel maps that) are refused before any
// rounding, which would wrap them to a few bytes (Footprint, the region's
// size, the mapping's alignment slack): a region in use then handed out a
// pointer for them, and an empty arena divided by zero sizing the region.
bool Mappable(size_t bytes) { return bytes <= std::numeric_limits<size_t>::max() / 2; }

// Every free range of every region, by length then address: allocation is
// best-fit over all regions at once.
using FreeIndex = std::set<std::pair<size_t, uintptr_t>>;

// One mapped region and its free ranges (offsets from base), each also in
// the arena's FreeIndex while the region is in the arena.
struct Region {
  uint8_t* base = nullptr;
  size_t bytes = 0;
  std::map<size_t, size_t> free_at;  // offset -> length
  size_t live = 0;                   // allocations in it
  bool filling = false;              // the arena's thread is faulting it in: kept mapped
  size_t carved_end = 0;             // the end of the furthest allocation ever carved
  FreeIndex* index = nullptr;        // the arena's, once the region is in it

  uintptr_t At(size_t offset) const { return reinterpret_cast<uintptr_t>(base) + offset; }

  void AddFree(size_t offset, size_t length) {
    free_at.emplace(offset, length);
    index->emplace(length, At(offset));
  }
  void RemoveFree(std::map<size_t, size_t>::iterator it) {
    index->erase({it->second, At(it->first)});
    free_at.erase(it);
  }
  // Takes the region's free ranges out of the arena's index (it leaves).
  void Unindex() {
    for (const auto& [offset, length] : free_at) index->erase({length, At(offset)});
    index = nullptr;
  }

  // Carves `need` bytes at an `alignment`-aligned offset from the free
  // range at `offset`; nullptr when they do not fit in it.
  uint8_t* CarveAt(size_t offset, size_t need, size_t alignment) {
    auto it = free_at.find(offset);
    assert(it != free_at.end());
    const size_t length = it->second;
    const size_t start = RoundUp(At(offset), alignment) - At(0);
    if (start + need > offset + length) return nullptr;  // misaligned: needs slack
    RemoveFree(it);
    if (start > offset) AddFree(offset, start - offset);
    if (offset + length > start + need)
      AddFree(start + need, offset + length - start - need);
    ++live;
    carved_end = std::max(carved_end, start + need);
    return base + start;
  }

  // Returns [offset, offset + length), merged with free neighbours.
  void Release(size_t offset, size_t length) {
    auto next = free_at.lower_bound(offset);
    if (next != free_at.end() && next->first == offset + length) {
      length += next->second;
      RemoveFree(next);
    }
    auto prev = free_at.lower_bound(offset);
    if (prev != free_at.begin()) {
      --prev;
      if (prev->first + prev->second == offset) {
        offset = prev->first;
        length += prev->second;
        RemoveFree(prev);
      }
    }
    AddFree(offset, length);
    --live;
  }
};

// Faults in [p, p + bytes) for writing without writing to it, so pages in
// use keep their bytes; false where the kernel cannot (before Linux 5.14).
bool Populate(uint8_t* p, size_t bytes) {
  return madvise(p, bytes, MADV_POPULATE_WRITE) == 0;
}

// Maps `bytes` (a multiple of kRegionAlign) at a kRegionAlign-aligned
// address, faulted in when `populate`; null when the kernel refuses.
uint8_t* MapRegion(size_t bytes, const ArenaOptions& o, bool populate) {
  void* raw = mmap(nullptr, bytes + kRegionAlign, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  auto* p = static_cast<uint8_t*>(raw);
  auto* base =
      reinterpret_cast<uint8_t*>(RoundUp(reinterpret_cast<uintptr_t>(p), kRegionAlign));
  if (base > p) munmap(p, static_cast<size_t>(base - p));
  const size_t tail = static_cast<size_t>(p + bytes + kRegionAlign - (base + bytes));
  if (tail > 0) munmap(base + bytes, tail);
  if (o.huge_pages) madvise(base, bytes, MADV_HUGEPAGE);
  if (populate && !Populate(base, bytes)) {
    for (size_t i = 0; i < bytes; i += 4096) base[i] = 0;  // nobody uses it yet
  }
  return base;
}

class Arena final : public MemoryResource {
 public:
  explicit Arena(const ArenaOptions& o)
      : options_(o),
        callbacks_(std::make_shared<const RegionCallbacks>(o.callbacks)),
        next_region_bytes_(
            RoundUp(std::max<size_t>(o.min_region_bytes, 1), kRegionAlign)) {
    options_.max_region_bytes =
        std::max(next_region_bytes_, RoundUp(o.max_region_bytes, kRegionAlign));
  }

  ~Arena() override {
    stopping_.store(true, std::memory_order_relaxed);
    JoinAhead();
    RegionMap regions;
    std::shared_ptr<const RegionCallbacks> callbacks;
    {
      MutexLock lock(&mu_);
      regions.swap(regions_);
      callbacks = callbacks_;
    }
    for (auto& [addr, region] : regions) Unmap(*region, *callbacks);
  }

  void* Allocate(size_t bytes, size_t alignment) override {
    if (bytes == 0 || !Mappable(bytes) || alignment == 0 ||
        (alignment & (alignment - 1)) != 0 || alignment > 4096) {
      return nullptr;
    }
    alignment = std::max(alignment, kGranule);
    const size_t need = Footprint(bytes);
    JoinOnExit finished;  // declared before the locks: joins after they go
    auto region = std::make_unique<Region>();
    bool fill_behind = false;
    {
      MutexLock lock(&mu_);
      if (uint8_t* p = CarveAny(need, alignment)) {
        MapAheadIfLow(0, &finished);
        return Handed(p, bytes);
      }
      region->bytes = NewRegionBytes(need, alignment);
      // No room. With the arena's thread idle, the new region is handed out
      // before it is faulted in, and the thread faults in the rest of it
      // while the caller writes this allocation (then maps the next one
      // ahead if the arena is still low); else the next region is mapped
      // ahead while the caller faults this one in (a region still being
      // mapped ahead is not waited for). Either way both cores zero pages.
      fill_behind = options_.map_ahead && options_.populate && !ahead_running_ &&
                    region->bytes > need;
      if (!fill_behind) MapAheadIfLow(region->bytes, &finished);
    }
    // Mapped outside the lock (faulting it in takes a while).
    if (!Map(region.get(), options_.populate && !fill_behind)) return nullptr;
    MutexLock reporting(&report_mu_);
    ReportMapped(*region);
    MutexLock lock(&mu_);
    Region* fill = region.get();
    Add(std::move(region));
    uint8_t* p = fill->CarveAt(0, need, alignment);  // at its start: 2 MiB-aligned
    assert(p != nullptr);
    free_bytes_ -= need;
    if (fill_behind && !ahead_running_) {
      // From the page this allocation ends in: the caller faults in its own.
      const size_t end = static_cast<size_t>(p - fill->base) + need;
      StartAhead(fill, end / 4096 * 4096, 0, &finished);
    } else {
      // (The thread got busy meanwhile: the caller faults the region in as
      // it writes, as with populate off.)
      MapAheadIfLow(0, &finished);
    }
    return Handed(p, bytes);
  }

  // Maps regions of max_region_bytes until `bytes` are mapped (Open's
  // prefault: the first stores then find their pages faulted in).
  void Prefault(size_t bytes) {
    while (true) {
      auto region = std::make_unique<Region>();
      {
        MutexLock lock(&mu_);
        if (mapped_bytes_ >= bytes) return;
        region->bytes = std::min(options_.max_region_bytes,
                                 RoundUp(bytes - mapped_bytes_, kRegionAlign));
      }
      if (!Map(region.get(), options_.populate)) return;
      MutexLock reporting(&report_mu_);
      ReportMapped(*region);
      MutexLock lock(&mu_);
      Add(std::move(region));
    }
  }

  void Deallocate(void* p, size_t bytes, size_t /*alignment*/) override {
    if (p == nullptr) return;
    std::unique_ptr<Region> empty;
    std::shared_ptr<const RegionCallbacks> told;  // of `empty`'s mapping
    {
      MutexLock lock(&mu_);
      auto it = Find(p, 1);
      assert(it != regions_.end());
      if (it == regions_.end()) return;
      Region& region = *it->second;
      const size_t offset = static_cast<size_t>(static_cast<uint8_t*>(p) - region.base);
      ASAN_POISON_MEMORY_REGION(p, Footprint(bytes));
      region.Release(offset, Footprint(bytes));
      free_bytes_ += Footprint(bytes);
      empty = TakeIfUnneeded(it);
      if (empty != nullptr) told = callbacks_;
    }
    if (empty != nullptr) Unmap(*empty, *told);
  }

  bool Contains(const void* p, size_t bytes) const override {
    MutexLock lock(&mu_);
    return Find(p, bytes) != regions_.end();
  }

  std::vector<MemoryRegion> Regions() const override {
    MutexLock lock(&mu_);
    std::vector<MemoryRegion> out;
    for (const auto& [addr, region] : regions_)
      out.push_back({region->base, region->bytes});
    return out;
  }

  void SetRegionCallbacks(RegionCallbacks callbacks) override {
    auto shared = std::make_shared<const RegionCallbacks>(std::move(callbacks));
    std::vector<MemoryRegion> now;
    // No region is between its mapping and its place in the arena meanwhile,
    // nor between leaving the arena and its unmapping report (report_mu_).
    MutexLock reporting(&report_mu_);
    {
      MutexLock lock(&mu_);
      callbacks_ = shared;
      for (const auto& [addr, region] : regions_)
        now.push_back({region->base, region->bytes});
    }
    if (shared->mapped) {
      for (const MemoryRegion& r : now) shared->mapped(r.base, r.bytes);
    }
  }

 private:
  using RegionMap = std::map<uintptr_t, std::unique_ptr<Region>>;

  // The size of a new region for an allocation of footprint `need` (and
  // the next ones of its size): the first size class from the next one
  // (which doubles from min_region_bytes) up to max_region_bytes in which
  // allocations of this size, carved one after another, leave at most 1/32
  // of the region unused; else whichever class, or a region of its own
  // (`need` rounded up to 2 MiB), leaves the smallest share unused. Sizing
  // by `need` alone wasted half the memory on blocks just over a class
  // (a 2 MiB + 4 KiB SSD read got a 4 MiB region of its own), and a steady
  // state that maps twice its live bytes outgrows any retain budget and
  // faults in fresh pages forever.
  size_t NewRegionBytes(size_t need, size_t alignment) REQUIRES(mu_) {
    // Each region starts 2 MiB-aligned, so its first carve needs no slack.
    const size_t stride = RoundUp(need, alignment);
    auto unused = [&](size_t region) {
      return region - need - (region - need) / stride * stride;
    };
    size_t best = RoundUp(need, kRegionAlign);  // a region of its own
    bool own = true;
    for (size_t r = next_region_bytes_;; r = std::min(r * 2, options_.max_region_bytes)) {
      if (r >= need) {
        if (unused(r) * 32 <= r) {
          best = r;
          own = false;
          break;
        }
        // Compared as shares: unused(r) / r < unused(best) / best.
        if (unused(r) * best < unused(best) * r) {
          best = r;
          own = false;
        }
      }
      if (r >= options_.max_region_bytes) break;
    }
    if (!own) {
      last_region_bytes_ = best;
      next_region_bytes_ = std::min(best * 2, options_.max_region_bytes);
    }
    return best;
  }

  // Removes the region at `it` from the arena when no allocation is left in
  // it, the arena maps more than its retain budget and the arena's thread is
  // not faulting it in; the caller unmaps what it gets, outside the lock.
  std::unique_ptr<Region> TakeIfUnneeded(RegionMap::iterator it) REQUIRES(mu_) {
    Region& region = *it->second;
    if (region.live != 0 || region.filling || mapped_bytes_ <= options_.retain_bytes)
      return nullptr;
    mapped_bytes_ -= region.bytes;
    free_bytes_ -= region.bytes;
    region.Unindex();
    std::unique_ptr<Region> taken = std::move(it->second);
    regions_.erase(it);
    return taken;
  }

  // Maps `region` (its bytes set), faulted in when `populate`; false when
  // the kernel refuses. The caller reports it (ReportMapped) and adds it
  // (Add makes it all free) holding report_mu_ throughout.
  bool Map(Region* region, bool populate) {
    region->base = MapRegion(region->bytes, options_, populate);
    if (region->base == nullptr) return false;
    ASAN_POISON_MEMORY_REGION(region->base, region->bytes);
    return true;
  }
  // Tells the callbacks of a region just mapped, before it is added: under
  // report_mu_, so that callbacks set meanwhile (which report the regions
  // in the arena) either are told here or find it added. (Reported
  // outside it, a region being mapped while new callbacks were set was
  // told to the old ones only, and its unmapping to the new ones.)
  void ReportMapped(const Region& region) REQUIRES(report_mu_) {
    std::shared_ptr<const RegionCallbacks> callbacks = Callbacks();
    if (callbacks->mapped) callbacks->mapped(region.base, region.bytes);
  }
  void Add(std::unique_ptr<Region> region) REQUIRES(mu_) {
    region->index = &free_;
    region->AddFree(0, region->bytes);
    mapped_bytes_ += region->bytes;
    free_bytes_ += region->bytes;
    regions_.emplace(reinterpret_cast<uintptr_t>(region->base), std::move(region));
  }

  void* Handed(uint8_t* p, size_t bytes) {
    ASAN_UNPOISON_MEMORY_REGION(p, bytes);
    return p;
  }

  RegionMap::const_iterator Find(const void* p, size_t bytes) const REQUIRES(mu_) {
    const auto addr = reinterpret_cast<uintptr_t>(p);
    auto it = regions_.upper_bound(addr);
    if (it == regions_.begin()) return regions_.end();
    --it;
    const Region& r = *it->second;
    const auto end = reinterpret_cast<uintptr_t>(r.base) + r.bytes;
    return addr + bytes <= end && addr + bytes >= addr ? it : regions_.end();
  }
  RegionMap::iterator Find(const void* p, size_t bytes) REQUIRES(mu_) {
    auto c = static_cast<const Arena*>(this)->Find(p, bytes);
    return c == regions_.cend() ? regions_.end() : regions_.find(c->first);
  }

  // Carves `need` bytes from the smallest free range they fit in, over all
  // regions (the lowest address of equals); null when none has room. (The
  // first region with room, in address order, was the newest one mapped,
  // since the kernel maps downwards: a store left the region it was filling
  // for a region just mapped ahead and not faulted in yet.)
  uint8_t* CarveAny(size_t need, size_t alignment) REQUIRES(mu_) {
    for (auto f = free_.lower_bound({need, 0}); f != free_.end(); ++f) {
      auto it = Find(reinterpret_cast<const void*>(f->second), f->first);
      assert(it != regions_.end());
      Region& region = *it->second;
      // (CarveAt changes the index only when it carves.)
      if (uint8_t* p = region.CarveAt(f->second - region.At(0), need, alignment)) {
        free_bytes_ -= need;
        return p;
      }
    }
    return nullptr;
  }

  // Threads joined when it goes out of scope (after the locks declared
  // after it are released).
  struct JoinOnExit {
    std::vector<std::thread> threads;
    ~JoinOnExit() {
      for (std::thread& t : threads) t.join();
    }
  };

  // Map-ahead (ArenaOptions::map_ahead): when less than the last region's
  // size is free and one more region fits the retain budget (with `pending`
  // bytes the caller is mapping now), the arena's thread maps the next
  // region and faults it in while allocations fill what is left and carve
  // from it, so a first fill pays for zeroing fresh pages on another core.
  // One thread at a time; the previous one's, done by now, goes to
  // `finished` to be joined outside the lock.
  void MapAheadIfLow(size_t pending, JoinOnExit* finished) REQUIRES(mu_) {
    if (ahead_running_) return;
    if (const size_t bytes = TakeAheadBytes(pending))
      StartAhead(nullptr, 0, bytes, finished);
  }

  // The size of the region to map ahead now (0: none), as MapAheadIfLow
  // says; the next region after it is larger.
  size_t TakeAheadBytes(size_t pending) REQUIRES(mu_) {
    // Low: less than the last region's size is free. (Comparing the free
    // bytes with the next region's size instead, which doubles with every
    // region, found the arena low again after every region it mapped: each
    // allocation that found the thread idle mapped one more, up to the
    // retain budget.)
    if (!options_.map_ahead || free_bytes_ + pending >= last_region_bytes_ ||
        mapped_bytes_ + pending + next_region_bytes_ > options_.retain_bytes) {
      return 0;
    }
    const size_t bytes = next_region_bytes_;
    last_region_bytes_ = bytes;
    next_region_bytes_ = std::min(next_region_bytes_ * 2, options_.max_region_bytes);
    return bytes;
  }

  // Starts the arena's thread (one at a time): it faults in `fill` (a region
  // in the arena, handed out unfaulted) down to offset `from`, then maps a
  // region of `bytes` ahead, or, after a fill, one if the arena is low.
  void StartAhead(Region* fill, size_t from, size_t bytes, JoinOnExit* finished)
      REQUIRES(mu_) {
    if (ahead_thread_.joinable()) finished->threads.push_back(std::move(ahead_thread_));
    try {
      ahead_thread_ =
          std::thread([this, fill, from, bytes] { RunAhead(fill, from, bytes); });
      ahead_running_ = true;
      if (fill != nullptr) fill->filling = true;
    } catch (const std::system_error&) {
      // No thread to be had: the caller faults pages in as it writes, and
      // the next region is mapped when it is needed.
    }
  }

  // The arena's thread: fills `fill` down to `from`, then, while the arena
  // is low, maps the next region (`bytes` of it first), adds it at once,
  // still unfaulted, and fills it (FillAhead): the allocations carved from
  // it meanwhile fault in what the thread has not reached yet, so they never
  // wait for a whole region to be zeroed.
  void RunAhead(Region* fill, size_t from, size_t bytes) {
    bool ahead = false;  // `fill` was mapped ahead: no caller is in it yet
    for (;;) {
      if (fill != nullptr) {
        if (ahead) {
          FillAhead(*fill);
        } else {
          Fill(*fill, from);
        }
        std::unique_ptr<Region> empty;
        std::shared_ptr<const RegionCallbacks> told;  // of `empty`'s mapping
        {
          MutexLock lock(&mu_);
          fill->filling = false;
          auto it = regions_.find(reinterpret_cast<uintptr_t>(fill->base));
          assert(it != regions_.end());  // kept while filling
          empty = TakeIfUnneeded(it);
          if (empty != nullptr) told = callbacks_;
          if (bytes == 0) bytes = TakeAheadBytes(0);
        }
        if (empty != nullptr) Unmap(*empty, *told);
        fill = nullptr;
      }
      if (bytes == 0 || stopping_.load(std::memory_order_relaxed)) break;
      auto region = std::make_unique<Region>();
      region->bytes = bytes;
      bytes = 0;
      if (!Map(region.get(), /*populate=*/false)) break;
      MutexLock reporting(&report_mu_);
      ReportMapped(*region);
      MutexLock lock(&mu_);
      if (options_.populate) {
        fill = region.get();
        fill->filling = true;
        ahead = true;
      }
      Add(std::move(region));
    }
    MutexLock lock(&mu_);
    ahead_running_ = false;
    ahead_done_.NotifyAll();
  }

  // Faults in `region` from its end down to offset `from`, a 2 MiB page at a
  // time, while allocations fill it from the start: the caller and the
  // thread meet somewhere in between, and no page is zeroed twice (two
  // faults racing for one huge page both zero one; the loser's is freed).
  // Stops early for a closing arena. The region stays in the arena meanwhile
  // (`filling`).
  void Fill(const Region& region, size_t from) {
    for (size_t end = region.bytes;
         end > from && !stopping_.load(std::memory_order_relaxed);) {
      const size_t start = std::max(from, (end - 1) / kRegionAlign * kRegionAlign);
      if (!Populate(region.base + start, end - start)) return;
      end = start;
    }
  }

  // Faults in a region mapped ahead, which allocations will fill from its
  // start once the others are full: from its start up, so the first ones
  // find their pages faulted in, until one is carved beyond the pages done
  // (the allocations caught up with the thread); then from its end down to
  // meet them, as Fill.
  void FillAhead(const Region& region) {
    size_t done = 0;
    while (done < region.bytes && !stopping_.load(std::memory_order_relaxed)) {
      {
        MutexLock lock(&mu_);
        if (region.carved_end > done) break;
      }
      const size_t n = std::min(kRegionAlign, region.bytes - done);
      if (!Populate(region.base + done, n)) return;
      done += n;
    }
    Fill(region, done);
  }

  void JoinAhead() {
    std::thread ahead;
    {
      MutexLock lock(&mu_);
      ahead_done_.Wait(lock, [&]() REQUIRES(mu_) { return !ahead_running_; });
      ahead = std::move(ahead_thread_);
    }
    if (ahead.joinable()) ahead.join();
  }

  std::shared_ptr<const RegionCallbacks> Callbacks() const {
    MutexLock lock(&mu_);
    return callbacks_;
  }

  // `callbacks`: those current when the region left the arena (they were
  // told of it). Under report_mu_: their SetRegionCallbacks' report of it,
  // if it found the region in the arena, has ended.
  void Unmap(const Region& region, const RegionCallbacks& callbacks)
      EXCLUDES(report_mu_) {
    MutexLock reporting(&report_mu_);
    if (callbacks.unmapping) callbacks.unmapping(region.base, region.bytes);
    ASAN_UNPOISON_MEMORY_REGION(region.base, region.bytes);
    munmap(region.base, region.bytes);
  }

  ArenaOptions options_;
  // Held while the region callbacks are called (never with mu_ held, taken
  // before it), and by SetRegionCallbacks throughout: every callbacks object
  // is told of a region's mapping exactly once, before its unmapping.
  Mutex report_mu_;
  mutable Mutex mu_;
  RegionMap regions_ GUARDED_BY(mu_);  // by base address
  FreeIndex free_ GUARDED_BY(mu_);     // their free ranges
  // Replaced only holding report_mu_ too.
  std::shared_ptr<const RegionCallbacks> callbacks_ GUARDED_BY(mu_);
  size_t mapped_bytes_ GUARDED_BY(mu_) = 0;
  size_t free_bytes_ GUARDED_BY(mu_) = 0;  // of the regions mapped, not carved
  size_t next_region_bytes_ GUARDED_BY(mu_);
  // The last region mapped in the doubling sequence (not one of its own):
  // the arena is low, for map-ahead, when less than this is free.
  size_t last_region_bytes_ GUARDED_BY(mu_) = 0;
  std::atomic<bool> stopping_{false};           // the arena is being destroyed
  bool ahead_running_ GUARDED_BY(mu_) = false;  // a region being mapped ahead
  CondVar ahead_done_;                          // ... is mapped (or failed)
  std::thread ahead_thread_ GUARDED_BY(mu_);    // the last map-ahead's
};

}  // namespace

std::shared_ptr<MemoryResource> NewArenaMemoryResource(const ArenaOptions& options) {
  auto arena = std::make_shared<Arena>(options);
  arena->Prefault(options.prefault_bytes);
  return arena;
}

}  // namespace prefixkv
