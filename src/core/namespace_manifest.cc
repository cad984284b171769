// Namespace manifests (namespace_spec.h, part 3): the text encoding of a
// NamespaceSpec, its decoding, and the field-by-field comparison that names
// why two specs are different namespaces. The format is docs/format.md §5.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <optional>

#include "prefixkv/namespace_spec.h"

namespace prefixkv {
namespace {

constexpr const char* kFieldNames[] = {"model",        "revision",     "tokenizer_hash",
                                       "block_tokens", "dtype",        "layer_types",
                                       "layer_shapes", "quantization", "tp",
                                       "pp",           "salt"};
// The optional last field of a manifest whose shapes were recorded later.
constexpr const char* kKeysWithout = "keys_without";

std::string Join(const std::vector<std::string>& parts) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i > 0 ? "," : "") + parts[i];
  return out;
}

std::vector<std::string> Split(std::string_view s, char sep) {
  std::vector<std::string> out;
  if (s.empty()) return out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == sep) {
      out.emplace_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

std::string ShapesText(const std::vector<LayerShape>& shapes) {
  std::vector<std::string> parts;
  for (const LayerShape& s : shapes) parts.push_back(s.ToString());
  return Join(parts);
}

// "" when never set (0/0), so a manifest and inspect read "unset".
std::string ParallelText(uint32_t rank, uint32_t size) {
  if (rank == 0 && size == 0) return "";
  return std::to_string(rank) + "/" + std::to_string(size);
}

// What the fingerprint keys of a parallel position: nothing when unsharded.
std::string ParallelKeyed(uint32_t rank, uint32_t size) {
  return size > 1 ? ParallelText(rank, size) : "";
}

// A small cursor over "12x34w5r1x2:3x4"-style text.
struct Scanner {
  std::string_view s;
  bool Number(uint32_t* v) {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
    if (ec != std::errc() || p == s.data()) return false;
    s.remove_prefix(static_cast<size_t>(p - s.data()));
    return true;
  }
  bool Take(char c) {
    if (s.empty() || s.front() != c) return false;
    s.remove_prefix(1);
    return true;
  }
};

bool ParseShape(std::string_view text, LayerShape* out) {
  Scanner sc{text};
  LayerShape s;
  if (!sc.Number(&s.kv_heads) || !sc.Take('x') || !sc.Number(&s.head_dim)) return false;
  if (sc.Take('w') && (!sc.Number(&s.window_tokens) || s.window_tokens == 0))
    return false;
  if (sc.Take('r') &&
      !(sc.Number(&s.conv_tokens) && sc.Take('x') && sc.Number(&s.channels) &&
        sc.Take(':') && sc.Number(&s.state_heads) && sc.Take('x') &&
        sc.Number(&s.state_dim))) {
    return false;
  }
  *out = s;
  return sc.s.empty() && s.ToString() == text;  // canonical text only
}

bool ParseParallel(std::string_view text, uint32_t* rank, uint32_t* size) {
  if (text.empty()) {
    *rank = *size = 0;
    return true;
  }
  Scanner sc{text};
  return sc.Number(rank) && sc.Take('/') && sc.Number(size) && sc.s.empty();
}

Status Malformed(const std::string& field, std::string_view value) {
  return Status::InvalidArgument("spec field " + field + " is malformed: '" +
                                 std::string(value) + "'");
}

}  // namespace

const char* RegisterKeywordField(std::string_view keyword) {
  static const std::pair<const char*, const char*> kKeywords[] = {
      {"salt", "salt"},
      {"revision", "revision"},
      {"tokenizer", "tokenizer_hash"},
      {"shapes", "layer_shapes"},
      {"quant", "quantization"},
      {"tp", "tp"},
      {"pp", "pp"}};
  const auto same = [](std::string_view a, std::string_view b) {
    return a.size() == b.size() &&
           std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
             return std::tolower(static_cast<unsigned char>(x)) ==
                    std::tolower(static_cast<unsigned char>(y));
           });
  };
  for (const auto& [word, field] : kKeywords) {
    if (same(keyword, word)) return field;
  }
  return nullptr;
}

