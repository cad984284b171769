// Namespace fingerprints and XXH3-128 chain keys.
#include "prefixkv/block_key.h"

#include <bit>
#include <cstring>

#include "prefixkv/cache_types.h"
#include "storage/xxh.h"

namespace prefixkv {
namespace {

BlockKey FromXXH(XXH128_hash_t h) { return BlockKey{h.high64, h.low64}; }

bool HasSeparator(const std::string& s) {
  return s.find_first_of("|\n") != std::string::npos;
}

// One-shot hashing needs the parent and tokens contiguous; small blocks are
// assembled on the stack (a 1 KiB copy is ~5% of hashing it), larger ones stream.
constexpr size_t kStackBytes = 16 + 4 * 2048;

}  // namespace

StatusOr<std::string> NamespaceSpec::Fingerprint() const {
  if (model.empty()) return Status::InvalidArgument("namespace needs a model name");
  if (HasSeparator(model) || HasSeparator(salt)) {
    return Status::InvalidArgument("model and salt may not contain '|' or newlines");
  }
  if (block_tokens == 0) return Status::InvalidArgument("block_tokens must be > 0");
  if (layer_types.empty()) return Status::InvalidArgument("namespace needs layers");
  std::string sig;
  for (const std::string& t : layer_types) {
    PKV_ASSIGN_OR_RETURN(CacheFamily f, CacheTypeRegistry::Lookup(t));
    sig += CacheFamilyLetter(f);
  }
  return "prefixkv/v1|model=" + model + "|layers=" + std::to_string(layer_types.size()) +
         "|block=" + std::to_string(block_tokens) +
         "|dtype=" + std::string(DTypeName(dtype)) + "|layout=" + sig + "|salt=" + salt;
}

BlockKey NamespaceRootFromFingerprint(std::string_view fingerprint) {
  return FromXXH(XXH3_128bits(fingerprint.data(), fingerprint.size()));
}

StatusOr<BlockKey> NamespaceRoot(const NamespaceSpec& spec) {
  PKV_ASSIGN_OR_RETURN(std::string fp, spec.Fingerprint());
  return NamespaceRootFromFingerprint(fp);
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
    return FromXXH(XXH3_128bits(buf, 16 + token_bytes));
  }
  XXH3_state_t state;
  XXH3_128bits_reset(&state);
  uint8_t pk[16];
  parent.EncodeTo(pk);
  XXH3_128bits_update(&state, pk, sizeof(pk));
  XXH3_128bits_update(&state, tokens.data(), token_bytes);
  for (const std::string& e : extra_keys) {
    uint8_t len[4];
    for (int i = 0; i < 4; ++i) len[i] = static_cast<uint8_t>(e.size() >> (8 * i));
    XXH3_128bits_update(&state, len, sizeof(len));
    XXH3_128bits_update(&state, e.data(), e.size());
  }
  return FromXXH(XXH3_128bits_digest(&state));
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
