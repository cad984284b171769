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
#include <vector>

#include "prefixkv/block.h"
#include "prefixkv/status.h"

namespace prefixkv {

// What makes two models' caches incompatible. Two specs with different
// fingerprints never share a key.
struct NamespaceSpec {
  std::string model;                     // model identity, e.g. "llama-3-8b@rev"; no '|'
  uint32_t block_tokens = 256;           // tokens per block, > 0
  DType dtype = DType::kFloat16;         // cache element type
  std::vector<std::string> layer_types;  // cache type name per layer (registry names)
  std::string salt;                      // optional tenant salt; no '|'

  // "prefixkv/v1|model=M|layers=N|block=B|dtype=D|layout=SIG|salt=S", where SIG
  // has one family letter per layer (K Q R A C, see cache_types.h).
  // InvalidArgument for an empty model, block_tokens 0, no layers, a '|' or a
  // newline in model or salt, or an unknown cache type.
  StatusOr<std::string> Fingerprint() const;
};

// XXH3-128 of the fingerprint.
StatusOr<BlockKey> NamespaceRoot(const NamespaceSpec& spec);
BlockKey NamespaceRootFromFingerprint(std::string_view fingerprint);

// key(i) from key(i-1) and this block's tokens and extra keys.
BlockKey ChainKey(const BlockKey& parent, std::span<const int32_t> tokens,
                  std::span<const std::string> extra_keys = {});

// Keys of every full block of `tokens` (a trailing partial block gets none).
std::vector<BlockKey> ChainKeys(const BlockKey& root, std::span<const int32_t> tokens,
                                uint32_t block_tokens);

}  // namespace prefixkv