Status SetSpecField(NamespaceSpec* spec, const std::string& name, std::string_view v) {
  if (name == "model") {
    spec->model = v;
  } else if (name == "revision") {
    spec->revision = v;
  } else if (name == "tokenizer_hash") {
    spec->tokenizer_hash = v;
  } else if (name == "block_tokens") {
    if (!Scanner{v}.Number(&spec->block_tokens) ||
        std::to_string(spec->block_tokens) != v)
      return Malformed(name, v);
  } else if (name == "dtype") {
    StatusOr<DType> d = ParseDType(v);
    if (!d.ok()) return Malformed(name, v);
    spec->dtype = *d;
  } else if (name == "layer_types") {
    spec->layer_types = Split(v, ',');
  } else if (name == "layer_shapes") {
    PKV_ASSIGN_OR_RETURN(spec->layer_shapes, ParseLayerShapes(v));
  } else if (name == "quantization") {
    spec->quantization = v;
  } else if (name == "tp") {
    if (!ParseParallel(v, &spec->tp_rank, &spec->tp_size)) return Malformed(name, v);
  } else if (name == "pp") {
    if (!ParseParallel(v, &spec->pp_rank, &spec->pp_size)) return Malformed(name, v);
  } else if (name == "salt") {
    spec->salt = v;
  } else {
    return Status::InvalidArgument("no spec field named " + name);
  }
  return Status::OK();
}

namespace {

// The family letter of a layer type, '?' for a name this process does not know.
char Letter(const std::string& type) {
  StatusOr<CacheFamily> f = CacheTypeRegistry::Lookup(type);
  return f.ok() ? CacheFamilyLetter(*f) : '?';
}

std::string TypeText(const std::string& type) {
  return type + " (" + std::string(1, Letter(type)) + ")";
}

void DiffLayers(const NamespaceSpec& a, const NamespaceSpec& b,
                std::vector<ManifestDifference>* out) {
  if (a.layer_types.size() != b.layer_types.size()) {
    out->push_back({"layer count", std::to_string(a.layer_types.size()),
                    std::to_string(b.layer_types.size())});
    return;
  }
  for (size_t i = 0; i < a.layer_types.size(); ++i) {
    const char la = Letter(a.layer_types[i]), lb = Letter(b.layer_types[i]);
    if (la != lb || (la == '?' && a.layer_types[i] != b.layer_types[i])) {
      out->push_back({"layer " + std::to_string(i) + " cache type",
                      TypeText(a.layer_types[i]), TypeText(b.layer_types[i])});
    }
  }
}

void DiffShapes(const NamespaceSpec& a, const NamespaceSpec& b,
                std::vector<ManifestDifference>* out) {
  const bool both_set = !a.layer_shapes.empty() && !b.layer_shapes.empty();
  if (both_set && a.layer_types.size() != b.layer_types.size()) return;  // layer count
  if (a.layer_shapes.size() != b.layer_shapes.size()) {
    out->push_back(
        {"layer shapes", ShapesText(a.layer_shapes), ShapesText(b.layer_shapes)});
    return;
  }
  for (size_t i = 0; i < a.layer_shapes.size(); ++i) {
    if (a.layer_shapes[i] != b.layer_shapes[i]) {
      out->push_back({"layer " + std::to_string(i) + " shape",
                      a.layer_shapes[i].ToString(), b.layer_shapes[i].ToString()});
    }
  }
}

}  // namespace

