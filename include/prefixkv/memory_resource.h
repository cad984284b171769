// MemoryResource: where the engine's block and restore memory comes from.
//
// The hot tier's blocks, the blocks a restore plan stages (SSD and remote
// hits, decompressed tensors) and the buffers records are encoded into are
// allocated from one MemoryResource, so an embedder can make all of that
// memory visible to a device once: each region the resource maps is reported
// to RegionCallbacks::mapped when it is mapped (e.g. cudaHostRegister) and to
// RegionCallbacks::unmapping before it is unmapped (cudaHostUnregister).
// Copies from registered (page-locked) memory run at the bus' speed; from
// ordinary pageable memory at a fraction of it (docs/benchmarks.md).
//
// The default resource (NewArenaMemoryResource) is an arena of large,
// aligned, pre-faulted regions. A resource is held by shared_ptr by
// everything allocated from it, so it lives until the last block, pin or view
// of its memory is gone, even past Engine::Close(): no region is unmapped
// while anything refers into it.
//
//   EngineOptions o;
//   o.on_region.mapped = [](void* p, size_t n) { cudaHostRegister(p, n, 0); };
//   o.on_region.unmapping = [](void* p, size_t n) { cudaHostUnregister(p); };
//   auto engine = Engine::Open(o).value();
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace prefixkv {

// A contiguous range of host memory a resource maps.
struct MemoryRegion {
  void* base = nullptr;
  size_t bytes = 0;
  friend bool operator==(const MemoryRegion& a, const MemoryRegion& b) {
    return a.base == b.base && a.bytes == b.bytes;
  }
};

// Told of every region of a resource: `mapped` once when it is mapped (or at
// once, for regions mapped before the callbacks were set), before any of its
// memory is handed out; `unmapping` once before it is unmapped, after the
// last allocation in it was returned. Either may be empty. They run on the
// thread that allocates or frees (possibly after the engine closed, when the
// last view of a region goes), or on the arena's own thread for a region it
// maps ahead (ArenaOptions::map_ahead). That thread may hold an engine lock
// (an SSD read allocates under its key's lock; a block's last reference may
// go under the hot tier's), so they must call into neither the engine nor
// the resource. The arena makes them one at a time, and
// SetRegionCallbacks waits for a call in progress, so callbacks set while a
// region is being mapped are told of it too.
struct RegionCallbacks {
  std::function<void(void* base, size_t bytes)> mapped;
  std::function<void(void* base, size_t bytes)> unmapping;
};

// Thread-safe: every method may be called concurrently.
class MemoryResource {
 public:
  virtual ~MemoryResource() = default;

  // `bytes` (> 0) bytes aligned to `alignment` (a power of two, <= 4096),
  // uninitialised, inside one region; null when no memory is left (or
  // `bytes` is more than the address space could map).
  virtual void* Allocate(size_t bytes, size_t alignment) = 0;
  // Returns an allocation. REQUIRES: `p`, `bytes` and `alignment` as they
  // were allocated; nothing refers into it any more.
  virtual void Deallocate(void* p, size_t bytes, size_t alignment) = 0;
  // Whether [p, p + bytes) lies inside one region of this resource.
  virtual bool Contains(const void* p, size_t bytes) const = 0;
  // The regions mapped now.
  virtual std::vector<MemoryRegion> Regions() const = 0;
  // Installs the region callbacks (replacing earlier ones) and calls
  // `callbacks.mapped` for every region mapped now.
  virtual void SetRegionCallbacks(RegionCallbacks callbacks) = 0;
};

struct ArenaOptions {
  // The largest region the arena maps for small allocations; regions start
  // at min_region_bytes and double as the arena grows, up to this. An
  // allocation larger than it gets a region of its own (rounded up to
  // min_region_bytes). Both are rounded up to 2 MiB.
  size_t max_region_bytes = size_t{64} << 20;
  size_t min_region_bytes = size_t{2} << 20;
  // Regions left empty are kept mapped (and registered) while the arena maps
  // at most this many bytes in all, so a steady state never faults in fresh
  // pages; beyond it an empty region is unmapped. The engine uses its hot
  // capacity plus one region.
  size_t retain_bytes = size_t{1} << 30;
  // Regions (of max_region_bytes) mapped and faulted in when the arena is
  // made, so the first allocations do not wait for a mapping either.
  size_t prefault_bytes = 0;
  // Fault every page in when a region is mapped (MADV_POPULATE_WRITE), so
  // the first write to it costs no page fault; with map_ahead, on the
  // arena's thread (below).
  bool populate = true;
  // Fault pages in on a thread of the arena's, ahead of the allocations: a
  // region mapped for an allocation is handed out at once and the thread
  // faults in the rest of it (with populate, from its end down), and while
  // the arena grows within retain_bytes it maps the next region once less
  // than the last region's size is free, adds it at once and faults it in
  // the same way. So a first fill, such as a new engine's stores, runs its
  // copies and the kernel's zeroing on two cores and never waits for a whole
  // region to be zeroed (an allocation that reaches pages the thread has not
  // faulted in yet faults them in itself). Region callbacks then run on that
  // thread too. The engine's default arena turns it on.
  bool map_ahead = false;
  // Ask for transparent huge pages on every region (madvise MADV_HUGEPAGE):
  // fewer TLB misses, fewer pages for an O_DIRECT read to pin and fewer,
  // larger pages for a device to register.
  bool huge_pages = true;
  RegionCallbacks callbacks;
};

// The default resource: regions mmap'ed on demand, allocations carved from
// them best-fit (64-byte granules, neighbours coalesced on free). Under
// AddressSanitizer free ranges and a 64-byte red zone after each allocation
// are poisoned, so an overflow into a neighbour is still reported.
std::shared_ptr<MemoryResource> NewArenaMemoryResource(const ArenaOptions& options = {});

}  // namespace prefixkv
