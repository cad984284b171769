// SharedBytes: an immutable, reference-counted byte range.
//
// The unit of zero-copy in prefixkv: the hot tier hands out SharedBytes, decoded
// tensors are SharedBytes slices of the encoded record, and a restore that hits
// the hot tier reads the very bytes that were stored. Copying a SharedBytes
// copies a pointer, never the bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace prefixkv {

class MemoryResource;  // memory_resource.h

// Thread-safe for concurrent readers (the bytes never change after creation).
class SharedBytes {
 public:
  SharedBytes() = default;

  // A fresh copy of [data, data+size).
  static SharedBytes Copy(const void* data, size_t size);
  static SharedBytes Copy(std::string_view s) { return Copy(s.data(), s.size()); }
  // Takes ownership of a string's buffer without copying it.
  static SharedBytes Adopt(std::string&& s);
  // An uninitialised, 64-byte aligned buffer of `size` bytes. `*writable` lets
  // the creator fill it before sharing; nobody may write through it afterwards.
  static SharedBytes Allocate(size_t size, uint8_t** writable);
  // A buffer for AdoptBuffer, for code whose allocation callback must return a
  // plain pointer (a parser's reply strings): `capacity` uninitialised bytes,
  // 64-byte aligned. Large ones are recycled (already paged in) once freed.
  // free() may release it instead, losing only the recycling.
  static constexpr size_t kBufferAlign = 64;
  static void* AllocateBuffer(size_t capacity);
  // Takes ownership of a buffer from AllocateBuffer(capacity), viewed as its
  // first `size` (<= capacity) bytes; it goes back to the recycler when the
  // last copy goes.
  static SharedBytes AdoptBuffer(void* data, size_t capacity, size_t size);
  // An uninitialised buffer of `capacity` (>= size) bytes aligned to
  // `alignment` (a power of two, >= 64), viewed as its first `size` bytes. For
  // O_DIRECT reads, which fill whole aligned blocks: the payload lands at offset
  // 0 and the tail beyond `size` stays allocated but invisible (no copy).
  static SharedBytes AllocateAligned(size_t size, size_t capacity, size_t alignment,
                                     uint8_t** writable);

  // An uninitialised buffer of `capacity` (>= size) bytes aligned to
  // `alignment` (a power of two, 64 to 4096) from `memory`, viewed as its
  // first `size` bytes. The buffer, and `memory` itself, are held until the
  // last copy (or slice) goes; then the buffer is deallocated. An empty
  // SharedBytes with data() null when `memory` has no room left.
  static SharedBytes AllocateIn(const std::shared_ptr<MemoryResource>& memory,
                                size_t size, size_t capacity, size_t alignment,
                                uint8_t** writable);
  // A copy of [data, data+size) in `memory` (64-byte aligned); data() null
  // when it has no room left.
  static SharedBytes CopyIn(const std::shared_ptr<MemoryResource>& memory,
                            const void* data, size_t size);

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::string_view view() const { return {reinterpret_cast<const char*>(data_), size_}; }

  // A sub-range sharing ownership. REQUIRES: offset + length <= size().
  SharedBytes Slice(size_t offset, size_t length) const;

  // How many SharedBytes share this buffer (for tests proving zero copy).
  long use_count() const { return owner_.use_count(); }

 private:
  SharedBytes(std::shared_ptr<const void> owner, const uint8_t* data, size_t size)
      : owner_(std::move(owner)), data_(data), size_(size) {}

  std::shared_ptr<const void> owner_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace prefixkv
