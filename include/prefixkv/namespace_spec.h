// What a model's namespace is, in three parts.
//
// 1. Cache families. Every layer cache type name maps to a family (the
//    registry below), and everything that treats layers differently (store,
//    strip, restore, compatibility) asks for the family, never compares exact
//    names. Families (docs/format.md §2.2):
//      kSliceableKV  full-attention KV: every block holds its own token slice
//      kQuantizedKV  quantized full-attention KV: sliceable, with its own meta
//      kRotating     sliding-window state: valid at one position, tip-only
//      kArrays       recurrent/SSM state: tip-only
//      kComposite    a CacheList of sub-caches: handled as tip-only
//    An unknown name is an error (NotFound), never a silent default.
//
// 2. The spec: what makes two models' caches incompatible (docs/format.md
//    §1). Its fingerprint names the namespace; the fingerprint's XXH3-128 is
//    the root of every chain key (block_key.h).
//
// 3. Manifests: the spec a namespace was registered with, persisted beside
//    its blocks (the SSD tier's metadata, docs/format.md §5), so a data
//    directory says which model, revision, tokenizer, layer shapes, dtype,
//    quantization, block size, parallel position and salt made its bytes, and
//    a miss can name the field that separates a prompt's spec from a stored
//    one. A manifest is text: a version line, then one "field=value" line per
//    field:
//
//      prefixkv-manifest/1
//      fingerprint=prefixkv/v1|model=llama|layers=2|...
//      model=llama
//      ...
//
// Thread-safe: the registry's lookups and registrations may race; the rest
// are plain functions over values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "prefixkv/block.h"
#include "prefixkv/block_key.h"
#include "prefixkv/status.h"

namespace prefixkv {

// ---- 1. Cache families ------------------------------------------------------

enum class CacheFamily : uint8_t {
  kSliceableKV,
  kQuantizedKV,
  kRotating,
  kArrays,
  kComposite
};

std::string_view CacheFamilyName(CacheFamily family);
// One letter per family, used in namespace layout signatures: K Q R A C.
char CacheFamilyLetter(CacheFamily family);
// True for families whose blocks each carry their own token slice.
bool IsSliceable(CacheFamily family);
// True for families stored only in chain tips (placeholders elsewhere).
bool IsTipOnly(CacheFamily family);

// Thread-safe: lookups and registrations may race.
class CacheTypeRegistry {
 public:
  // The family of `type_name`; NotFound for a name nobody registered.
  static StatusOr<CacheFamily> Lookup(std::string_view type_name);
  // Adds or confirms a name. InvalidArgument when it is already registered with a
  // different family (a name never changes family).
  static Status Register(std::string_view type_name, CacheFamily family);
  // Family predicates; false for unknown names.
  static bool IsRotatingFamily(std::string_view type_name);
  static bool IsArraysFamily(std::string_view type_name);
  static bool IsSliceableFamily(std::string_view type_name);
  // Every registered name, sorted.
  static std::vector<std::string> Names();
};

// Meta state of a rotating layer: (keep, max_size, offset, idx).
//   keep      tokens at the window start that are never rotated out
//   max_size  the window length
//   offset    absolute position: tokens seen so far
//   idx       next write index inside the window buffer
struct RotatingMeta {
  int64_t keep = 0;
  int64_t max_size = 0;
  int64_t offset = 0;
  int64_t idx = 0;

  // Parses four decimal strings. InvalidArgument when there are not exactly four,
  // one is not a non-negative integer, max_size is 0, keep > max_size or
  // idx > max_size.
  static StatusOr<RotatingMeta> Parse(const std::vector<std::string>& meta);
  std::vector<std::string> ToStrings() const;
  // Tokens the window really holds: min(offset, max_size).
  int64_t FilledTokens() const { return offset < max_size ? offset : max_size; }
  bool operator==(const RotatingMeta&) const = default;
};

// ---- 2. The spec ------------------------------------------------------------

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
  // has one family letter per layer (K Q R A C, see part 1 above), followed by
  // each set later field in this order: "|rev=R", "|tokenizer=T",
  // "|shapes=S0,S1,..." (LayerShape::ToString), "|quant=Q", "|tp=R/S",
  // "|pp=R/S". InvalidArgument for an empty model, block_tokens 0, no layers,
  // a '|' or a newline in a string field, an unknown cache type, a shape list
  // of the wrong length, or a rank outside its size.
  StatusOr<std::string> Fingerprint() const;
};

// XXH3-128 of the fingerprint (NamespaceRootFromFingerprint).
StatusOr<BlockKey> NamespaceRoot(const NamespaceSpec& spec);

