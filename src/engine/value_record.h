// The key-value space's stored form (docs/format.md, section 4): a raw key
// "name" lives under ValueKey(name) = XXH3-128("prefixkv/raw/v3|" + name) as
// a value record, a 24-byte header with the name and its expiry followed by
// the value's bytes, so that the tiers keep the name (SCAN lists it) and the
// expiry (a restart keeps it) with the value, in one write. Entries of the
// previous scheme (LegacyValueKey: the bare value under "prefixkv/raw/v2|")
// still read, without expiry.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "prefixkv/block.h"
#include "prefixkv/bytes.h"
#include "prefixkv/memory_resource.h"
#include "prefixkv/status.h"

namespace prefixkv::internal {

inline constexpr size_t kValueHeaderBytes = 24;
// The longest name a record holds (Redis allows 512 MB; a cache key is short).
inline constexpr size_t kMaxValueNameBytes = 64 << 10;

BlockKey ValueKey(std::string_view name);
BlockKey LegacyValueKey(std::string_view name);

// A decoded record: views into the payload it came from.
struct ValueRecord {
  std::string_view name;
  uint64_t expires_at_ms = 0;  // Unix time in ms; 0: never
  SharedBytes value;           // a slice of the payload (no copy)

  bool ExpiredAt(uint64_t now_ms) const {
    return expires_at_ms != 0 && expires_at_ms <= now_ms;
  }
};

// Header + name + value in one new buffer (one copy of the value), in
// `memory` when given and it has room (the hot tier's memory), else on the heap.
// REQUIRES: name.size() <= kMaxValueNameBytes.
SharedBytes EncodeValueRecord(std::string_view name, uint64_t expires_at_ms,
                              const SharedBytes& value,
                              const std::shared_ptr<MemoryResource>& memory = nullptr);
// The record `payload` holds, checked to be the record of `key` (the name
// hashes to it); Corruption otherwise. `payload` must outlive the views.
StatusOr<ValueRecord> DecodeValueRecord(const SharedBytes& payload, const BlockKey& key);

}  // namespace prefixkv::internal