StatusOr<std::vector<LayerShape>> ParseLayerShapes(std::string_view text) {
  std::vector<LayerShape> out;
  for (const std::string& part : Split(text, ',')) {
    if (!ParseShape(part, &out.emplace_back())) {
      return Status::InvalidArgument("layer shape '" + part +
                                     "' is not HxD[wW][rCxCH:SHxSD] (e.g. 8x128w4096)");
    }
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> ManifestFields(
    const NamespaceSpec& spec) {
  const std::string values[] = {spec.model,
                                spec.revision,
                                spec.tokenizer_hash,
                                std::to_string(spec.block_tokens),
                                std::string(DTypeName(spec.dtype)),
                                Join(spec.layer_types),
                                ShapesText(spec.layer_shapes),
                                spec.quantization,
                                ParallelText(spec.tp_rank, spec.tp_size),
                                ParallelText(spec.pp_rank, spec.pp_size),
                                spec.salt};
  std::vector<std::pair<std::string, std::string>> out;
  for (size_t i = 0; i < std::size(kFieldNames); ++i)
    out.emplace_back(kFieldNames[i], values[i]);
  return out;
}

NamespaceSpec WithoutLayerShapes(NamespaceSpec spec) {
  spec.layer_shapes.clear();
  return spec;
}

StatusOr<std::string> EncodeManifest(const NamespaceSpec& spec,
                                     bool shapes_recorded_later) {
  if (shapes_recorded_later && spec.layer_shapes.empty())
    return Status::InvalidArgument("shapes recorded later need layer shapes");
  PKV_RETURN_IF_ERROR(spec.Fingerprint().status());
  PKV_ASSIGN_OR_RETURN(std::string fingerprint,
                       shapes_recorded_later ? WithoutLayerShapes(spec).Fingerprint()
                                             : spec.Fingerprint());
  for (const std::string& t : spec.layer_types) {
    if (t.find_first_of(",\n") != std::string::npos)
      return Status::InvalidArgument("layer type '" + t + "' has a ',' or a newline");
  }
  std::string out =
      std::string(kManifestVersionLine) + "\nfingerprint=" + fingerprint + "\n";
  for (const auto& [name, value] : ManifestFields(spec)) out += name + "=" + value + "\n";
  if (shapes_recorded_later) out += std::string(kKeysWithout) + "=layer_shapes\n";
  return out;
}

StatusOr<NamespaceManifest> DecodeManifest(std::string_view text) {
  std::vector<std::string> lines = Split(text, '\n');
  if (lines.empty() || lines.front() != kManifestVersionLine) {
    const std::string first = lines.empty() ? "" : lines.front();
    if (first.starts_with("prefixkv-manifest/"))
      return Status::NotSupported("manifest version " + first + " is not supported");
    return Status::Corruption("not a namespace manifest");
  }
  if (lines.back().empty()) lines.pop_back();  // the last line's newline
  std::map<std::string, std::string> fields;
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t eq = lines[i].find('=');
    if (eq == std::string::npos) return Status::Corruption("manifest line without '='");
    if (!fields.emplace(lines[i].substr(0, eq), lines[i].substr(eq + 1)).second)
      return Status::Corruption("manifest field " + lines[i].substr(0, eq) + " repeated");
  }
  NamespaceManifest m;
  auto fp = fields.find("fingerprint");
  if (fp == fields.end()) return Status::Corruption("manifest has no fingerprint");
  m.fingerprint = fp->second;
  for (const char* name : kFieldNames) {
    auto it = fields.find(name);
    if (it == fields.end())
      return Status::Corruption(std::string("manifest has no ") + name);
    if (Status set = SetSpecField(&m.spec, name, it->second); !set.ok()) {
      return Status::Corruption("manifest: " + set.message());
    }
  }
  size_t known_fields = std::size(kFieldNames) + 1;
  if (auto later = fields.find(kKeysWithout); later != fields.end()) {
    if (later->second != "layer_shapes" || m.spec.layer_shapes.empty())
      return Status::Corruption("manifest: keys_without=" + later->second);
    m.shapes_recorded_later = true;
    ++known_fields;
  }
  if (fields.size() != known_fields)
    return Status::Corruption("manifest has unknown fields");
  StatusOr<std::string> recomputed = m.shapes_recorded_later
                                         ? WithoutLayerShapes(m.spec).Fingerprint()
                                         : m.spec.Fingerprint();
  bool known_types = true;
  for (const std::string& t : m.spec.layer_types)
    known_types = known_types && Letter(t) != '?';
  if (known_types && (!recomputed.ok() || *recomputed != m.fingerprint)) {
    return Status::Corruption("manifest fields do not give its fingerprint " +
                              m.fingerprint);
  }
  return m;
}

std::string ManifestDifference::ToString() const {
  return field + " differs: stored " + (stored.empty() ? "unset" : stored) + ", asked " +
         (asked.empty() ? "unset" : asked);
}

std::vector<ManifestDifference> DiffSpecs(const NamespaceSpec& a,
                                          const NamespaceSpec& b) {
  std::vector<ManifestDifference> out;
  auto field = [&](const char* name, const std::string& x, const std::string& y) {
    if (x != y) out.push_back({name, x, y});
  };
  field("model", a.model, b.model);
  DiffLayers(a, b, &out);
  field("block tokens", std::to_string(a.block_tokens), std::to_string(b.block_tokens));
  field("dtype", std::string(DTypeName(a.dtype)), std::string(DTypeName(b.dtype)));
  field("salt", a.salt, b.salt);
  field("revision", a.revision, b.revision);
  field("tokenizer hash", a.tokenizer_hash, b.tokenizer_hash);
  DiffShapes(a, b, &out);
  field("quantization", a.quantization, b.quantization);
  field("tensor-parallel rank/size", ParallelKeyed(a.tp_rank, a.tp_size),
        ParallelKeyed(b.tp_rank, b.tp_size));
  field("pipeline-parallel rank/size", ParallelKeyed(a.pp_rank, a.pp_size),
        ParallelKeyed(b.pp_rank, b.pp_size));
  return out;
}

}  // namespace prefixkv

