// Namespace fingerprints (NamespaceSpec) and namespace roots. The chain
// hashing itself lives with the other base types (storage/base/chain_key.cc).
// The fields added after `salt` are appended only when set: an old spec keeps
// its fingerprint, so old data directories keep their keys (docs/format.md).
#include "prefixkv/namespace_spec.h"

#include "prefixkv/block_key.h"

namespace prefixkv {
namespace {

bool HasSeparator(const std::string& s) {
  return s.find_first_of("|\n") != std::string::npos;
}

Status CheckParallel(const char* what, uint32_t rank, uint32_t size) {
  if (size <= 1 ? rank == 0 : rank < size) return Status::OK();
  return Status::InvalidArgument(std::string(what) + " rank " + std::to_string(rank) +
                                 " is outside its size " + std::to_string(size));
}

Status CheckSpec(const NamespaceSpec& s) {
  if (s.model.empty()) return Status::InvalidArgument("namespace needs a model name");
  for (const std::string* f :
       {&s.model, &s.salt, &s.revision, &s.tokenizer_hash, &s.quantization}) {
    if (HasSeparator(*f)) {
      return Status::InvalidArgument(
          "model, salt, revision, tokenizer hash and quantization may not contain '|' "
          "or newlines");
    }
  }
  if (s.block_tokens == 0) return Status::InvalidArgument("block_tokens must be > 0");
  if (s.layer_types.empty()) return Status::InvalidArgument("namespace needs layers");
  if (!s.layer_shapes.empty() && s.layer_shapes.size() != s.layer_types.size()) {
    return Status::InvalidArgument(
        "layer_shapes has " + std::to_string(s.layer_shapes.size()) + " entries for " +
        std::to_string(s.layer_types.size()) + " layers");
  }
  PKV_RETURN_IF_ERROR(CheckParallel("tensor-parallel", s.tp_rank, s.tp_size));
  return CheckParallel("pipeline-parallel", s.pp_rank, s.pp_size);
}

std::string Parallel(uint32_t rank, uint32_t size) {
  return std::to_string(rank) + "/" + std::to_string(size);
}

// The later fields, each only when set.
std::string LaterFields(const NamespaceSpec& s) {
  std::string out;
  if (!s.revision.empty()) out += "|rev=" + s.revision;
  if (!s.tokenizer_hash.empty()) out += "|tokenizer=" + s.tokenizer_hash;
  if (!s.layer_shapes.empty()) {
    out += "|shapes=";
    for (size_t i = 0; i < s.layer_shapes.size(); ++i) {
      out += (i > 0 ? "," : "") + s.layer_shapes[i].ToString();
    }
  }
  if (!s.quantization.empty()) out += "|quant=" + s.quantization;
  if (s.tp_size > 1) out += "|tp=" + Parallel(s.tp_rank, s.tp_size);
  if (s.pp_size > 1) out += "|pp=" + Parallel(s.pp_rank, s.pp_size);
  return out;
}

}  // namespace

std::string LayerShape::ToString() const {
  std::string out = std::to_string(kv_heads) + "x" + std::to_string(head_dim);
  if (window_tokens > 0) out += "w" + std::to_string(window_tokens);
  if (conv_tokens > 0 || channels > 0 || state_heads > 0 || state_dim > 0) {
    out += "r" + std::to_string(conv_tokens) + "x" + std::to_string(channels) + ":" +
           std::to_string(state_heads) + "x" + std::to_string(state_dim);
  }
  return out;
}

StatusOr<std::string> NamespaceSpec::Fingerprint() const {
  PKV_RETURN_IF_ERROR(CheckSpec(*this));
  std::string sig;
  for (const std::string& t : layer_types) {
    StatusOr<CacheFamily> f = CacheTypeRegistry::Lookup(t);
    if (!f.ok()) return Status::InvalidArgument(f.status().message());
    sig += CacheFamilyLetter(*f);
  }
  return "prefixkv/v1|model=" + model + "|layers=" + std::to_string(layer_types.size()) +
         "|block=" + std::to_string(block_tokens) +
         "|dtype=" + std::string(DTypeName(dtype)) + "|layout=" + sig + "|salt=" + salt +
         LaterFields(*this);
}

StatusOr<BlockKey> NamespaceRoot(const NamespaceSpec& spec) {
  PKV_ASSIGN_OR_RETURN(std::string fp, spec.Fingerprint());
  return NamespaceRootFromFingerprint(fp);
}

}  // namespace prefixkv
