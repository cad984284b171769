// SharedBytes allocation, adoption and slicing (bytes.h). Every block payload
// lives in one of these: immutable once shared, so readers on any thread need no
// lock, and slices share the owner instead of copying. Large buffers come from a
// recycler (below) because O_DIRECT reads, remote fetches and restored layers
// allocate the same sizes over and over, and a fresh large allocation costs as
// much as the read that fills it.
#include "prefixkv/bytes.h"

#include <algorithm>
#include <cassert>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <new>
#include <utility>

#include "prefixkv/advanced/mutex.h"
#include "prefixkv/memory_resource.h"

namespace prefixkv {

SharedBytes SharedBytes::Copy(const void* data, size_t size) {
  uint8_t* out = nullptr;
  SharedBytes b = Allocate(size, &out);
  if (size > 0) std::memcpy(out, data, size);
  return b;
}

SharedBytes SharedBytes::Adopt(std::string&& s) {
  auto owner = std::make_shared<const std::string>(std::move(s));
  const auto* data = reinterpret_cast<const uint8_t*>(owner->data());
  size_t size = owner->size();
  return SharedBytes(std::move(owner), data, size);
}

namespace {

// Recycles large aligned buffers (O_DIRECT read targets, fetched remote
// blocks, restored layers): a fresh 1 MiB allocation is mmap'ed and
// page-faulted (zeroed) page by page, which costs about as much as reading it
// from a fast SSD or a socket. Freed buffers of at least kMinCached bytes are
// kept, up to kMaxHeld bytes in all, and reused for an allocation of exactly
// the same size and alignment, last freed first. On a node whose hot tier is full every
// new block replaces an evicted one of the same model, so the sizes repeat. Every buffer
// comes from aligned_alloc, so free() may release any of them.
class AlignedRecycler {
 public:
  static constexpr size_t kMinCached = 64 << 10;
  static constexpr size_t kMaxHeld = 64 << 20;

  void* Get(size_t bytes, size_t alignment) {
    if (bytes >= kMinCached) {
      MutexLock lock(&mu_);
      // The last one freed of that size (its lines are the likeliest still
      // in the caches).
      auto [lo, hi] = free_.equal_range({bytes, alignment});
      if (lo != hi) {
        auto it = std::prev(hi);
        void* p = it->second;
        free_.erase(it);
        held_ -= bytes;
        return p;
      }
    }
    return std::aligned_alloc(alignment, bytes);
  }
  void Put(void* p, size_t bytes, size_t alignment) {
    if (bytes >= kMinCached) {
      MutexLock lock(&mu_);
      if (held_ + bytes <= kMaxHeld) {
        free_.emplace(std::make_pair(bytes, alignment), p);
        held_ += bytes;
        return;
      }
    }
    std::free(p);
  }

 private:
  Mutex mu_;
  std::multimap<std::pair<size_t, size_t>, void*> free_
      GUARDED_BY(mu_);  // (bytes, alignment)
  size_t held_ GUARDED_BY(mu_) = 0;
};

// Never destroyed: buffers may be released by static destructors.
AlignedRecycler& Recycler() {
  static auto* r = new AlignedRecycler;
  return *r;
}

size_t RoundedCapacity(size_t capacity) {
  const size_t rounded = (capacity + SharedBytes::kBufferAlign - 1) /
                         SharedBytes::kBufferAlign * SharedBytes::kBufferAlign;
  return rounded == 0 ? SharedBytes::kBufferAlign : rounded;
}

}  // namespace

SharedBytes SharedBytes::Allocate(size_t size, uint8_t** writable) {
  const size_t rounded = RoundedCapacity(size);
  auto* bytes = static_cast<uint8_t*>(AllocateBuffer(rounded));
  std::memset(bytes + size, 0, rounded - size);  // defined padding, never read
  if (writable != nullptr) *writable = bytes;
  return AdoptBuffer(bytes, rounded, size);
}

void* SharedBytes::AllocateBuffer(size_t capacity) {
  void* p = Recycler().Get(RoundedCapacity(capacity), kBufferAlign);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

SharedBytes SharedBytes::AdoptBuffer(void* data, size_t capacity, size_t size) {
  assert(size <= capacity);
  const size_t rounded = RoundedCapacity(capacity);
  std::shared_ptr<const void> owner(data, [rounded](const void* q) {
    Recycler().Put(const_cast<void*>(q), rounded, kBufferAlign);
  });
  return SharedBytes(std::move(owner), static_cast<const uint8_t*>(data), size);
}

SharedBytes SharedBytes::AllocateAligned(size_t size, size_t capacity, size_t alignment,
                                         uint8_t** writable) {
  assert(capacity >= size && alignment >= 64 && (alignment & (alignment - 1)) == 0);
  size_t rounded = (capacity + alignment - 1) / alignment * alignment;
  if (rounded == 0) rounded = alignment;
  void* p = Recycler().Get(rounded, alignment);
  if (p == nullptr) throw std::bad_alloc();
  if (writable != nullptr) *writable = static_cast<uint8_t*>(p);
  std::shared_ptr<const void> owner(p, [rounded, alignment](const void* q) {
    Recycler().Put(const_cast<void*>(q), rounded, alignment);
  });
  return SharedBytes(std::move(owner), static_cast<const uint8_t*>(p), size);
}

SharedBytes SharedBytes::AllocateIn(const std::shared_ptr<MemoryResource>& memory,
                                    size_t size, size_t capacity, size_t alignment,
                                    uint8_t** writable) {
  assert(capacity >= size && alignment >= 64 && (alignment & (alignment - 1)) == 0);
  const size_t bytes = std::max<size_t>(capacity, 1);
  void* p = memory->Allocate(bytes, alignment);
  if (p == nullptr) return SharedBytes();
  if (writable != nullptr) *writable = static_cast<uint8_t*>(p);
  // The deleter holds the resource: its regions outlive every view.
  std::shared_ptr<const void> owner(p, [memory, bytes, alignment](const void* q) {
    memory->Deallocate(const_cast<void*>(q), bytes, alignment);
  });
  return SharedBytes(std::move(owner), static_cast<const uint8_t*>(p), size);
}

SharedBytes SharedBytes::CopyIn(const std::shared_ptr<MemoryResource>& memory,
                                const void* data, size_t size) {
  uint8_t* out = nullptr;
  SharedBytes b = AllocateIn(memory, size, size, kBufferAlign, &out);
  if (out != nullptr && size > 0) std::memcpy(out, data, size);
  return b;
}

SharedBytes SharedBytes::Slice(size_t offset, size_t length) const {
  assert(offset <= size_ && length <= size_ - offset);
  return SharedBytes(owner_, data_ + offset, length);
}

}  // namespace prefixkv