namespace prefixkv {
namespace {

// The last `n` dims of `t` ("" when it has fewer): what a shape check compares.
std::string LastDims(const Tensor& t, size_t n) {
  if (t.ndim() < n) return "";
  std::string out;
  for (size_t i = t.ndim() - n; i < t.ndim(); ++i)
    out += (out.empty() ? "" : "x") + std::to_string(t.dim(i));
  return out;
}

// The ring size of a layer's rotating meta; 0 without one.
uint32_t RingSize(const LayerState& layer) {
  StatusOr<RotatingMeta> meta = RotatingMeta::Parse(layer.meta);
  return meta.ok() ? static_cast<uint32_t>(meta->max_size) : 0;
}

// A recurrent layer's state [..., heads, dim, dim] as "HEADSxDIM"; a state
// whose last two dimensions differ keeps all three ("4x8x6"), which no
// LayerShape writes: each head's state is dim x dim, and comparing the heads
// and the first dim alone took a 4 x 8 x 6 state for a 4 x 8 x 8 one.
std::string StateShape(const LayerState& layer) {
  if (layer.tensors.size() < 2) return "";
  const Tensor& state = layer.tensors[1];
  const std::string dims = LastDims(state, 3);
  const bool square =
      state.ndim() >= 2 && state.dim(state.ndim() - 1) == state.dim(state.ndim() - 2);
  return square && !dims.empty() ? dims.substr(0, dims.rfind('x')) : dims;
}

// A KV tensor's heads: the axis before the token axis (ndim - 2); [tokens,
// dim] is one head's.
int64_t KvHeads(const Tensor& t) { return t.ndim() >= 3 ? t.dim(t.ndim() - 3) : 1; }

// `s` as a positive integer below 2^32, if it is one.
std::optional<uint64_t> PositiveCount(const std::string& s) {
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size() || v == 0 ||
      v >= (uint64_t{1} << 32)) {
    return std::nullopt;
  }
  return v;
}

// A quantized layer packs its head dim: mlx-lm's QuantizedKVCache (and
// mlx-swift-lm's) keeps every tensor [..., heads, tokens, X], words of
// `bits`-bit values in uint32 (X = head_dim * bits / 32) and a scale and a
// bias per `group` values (X = head_dim / group), with (group_size, bits) the
// last two entries of its meta in both forms ((offset, group_size, bits),
// (step, offset, group_size, bits)). Written as "HEADSxDIM" when every tensor
// packs `asked`'s head dim so; else what it holds ("2x? (1 by group 2, bits
// 8)"): the packed sizes alone would take a model of head dim 4, 8 bits and
// group 2 for one of 8, 4 bits and group 4 (the same sizes).
std::string QuantizedShape(const LayerState& layer, const LayerShape& asked) {
  const int64_t heads = KvHeads(layer.tensors[0]);
  for (const Tensor& t : layer.tensors) {
    if (KvHeads(t) != heads)
      return std::to_string(heads) + "x? with tensors of other heads";
  }
  const size_t n = layer.meta.size();
  const std::string prefix = std::to_string(heads) + "x";
  const std::optional<uint64_t> group_or =
      n >= 3 ? PositiveCount(layer.meta[n - 2]) : std::nullopt;
  const std::optional<uint64_t> bits_or =
      n >= 3 ? PositiveCount(layer.meta[n - 1]) : std::nullopt;
  if (!group_or.has_value() || !bits_or.has_value())
    return prefix + "? (no group size and bits in its meta)";
  const uint64_t group = group_or.value(), bits = bits_or.value();
  const uint64_t dim = asked.head_dim;
  bool fits = bits <= 32 && dim * bits % 32 == 0 && dim % group == 0;
  for (const Tensor& t : layer.tensors) {
    const uint64_t packed = t.dtype() == DType::kUInt32 ? dim * bits / 32 : dim / group;
    fits = fits && t.ndim() >= 2 && static_cast<uint64_t>(t.dim(t.ndim() - 1)) == packed;
  }
  if (fits) return prefix + std::to_string(dim);
  return prefix + "? (" + LastDims(layer.tensors[0], 1) + " by group " +
         std::to_string(group) + ", bits " + std::to_string(bits) + ")";
}

// What `layer` holds, written as LayerShape::ToString writes the shape it
// must equal.
std::string StoredShape(const LayerState& layer, const LayerShape& asked) {
  const bool recurrent = asked.channels > 0 || asked.state_dim > 0;
  const Tensor& keys = layer.tensors[0];
  const StatusOr<CacheFamily> family = CacheTypeRegistry::Lookup(layer.cache_type);
  if (!recurrent && family.ok() && *family == CacheFamily::kQuantizedKV)
    return QuantizedShape(layer, asked);
  if (!recurrent) {
    // Keys [tokens, head_dim] (a latent cache) are one head's.
    const std::string kv =
        keys.ndim() == 2 ? "1x" + LastDims(keys, 2) : LastDims(keys, 3);
    const size_t x = kv.find('x');
    const std::string heads_dim =
        x == std::string::npos ? kv
                               : kv.substr(0, x) + "x" + kv.substr(kv.rfind('x') + 1);
    const uint32_t ring =
        CacheTypeRegistry::IsRotatingFamily(layer.cache_type) ? RingSize(layer) : 0;
    const std::string shape = heads_dim + (ring > 0 ? "w" + std::to_string(ring) : "");
    // The values (every later tensor of plain KV or a window) may have
    // another head dim (a latent cache's), never other heads than the keys:
    // such a layer is no shape a LayerShape writes. A composite layer's later
    // tensors are its other caches', not values.
    const bool values = family.ok() && (*family == CacheFamily::kSliceableKV ||
                                        *family == CacheFamily::kRotating);
    for (size_t t = 1; values && t < layer.tensors.size(); ++t) {
      if (KvHeads(layer.tensors[t]) != KvHeads(keys)) {
        return shape + " with values of " + std::to_string(KvHeads(layer.tensors[t])) +
               " heads";
      }
    }
    return shape;
  }
  return "0x0r" + std::to_string(RingSize(layer)) + "x" + LastDims(keys, 1) + ":" +
         StateShape(layer);
}

}  // namespace

Status CheckLayerShapes(const BlockRecord& record,
                        const std::vector<LayerShape>& shapes) {
  if (record.layers.size() != shapes.size()) {
    return Status::InvalidArgument("the block has " +
                                   std::to_string(record.layers.size()) +
                                   " layers, not " + std::to_string(shapes.size()));
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    const LayerState& layer = record.layers[i];
    if (layer.placeholder || layer.tensors.empty()) continue;
    const std::string stored = StoredShape(layer, shapes[i]);
    if (stored != shapes[i].ToString()) {
      return Status::InvalidArgument("layer " + std::to_string(i) + " holds " + stored +
                                     ", not " + shapes[i].ToString());
    }
  }
  return Status::OK();
}

}  // namespace prefixkv
