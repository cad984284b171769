// The one place that includes xxHash (prefixkv/advanced/hash.h): one-shot
// 64- and 128-bit XXH3 and a streaming state. Keeping xxHash out of every header
// means one copy of its inline code, and the public API names only prefixkv
// types; the streaming state lives in an opaque aligned buffer of the header's
// class for the same reason.
#include "prefixkv/advanced/hash.h"

#include <new>

#include "xxh.h"

namespace prefixkv {
namespace {

thread_local uint64_t t_hashed_bytes = 0;

XXH3_state_t* State(unsigned char* raw) {
  return std::launder(reinterpret_cast<XXH3_state_t*>(raw));
}
const XXH3_state_t* State(const unsigned char* raw) {
  return std::launder(reinterpret_cast<const XXH3_state_t*>(raw));
}

}  // namespace

uint64_t ThreadHashedBytes() { return t_hashed_bytes; }

uint64_t Hash64(const void* data, size_t size) {
  t_hashed_bytes += size;
  return XXH3_64bits(data, size);
}

BlockKey Hash128(const void* data, size_t size) {
  t_hashed_bytes += size;
  XXH128_hash_t h = XXH3_128bits(data, size);
  return BlockKey{h.high64, h.low64};
}

HashStream::HashStream(Width width) : width_(width) {
  static_assert(sizeof(XXH3_state_t) <= sizeof(state_), "XXH3_state_t grew");
  static_assert(alignof(XXH3_state_t) <= 64, "XXH3_state_t alignment grew");
  XXH3_state_t* s = new (state_) XXH3_state_t;
  if (width == Width::k64) {
    XXH3_64bits_reset(s);
  } else {
    XXH3_128bits_reset(s);
  }
}

void HashStream::Update(const void* data, size_t size) {
  t_hashed_bytes += size;
  if (width_ == Width::k64) {
    XXH3_64bits_update(State(state_), data, size);
  } else {
    XXH3_128bits_update(State(state_), data, size);
  }
}

uint64_t HashStream::Digest64() const { return XXH3_64bits_digest(State(state_)); }

BlockKey HashStream::Digest128() const {
  XXH128_hash_t h = XXH3_128bits_digest(State(state_));
  return BlockKey{h.high64, h.low64};
}

}  // namespace prefixkv
