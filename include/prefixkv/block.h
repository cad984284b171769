// BlockKey, LayerState and BlockRecord: what one cached token block is.
//
// A block holds `token_count` tokens' worth of cache for every layer of a model.
// Its key is the chain hash of its whole prefix (see block_key.h), so equal keys
// mean equal prefixes. Sliceable layers carry their own slice in every block;
// rotating and arrays layers are real only in a chain tip and a placeholder
// (zero tensors, `placeholder` set) everywhere else.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "prefixkv/tensor.h"

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

// One layer's cache inside one block.
struct LayerState {
  std::string cache_type;         // e.g. "KVCache", "RotatingKVCache"
  std::vector<std::string> meta;  // the cache type's meta state, as strings
  bool placeholder = false;       // true: a stand-in that carries no state
  std::vector<Tensor> tensors;    // e.g. {keys, values}; empty for placeholders

  // Sum of tensor byte lengths.
  size_t PayloadBytes() const;
  bool operator==(const LayerState& other) const;
};

// The standard placeholder for a non-sliceable layer in a non-tip block.
LayerState MakePlaceholder(const std::string& cache_type);

struct BlockRecord {
  BlockKey key;           // chain hash of this block's whole prefix
  BlockKey parent;        // key of the previous block; the namespace root for the first
  BlockKey namespace_id;  // root of the chain (fingerprint of model + layout)
  uint32_t token_count = 0;     // tokens this block covers
  bool partial = false;         // true: fewer than block_tokens tokens (a marked tail)
  std::vector<int32_t> tokens;  // optional: the token ids (empty when not stored)
  std::vector<LayerState> layers;

  size_t PayloadBytes() const;  // sum over layers
  bool operator==(const BlockRecord& other) const;
};

}  // namespace prefixkv

template <>
struct std::hash<prefixkv::BlockKey> {
  size_t operator()(const prefixkv::BlockKey& k) const {
    return prefixkv::BlockKeyHash()(k);
  }
};
