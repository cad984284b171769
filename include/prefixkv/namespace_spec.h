// A model's namespace: what makes two models' caches incompatible
// (docs/format.md §1). Its fingerprint names the namespace; the fingerprint's
// XXH3-128 is the root of every chain key (block_key.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "prefixkv/block.h"
#include "prefixkv/block_key.h"
#include "prefixkv/status.h"

namespace prefixkv {

// The tensor shape of one layer's cache (NamespaceSpec::layer_shapes). Zero
// fields are part of the shape like any other value (a full-attention layer
// has window_tokens 0 and no recurrent state).
struct LayerShape {
  uint32_t kv_heads = 0;       // key/value heads
  uint32_t head_dim = 0;       // elements per head
  uint32_t window_tokens = 0;  // sliding window in tokens; 0: full attention
  uint32_t conv_tokens = 0;    // recurrent: convolution inputs kept
  uint32_t channels = 0;       // recurrent: width of one convolution input
  uint32_t state_heads = 0;    // recurrent: state heads
  uint32_t state_dim = 0;      // recurrent: each head's state is state_dim^2
  bool operator==(const LayerShape&) const = default;
  // "HxD" for attention, plus "wW" with a window, plus "rCxCH:SHxSD" with a
  // recurrent state: "8x128", "8x128w4096", "0x0r3x32:4x8".
  std::string ToString() const;
};

// What makes two models' caches incompatible. Two specs with different
// fingerprints never share a key. The fields after `salt` were added later
// (docs/format.md §1): each enters the fingerprint only when set, so a spec
// that leaves them unset keeps the fingerprint it always had.
struct NamespaceSpec {
  std::string model;                     // model identity, e.g. "llama-3-8b"; no '|'
  uint32_t block_tokens = 256;           // tokens per block, > 0
  DType dtype = DType::kFloat16;         // cache element type
  std::vector<std::string> layer_types;  // cache type name per layer (registry names)
  std::string salt;                      // optional tenant salt; no '|'
  std::string revision;        // model revision (commit, tag); empty: unset; no '|'
  std::string tokenizer_hash;  // the caller's hash of its tokenizer; empty: unset
  // Empty: unset; else one per layer (layer_types.size() entries).
  std::vector<LayerShape> layer_shapes;
  std::string quantization;  // e.g. "int8/group64"; empty: unquantized/unset
  // Tensor- and pipeline-parallel position: size 0 or 1 is unsharded (unset;
  // the rank must be 0), else rank < size.
  uint32_t tp_rank = 0, tp_size = 0;
  uint32_t pp_rank = 0, pp_size = 0;

  // "prefixkv/v1|model=M|layers=N|block=B|dtype=D|layout=SIG|salt=S", where SIG
  // has one family letter per layer (K Q R A C, see cache_types.h), followed by
  // each set later field in this order: "|rev=R", "|tokenizer=T",
  // "|shapes=S0,S1,..." (LayerShape::ToString), "|quant=Q", "|tp=R/S",
  // "|pp=R/S". InvalidArgument for an empty model, block_tokens 0, no layers,
  // a '|' or a newline in a string field, an unknown cache type, a shape list
  // of the wrong length, or a rank outside its size.
  StatusOr<std::string> Fingerprint() const;
};

// XXH3-128 of the fingerprint (NamespaceRootFromFingerprint).
StatusOr<BlockKey> NamespaceRoot(const NamespaceSpec& spec);

}  // namespace prefixkv
