// Block keys: deterministic, documented, versioned chain hashes (docs/format.md §1).
//
//   root   = XXH3-128(namespace fingerprint string)
//   key(i) = XXH3-128(key(i-1) as 16 bytes LE || tokens as int32 LE ||
//                     for each extra key: u32 LE length || bytes)
//
// The same tokens give the same keys in every process and after every restart;
// docs/format.md publishes test vectors that tests/core/block_key_test.cc checks.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "prefixkv/block.h"
#include "prefixkv/status.h"

namespace prefixkv {

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
