// Chain keys (block_key.h): a block's key is XXH3-128 of its parent's key, its
// tokens and any extra keys, and a namespace's root is XXH3-128 of its
// fingerprint. Chaining through the parent makes a key name the whole prefix,
// not just the block's tokens, so equal keys mean equal prefixes (up to a 128-bit
// collision). Small blocks are hashed in one shot from a stack buffer, larger
// ones streamed.
#include <bit>
#include <cstring>

#include "prefixkv/advanced/hash.h"
#include "prefixkv/block_key.h"

namespace prefixkv {
namespace {

// One-shot hashing needs the parent and tokens contiguous; small blocks are
// assembled on the stack (a 1 KiB copy is ~5% of hashing it), larger ones stream.
constexpr size_t kStackBytes = 16 + 4 * 2048;

}  // namespace

BlockKey NamespaceRootFromFingerprint(std::string_view fingerprint) {
  return Hash128(fingerprint.data(), fingerprint.size());
}

BlockKey ChainKey(const BlockKey& parent, std::span<const int32_t> tokens,
                  std::span<const std::string> extra_keys) {
  static_assert(std::endian::native == std::endian::little,
                "token bytes are hashed in memory order");
  const size_t token_bytes = tokens.size() * sizeof(int32_t);
  if (extra_keys.empty() && 16 + token_bytes <= kStackBytes) {
    alignas(16) uint8_t buf[kStackBytes];
    parent.EncodeTo(buf);
    if (token_bytes) std::memcpy(buf + 16, tokens.data(), token_bytes);
    return Hash128(buf, 16 + token_bytes);
  }
  HashStream state(HashStream::Width::k128);
  uint8_t pk[16];
  parent.EncodeTo(pk);
  state.Update(pk, sizeof(pk));
  state.Update(tokens.data(), token_bytes);
  for (const std::string& e : extra_keys) {
    uint8_t len[4];
    for (int i = 0; i < 4; ++i) len[i] = static_cast<uint8_t>(e.size() >> (8 * i));
    state.Update(len, sizeof(len));
    state.Update(e.data(), e.size());
  }
  return state.Digest128();
}

std::vector<BlockKey> ChainKeys(const BlockKey& root, std::span<const int32_t> tokens,
                                uint32_t block_tokens) {
  std::vector<BlockKey> keys;
  if (block_tokens == 0) return keys;
  keys.reserve(tokens.size() / block_tokens);
  BlockKey parent = root;
  for (size_t off = 0; off + block_tokens <= tokens.size(); off += block_tokens) {
    parent = ChainKey(parent, tokens.subspan(off, block_tokens));
    keys.push_back(parent);
  }
  return keys;
}

}  // namespace prefixkv
