// Store-side block construction (block_builder.h): checks a store's layer
// caches against the namespace layout (CheckStoreLayers: layer count, each
// layer's family, dtype and token length), then cuts them into one record per
// block. A block's sliceable layers are not sliced here: the draft names the
// token rows it holds and the encoder copies just those rows into the record
// (EncodeBlockRows), so a store copies each byte once whatever the layout
// (docs/architecture.md, "A store, hop by hop"). Tip-only layers
// (sliding windows, recurrent state) are kept whole only in the tip and
// replaced by placeholders elsewhere, since their state is valid at one
// position only. A layer that does not fit is InvalidArgument naming the layer.
#include "block_builder.h"

#include <charconv>
#include <optional>
#include <string>

#include "block_validation.h"

namespace prefixkv::cache {
namespace {

std::string LayerName(size_t i) { return "layer " + std::to_string(i); }

// Quantized layers pack their own element types; plain KV must use the
// namespace dtype.
Status CheckSliceable(const LayerState& layer, CacheFamily family, DType dtype,
                      size_t token_count, size_t i) {
  if (layer.placeholder || layer.tensors.empty()) {
    return Status::InvalidArgument(LayerName(i) +
                                   ": a sliceable layer needs its tensors");
  }
  for (const Tensor& t : layer.tensors) {
    if (t.ndim() < 2 || t.dim(TokenAxis(t)) != static_cast<int64_t>(token_count)) {
      return Status::InvalidArgument(LayerName(i) + ": tensor " + t.DebugString() +
                                     " has not " + std::to_string(token_count) +
                                     " tokens on axis ndim-2");
    }
    if (family == CacheFamily::kSliceableKV && t.dtype() != dtype) {
      return Status::InvalidArgument(
          LayerName(i) + ": dtype " + std::string(DTypeName(t.dtype())) +
          " is not the namespace dtype " + std::string(DTypeName(dtype)));
    }
  }
  return Status::OK();
}

Status CheckTipOnly(const LayerState& layer, CacheFamily family, DType dtype,
                    size_t token_count, size_t i) {
  if (layer.placeholder) {
    return Status::InvalidArgument(LayerName(i) +
                                   ": a store needs the real state, not a placeholder");
  }
  // A real window or recurrent state holds what the tokens left: without
  // tensors it is no state, yet it would be the real tip a restore hands back.
  if (family != CacheFamily::kComposite && layer.tensors.empty()) {
    return Status::InvalidArgument(LayerName(i) + ": a real " +
                                   std::string(CacheFamilyName(family)) +
                                   " state needs its tensors");
  }
  if (family != CacheFamily::kRotating) return Status::OK();
  StatusOr<RotatingMeta> meta = RotatingMeta::Parse(layer.meta);
  if (!meta.ok()) return meta.status().WithContext(LayerName(i));
  if (meta->offset != static_cast<int64_t>(token_count)) {
    return Status::InvalidArgument(
        LayerName(i) + ": rotating offset " + std::to_string(meta->offset) +
        " != " + std::to_string(token_count) + " stored tokens");
  }
  // A restore refuses a window of another dtype (block_validation.cc): stored,
  // it would be a real tip later stores of the same tokens keep, never served.
  for (const Tensor& t : layer.tensors) {
    if (t.dtype() != dtype) {
      return Status::InvalidArgument(
          LayerName(i) + ": rotating dtype " + std::string(DTypeName(t.dtype())) +
          " is not the namespace dtype " + std::string(DTypeName(dtype)));
    }
  }
  return Status::OK();
}

// `s` as a non-negative integer, if it is one.
std::optional<uint64_t> ParseCount(const std::string& s) {
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

// Where a sliceable layer's meta holds its offset (the tokens it holds), or
// nullopt. A KVCache-style meta is exactly that integer. A quantized layer's
// is mlx-lm's QuantizedKVCache (offset, group_size, bits) or mlx-swift-lm's
// (step, offset, group_size, bits); taken as such only when that element is
// the store's length, so a meta of another form is left alone.
std::optional<size_t> OffsetIndex(const std::vector<std::string>& meta,
                                  CacheFamily family, size_t token_count) {
  if (meta.size() == 1 && ParseCount(meta[0])) return 0;
  if (family != CacheFamily::kQuantizedKV || (meta.size() != 3 && meta.size() != 4))
    return std::nullopt;
  const size_t i = meta.size() == 3 ? 0 : 1;
  if (ParseCount(meta[i]) != std::optional<uint64_t>(token_count)) return std::nullopt;
  return i;
}

// The layer of a block whose tensors are rows [start, start + length) of
// `layer`'s (the encoder takes the rows): its meta's offset names the
// block's end, so a restore that ends at this block says its own length.
LayerState BlockLayer(const LayerState& layer, CacheFamily family, size_t token_count,
                      int64_t start, int64_t length) {
  LayerState out = layer;
  if (std::optional<size_t> i = OffsetIndex(out.meta, family, token_count))
    out.meta[*i] = std::to_string(start + length);
  return out;
}

}  // namespace

Status CheckStoreLayers(const cache::NamespaceState& ns, size_t token_count,
                        const std::vector<LayerState>& layers, bool* other_shapes) {
  if (layers.size() != ns.families.size()) {
    return Status::InvalidArgument("store has " + std::to_string(layers.size()) +
                                   " layers, namespace has " +
                                   std::to_string(ns.families.size()));
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    StatusOr<CacheFamily> family = CacheTypeRegistry::Lookup(layers[i].cache_type);
    if (!family.ok()) return family.status().WithContext(LayerName(i));
    if (*family != ns.families[i]) {
      return Status::InvalidArgument(LayerName(i) + ": type " + layers[i].cache_type +
                                     " is not of the namespace's family " +
                                     std::string(CacheFamilyName(ns.families[i])));
    }
    PKV_RETURN_IF_ERROR(
        IsSliceable(*family)
            ? CheckSliceable(layers[i], *family, ns.spec.dtype, token_count, i)
            : CheckTipOnly(layers[i], *family, ns.spec.dtype, token_count, i));
  }
  // A namespace adopted from before its shapes were keyed serves only its
  // spec's shapes (block_validation.cc): blocks of others would never restore.
  // In any spec with shapes, a window or recurrent state of others would be
  // the real tip a restore hands back in the spec's name, and plain KV of
  // others the chain's first block every later store of its tokens keeps.
  BlockRecord as_stored;
  as_stored.layers = layers;  // the tensors share their bytes
  Status shapes = CheckStoredShapes(ns, as_stored);
  if (!shapes.ok() && other_shapes != nullptr) *other_shapes = true;
  return shapes;
}

BlockDraft BuildBlock(const cache::NamespaceState& ns, std::span<const int32_t> tokens,
                      const std::vector<LayerState>& layers, const PlannedBlock& block,
                      bool with_tip_state) {
  const int64_t start = static_cast<int64_t>(block.start);
  const int64_t count = block.count;
  BlockDraft draft;
  BlockRecord& rec = draft.record;
  rec.key = block.key;
  rec.parent = block.parent;
  rec.namespace_id = ns.root;
  rec.token_count = block.count;
  rec.partial = block.count < ns.spec.block_tokens;
  rec.tokens.assign(tokens.begin() + start, tokens.begin() + start + count);
  rec.layers.reserve(layers.size());
  draft.rows.resize(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    if (IsSliceable(ns.families[i])) {
      rec.layers.push_back(
          BlockLayer(layers[i], ns.families[i], tokens.size(), start, count));
      draft.rows[i] = TokenRows{start, count};
    } else if (with_tip_state) {
      rec.layers.push_back(layers[i]);
    } else {
      rec.layers.push_back(MakePlaceholder(layers[i].cache_type));
    }
  }
  return draft;
}

bool StripTipState(const std::vector<CacheFamily>& families, BlockRecord* record) {
  bool stripped = false;
  for (size_t i = 0; i < record->layers.size() && i < families.size(); ++i) {
    LayerState& layer = record->layers[i];
    if (IsTipOnly(families[i]) && !layer.placeholder) {
      layer = MakePlaceholder(layer.cache_type);
      stripped = true;
    }
  }
  return stripped;
}

bool HasRealTipState(const std::vector<CacheFamily>& families,
                     const BlockRecord& record) {
  for (size_t i = 0; i < record.layers.size() && i < families.size(); ++i) {
    if (IsTipOnly(families[i]) && record.layers[i].placeholder) return false;
  }
  return true;
}

}  // namespace prefixkv::cache
