// XXH3 hashing for the storage modules (codec checksums, SSD record and
// footer checksums, chain keys) without exposing xxHash's own types.
//
// Every function here is exactly the XXH3 function of the same width, so the
// values are those docs/format.md and docs/ssd.md publish. xxHash itself is
// included in one place only (storage/base/hash.cc), where the x86-64 build
// uses the system library's runtime-dispatched (SSE2/AVX2/AVX-512) versions.
#pragma once

#include <cstddef>
#include <cstdint>

#include "prefixkv/block.h"

namespace prefixkv {

// XXH3-64 of `size` bytes at `data` (seed 0).
uint64_t Hash64(const void* data, size_t size);

// XXH3-128 of `size` bytes at `data` (seed 0), high half in BlockKey::hi.
BlockKey Hash128(const void* data, size_t size);

// Bytes this thread has fed to XXH3 through any function here, ever: how
// tests count hash passes without timing them (a store of N bytes into RAM
// hashes N bytes once, not twice). A thread-local counter: costs one add.
uint64_t ThreadHashedBytes();

// XXH3-64 or XXH3-128 over data fed in pieces: equal to the one-shot hash of
// the concatenation. Not thread-safe; cheap to create on the stack.
class HashStream {
 public:
  enum class Width { k64, k128 };
  explicit HashStream(Width width);
  HashStream(const HashStream&) = delete;
  HashStream& operator=(const HashStream&) = delete;

  void Update(const void* data, size_t size);
  // The hash of everything fed so far (REQUIRES: Width::k64).
  uint64_t Digest64() const;
  // The hash of everything fed so far (REQUIRES: Width::k128).
  BlockKey Digest128() const;

 private:
  // XXH3_state_t, kept opaque (storage/base/hash.cc checks size and alignment).
  alignas(64) unsigned char state_[576];
  Width width_;
};

}  // namespace prefixkv
