// Namespace fingerprints (NamespaceSpec) and namespace roots. The chain
// hashing itself lives with the other base types (storage/base/chain_key.cc).
#include "prefixkv/block_key.h"
#include "prefixkv/cache_types.h"

namespace prefixkv {
namespace {

bool HasSeparator(const std::string& s) {
  return s.find_first_of("|\n") != std::string::npos;
}

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
    StatusOr<CacheFamily> f = CacheTypeRegistry::Lookup(t);
    if (!f.ok()) return Status::InvalidArgument(f.status().message());
    sig += CacheFamilyLetter(*f);
  }
  return "prefixkv/v1|model=" + model + "|layers=" + std::to_string(layer_types.size()) +
         "|block=" + std::to_string(block_tokens) +
         "|dtype=" + std::string(DTypeName(dtype)) + "|layout=" + sig + "|salt=" + salt;
}

StatusOr<BlockKey> NamespaceRoot(const NamespaceSpec& spec) {
  PKV_ASSIGN_OR_RETURN(std::string fp, spec.Fingerprint());
  return NamespaceRootFromFingerprint(fp);
}

}  // namespace prefixkv
