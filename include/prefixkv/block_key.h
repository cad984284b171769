// BlockKey, the 128-bit name of a block or a namespace, and the chain keys:
// deterministic, documented, versioned chain hashes (docs/format.md §1).
//
//   root   = XXH3-128(namespace fingerprint string)
//   key(i) = XXH3-128(key(i-1) as 16 bytes LE || tokens as int32 LE ||
//                     for each extra key: u32 LE length || bytes)
//
// The same tokens give the same keys in every process and after every restart;
// docs/format.md publishes test vectors that tests/core/block_key_test.cc checks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "prefixkv/status.h"

namespace prefixkv {

// A 128-bit block or namespace key. Value semantics; trivially copyable.
struct BlockKey {
  uint64_t hi = 0;  // high 64 bits of the XXH3-128 value
  uint64_t lo = 0;  // low 64 bits

  bool IsZero() const { return hi == 0 && lo == 0; }
  // 32 lowercase hex digits, high half first (the same text xxhsum prints).
  std::string ToHex() const;
  // Parses ToHex() output. InvalidArgument on anything else.
  static StatusOr<BlockKey> FromHex(std::string_view hex);
  // The 16-byte little-endian encoding (lo then hi, each little-endian) used
  // inside chain hashes and in the record format.
  void EncodeTo(uint8_t out[16]) const;
  static BlockKey DecodeFrom(const uint8_t in[16]);

  friend bool operator==(const BlockKey& a, const BlockKey& b) {
    return a.hi == b.hi && a.lo == b.lo;
  }
  friend bool operator!=(const BlockKey& a, const BlockKey& b) { return !(a == b); }
  friend bool operator<(const BlockKey& a, const BlockKey& b) {
    return a.hi != b.hi ? a.hi < b.hi : a.lo < b.lo;
  }
};

struct BlockKeyHash {
  size_t operator()(const BlockKey& k) const {
    return static_cast<size_t>(k.lo ^ (k.hi * 0x9E3779B97F4A7C15ull));
  }
};

// The root of a namespace fingerprint (NamespaceSpec::Fingerprint,
// namespace_spec.h): XXH3-128 of the string.
BlockKey NamespaceRootFromFingerprint(std::string_view fingerprint);

// key(i) from key(i-1) and this block's tokens and extra keys.
BlockKey ChainKey(const BlockKey& parent, std::span<const int32_t> tokens,
                  std::span<const std::string> extra_keys = {});

// Keys of every full block of `tokens` (a trailing partial block gets none).
std::vector<BlockKey> ChainKeys(const BlockKey& root, std::span<const int32_t> tokens,
                                uint32_t block_tokens);

}  // namespace prefixkv

template <>
struct std::hash<prefixkv::BlockKey> {
  size_t operator()(const prefixkv::BlockKey& k) const {
    return prefixkv::BlockKeyHash()(k);
  }
};