// ---- 3. Manifests -----------------------------------------------------------

inline constexpr std::string_view kManifestVersionLine = "prefixkv-manifest/1";

// A decoded manifest: the spec and the fingerprint it was stored with.
struct NamespaceManifest {
  NamespaceSpec spec;
  std::string fingerprint;  // as stored; its XXH3-128 is the namespace root
  // The layer shapes were recorded after the namespace's blocks had been
  // written under the fingerprint without them (a data directory from before
  // session namespaces keyed their shapes, docs/format.md §5 "Shapes recorded
  // later"): `fingerprint` is WithoutLayerShapes(spec)'s, and the namespace
  // serves exactly `spec.layer_shapes`.
  bool shapes_recorded_later = false;
};

// `spec` with its layer shapes unset: the spec whose fingerprint keys the
// blocks of a namespace written before its shapes were keyed.
NamespaceSpec WithoutLayerShapes(NamespaceSpec spec);

// The manifest of `spec`. InvalidArgument for a spec Fingerprint refuses or a
// layer type name with a ',' in it. With `shapes_recorded_later` (a spec with
// layer shapes): the fingerprint is WithoutLayerShapes(spec)'s and a last line
// "keys_without=layer_shapes" says so.
StatusOr<std::string> EncodeManifest(const NamespaceSpec& spec,
                                     bool shapes_recorded_later = false);
// NotSupported for another version line; Corruption for a missing, repeated
// or malformed field, or a fingerprint that does not match the fields (when
// this process knows every layer type of the manifest).
StatusOr<NamespaceManifest> DecodeManifest(std::string_view text);

// Sets the field `name` of `spec` (a manifest field name: model, revision,
// tokenizer_hash, block_tokens, dtype, layer_types, layer_shapes, quantization,
// tp, pp, salt) from `value` as a manifest writes it ("1/4" for tp, "" for an
// unset one). InvalidArgument for another name or a malformed value. What the
// CLI's, the server's and Python's spec options go through.
Status SetSpecField(NamespaceSpec* spec, const std::string& name, std::string_view value);

// The field (a SetSpecField name) a PKV.REGISTER option keyword sets: SALT,
// REVISION, TOKENIZER, SHAPES, QUANT, TP, PP, in any case; null for another
// word. What PKV.REGISTER and `prefixkv route --model` read.
const char* RegisterKeywordField(std::string_view keyword);

// Parses a layer_shapes value: LayerShape::ToString per layer, comma-separated
// ("8x128,8x128w4096,0x0r3x32:4x8"). InvalidArgument naming the bad entry.
StatusOr<std::vector<LayerShape>> ParseLayerShapes(std::string_view text);

// Whether the tensors of a stored block fit `shapes` (one per layer): every
// layer that carries state has keys [..., kv_heads, tokens, head_dim] ([tokens,
// head_dim]: one head), plain KV and windows values of as many heads (their
// head dim is not compared) and, with a window, rotating meta of that window; a
// recurrent layer a conv ring of `channels` wide rows in a ring of
// `conv_tokens` and a state [..., state_heads, state_dim, state_dim]; a
// quantized layer every tensor of kv_heads, its last dim head_dim packed by
// the (group_size, bits) that end its meta (mlx-lm's form: uint32 words of
// head_dim * bits / 32, else head_dim / group_size scales and biases).
// Placeholders fit anything. InvalidArgument naming the first layer that does
// not fit, or a layer count other than shapes.size().
Status CheckLayerShapes(const BlockRecord& record, const std::vector<LayerShape>& shapes);

// One field that gives two specs different fingerprints.
struct ManifestDifference {
  std::string field;  // "tokenizer hash", "layer 2 shape", "block tokens", ...
  std::string stored;
  std::string asked;
  // "tokenizer hash differs: stored abc, asked def" (an unset field reads "unset").
  std::string ToString() const;
};

// Every field in which `stored` and `asked` differ in what the fingerprint
// keys (layer types by family, so RotatingKVCache and
// PrefillReadyRotatingKVCache do not differ), in fingerprint order. Empty
// exactly when both fingerprints are equal (for valid specs).
std::vector<ManifestDifference> DiffSpecs(const NamespaceSpec& stored,
                                          const NamespaceSpec& asked);

// The fields of `spec` as (name, value) pairs in manifest order, values as
// the manifest writes them ("" for unset strings): what `prefixkv inspect`
// prints.
std::vector<std::pair<std::string, std::string>> ManifestFields(
    const NamespaceSpec& spec);

}  // namespace prefixkv
