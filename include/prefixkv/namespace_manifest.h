// Namespace manifests: the spec a namespace was registered with, persisted
// beside its blocks (the SSD tier's metadata, docs/format.md §5), so a data
// directory says which model, revision, tokenizer, layer shapes, dtype,
// quantization, block size, parallel position and salt made its bytes, and a
// miss can name the field that separates a prompt's spec from a stored one.
//
// A manifest is text: a version line, then one "field=value" line per field:
//
//   prefixkv-manifest/1
//   fingerprint=prefixkv/v1|model=llama|layers=2|...
//   model=llama
//   ...
//
// Thread-safe: plain functions over values.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "prefixkv/block.h"
#include "prefixkv/block_key.h"
#include "prefixkv/namespace_spec.h"
#include "prefixkv/status.h"

namespace prefixkv {

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

// Parses a layer_shapes value: LayerShape::ToString per layer, comma-separated
// ("8x128,8x128w4096,0x0r3x32:4x8"). InvalidArgument naming the bad entry.
StatusOr<std::vector<LayerShape>> ParseLayerShapes(std::string_view text);

// Whether the tensors of a stored block fit `shapes` (one per layer): every
// layer that carries state has keys [..., kv_heads, tokens, head_dim] and, with
// a window, rotating meta of that window; a recurrent layer a conv ring of
// `channels` wide rows in a ring of `conv_tokens` and a state [..., state_heads,
// state_dim, state_dim]. Placeholders fit anything. InvalidArgument naming the
// first layer that does not fit, or a layer count other than shapes.size().
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
