// Restore-side block validation (block_validation.h): a block read back must
// fit the namespace layout (layer count, cache families, shapes and dtypes) and
// the chain position it was matched at before any of its bytes are served. The
// codec has already checked the bytes; this checks their meaning, so a block
// from another layout or a stale position is Corruption naming the layer,
// never KV of the wrong shape handed to a model.
#include "block_validation.h"

#include <algorithm>
#include <string>

#include "block_builder.h"
#include "block_io.h"
#include "prefixkv/advanced/mutex.h"

namespace prefixkv::cache {
namespace {

Status Bad(size_t layer, const std::string& what) {
  return Status::Corruption("layer " + std::to_string(layer) + ": " + what);
}

bool SameShapeExceptTokens(const Tensor& a, const Tensor& b) {
  if (a.ndim() != b.ndim() || a.dtype() != b.dtype()) return false;
  for (size_t d = 0; d < a.ndim(); ++d) {
    if (d != TokenAxis(a) && a.dim(d) != b.dim(d)) return false;
  }
  return true;
}

Status CheckSliceableLayer(const cache::NamespaceState& ns, size_t l,
                           const LayerState& layer, int64_t rows,
                           const LayerState* first) {
  if (layer.placeholder || layer.tensors.empty())
    return Bad(l, "sliceable layer without tensors");
  if (first != nullptr && first->tensors.size() != layer.tensors.size()) {
    return Bad(l, "tensor count differs from the first block");
  }
  for (size_t t = 0; t < layer.tensors.size(); ++t) {
    const Tensor& x = layer.tensors[t];
    if (x.ndim() < 2 || x.dim(TokenAxis(x)) != rows) {
      return Bad(l, "tensor " + x.DebugString() + " does not hold the block's tokens");
    }
    if (ns.families[l] == CacheFamily::kSliceableKV && x.dtype() != ns.spec.dtype) {
      return Bad(l, "dtype " + std::string(DTypeName(x.dtype())) +
                        " is not the namespace dtype");
    }
    if (first != nullptr && !SameShapeExceptTokens(x, first->tensors[t])) {
      return Bad(l, "tensor " + x.DebugString() + " does not match the first block's " +
                        first->tensors[t].DebugString());
    }
  }
  return Status::OK();
}

Status CheckTipOnlyLayer(const cache::NamespaceState& ns, size_t l,
                         const LayerState& layer, int64_t end_tokens) {
  if (layer.placeholder) {
    return layer.tensors.empty() ? Status::OK() : Bad(l, "placeholder with tensors");
  }
  if (ns.families[l] != CacheFamily::kComposite && layer.tensors.empty())
    return Bad(l, "real window or recurrent state without tensors");
  if (ns.families[l] != CacheFamily::kRotating) return Status::OK();
  StatusOr<RotatingMeta> meta = RotatingMeta::Parse(layer.meta);
  if (!meta.ok()) return Bad(l, meta.status().message());
  if (meta->offset != end_tokens) {
    return Bad(l, "rotating offset " + std::to_string(meta->offset) + " at block end " +
                      std::to_string(end_tokens));
  }
  for (const Tensor& x : layer.tensors) {
    if (x.dtype() != ns.spec.dtype) return Bad(l, "rotating tensor of another dtype");
  }
  return Status::OK();
}

Status CheckHeader(const cache::NamespaceState& ns, const BlockRecord& rec,
                   const BlockKey& parent, std::span<const int32_t> tokens) {
  if (rec.parent != parent)
    return Status::Corruption("parent link does not match the chain");
  if (rec.namespace_id != ns.root)
    return Status::Corruption("block of another namespace");
  const bool short_block = tokens.size() < ns.spec.block_tokens;
  if (rec.token_count != tokens.size() || rec.partial != short_block) {
    return Status::Corruption("holds " + std::to_string(rec.token_count) +
                              (rec.partial ? " tokens (partial)" : " tokens") +
                              ", matched " + std::to_string(tokens.size()));
  }
  if (!rec.tokens.empty() &&
      !std::equal(rec.tokens.begin(), rec.tokens.end(), tokens.begin(), tokens.end())) {
    return Status::Corruption("stored tokens differ from the prompt (hash collision?)");
  }
  if (rec.layers.size() != ns.families.size()) {
    return Status::Corruption(std::to_string(rec.layers.size()) +
                              " layers, namespace has " +
                              std::to_string(ns.families.size()));
  }
  return Status::OK();
}

Status CheckLayers(const cache::NamespaceState& ns, const BlockRecord& rec, size_t start,
                   size_t count, const BlockRecord* first) {
  const int64_t rows = static_cast<int64_t>(count);
  const int64_t end = static_cast<int64_t>(start) + rows;
  for (size_t l = 0; l < rec.layers.size(); ++l) {
    const LayerState& layer = rec.layers[l];
    StatusOr<CacheFamily> family = CacheTypeRegistry::Lookup(layer.cache_type);
    if (!family.ok()) return Bad(l, family.status().message());
    if (*family != ns.families[l]) {
      return Bad(l, "type " + layer.cache_type + " is not of family " +
                        std::string(CacheFamilyName(ns.families[l])));
    }
    PKV_RETURN_IF_ERROR(
        IsSliceable(*family)
            ? CheckSliceableLayer(ns, l, layer, rows,
                                  first != nullptr ? &first->layers[l] : nullptr)
            : CheckTipOnlyLayer(ns, l, layer, end));
  }
  return Status::OK();
}

// A quantized layer packs its head dim (words, scales) by its bits and group,
// which a LayerShape does not describe, but not its heads: every tensor has
// the spec's KV heads on the axis before the tokens ([tokens, words]: one).
Status CheckQuantizedHeads(const LayerState& layer, size_t l, const LayerShape& shape) {
  if (layer.placeholder) return Status::OK();
  for (const Tensor& t : layer.tensors) {
    const int64_t heads = TokenAxis(t) > 0 ? t.dim(TokenAxis(t) - 1) : 1;
    if (heads != shape.kv_heads) {
      return Status::InvalidArgument("layer " + std::to_string(l) +
                                     " holds quantized KV of " + std::to_string(heads) +
                                     " heads, not " + shape.ToString());
    }
  }
  return Status::OK();
}

// CheckLayerShapes against the spec, every layer in a namespace adopted from
// before its shapes were keyed, else every layer but a quantized one, whose
// heads alone are compared (CheckQuantizedHeads).
Status CompareWithSpecShapes(const cache::NamespaceState& ns, const BlockRecord& record) {
  const bool quantized = std::find(ns.families.begin(), ns.families.end(),
                                   CacheFamily::kQuantizedKV) != ns.families.end();
  if (ns.check_layer_shapes || !quantized)
    return CheckLayerShapes(record, ns.spec.layer_shapes);
  BlockRecord checked;
  checked.layers = record.layers;  // the tensors share their bytes
  for (size_t l = 0; l < checked.layers.size() && l < ns.families.size() &&
                     l < ns.spec.layer_shapes.size();
       ++l) {
    if (ns.families[l] != CacheFamily::kQuantizedKV) continue;
    PKV_RETURN_IF_ERROR(
        CheckQuantizedHeads(checked.layers[l], l, ns.spec.layer_shapes[l]));
    checked.layers[l] = MakePlaceholder(checked.layers[l].cache_type);
  }
  return CheckLayerShapes(checked, ns.spec.layer_shapes);
}

}  // namespace

Status ValidateBlock(const cache::NamespaceState& ns, const BlockRecord& rec,
                     size_t start, const BlockKey& parent,
                     std::span<const int32_t> tokens, const BlockRecord* first,
                     bool* other_shapes) {
  PKV_RETURN_IF_ERROR(CheckHeader(ns, rec, parent, tokens));
  const Status layout = CheckLayers(ns, rec, start, tokens.size(), first);
  // The spec's layer shapes, as a store compares them (CheckStoredShapes):
  // blocks of other shapes already in the tiers (stored before a store
  // compared them, by an older binary, or fetched from a node of one) were
  // served in the spec's name. Checked where nothing else compares them: the
  // restore's first block, which every later block's KV must equal, a real
  // tip's state, and a block whose layers disagree with the first block's.
  if (!ns.spec.layer_shapes.empty() &&
      (ns.check_layer_shapes || first == nullptr || first == &rec || !layout.ok() ||
       (ns.has_tip_only && HasRealTipState(ns.families, rec)))) {
    if (Status s = CompareWithSpecShapes(ns, rec); !s.ok()) {
      if (other_shapes != nullptr) *other_shapes = true;
      return Status::Corruption("not the namespace's layer shapes: " + s.message());
    }
  }
  return layout;
}

Status CheckStoredShapes(const cache::NamespaceState& ns, const BlockRecord& record) {
  if (ns.spec.layer_shapes.empty()) return Status::OK();
  if (Status s = CompareWithSpecShapes(ns, record); !s.ok())
    return Status::InvalidArgument("not the namespace's layer shapes: " + s.message());
  return Status::OK();
}

bool CachedBlockHoldsOtherShapes(cache::NamespaceState& ns, const BlockKey& key,
                                 const DecodeLimits& limits) {
  const uint64_t stamp = ns.tiers->LocalChangeStamp(key);
  if (ns.shapes_checked.Holds(key, stamp)) return false;
  const StatusOr<LoadedBlock> block = LoadBlock(ns, key, BlockRead::kBookkeeping, limits);
  if (!block.ok()) return false;
  if (!CheckStoredShapes(ns, block->record).ok()) return true;
  ns.shapes_checked.Remember(key, stamp);
  return false;
}

Status DropBlocksOfOtherShapes(cache::NamespaceState& ns, std::span<const BlockKey> keys,
                               const DecodeLimits& limits) {
  if (keys.empty()) return Status::NotFound("no block");
  MutexLock lock(&ns.store_mu);
  const StatusOr<LoadedBlock> cached =
      LoadBlock(ns, keys[0], BlockRead::kBookkeeping, limits);
  if (!cached.ok() || CheckStoredShapes(ns, cached->record).ok())
    return Status::NotFound("not cached with other shapes");
  for (const BlockKey& key : keys) {
    // Sound bytes of other shapes, not damaged ones: "corrupt" would count
    // as damage for an event consumer, and the SSD tier's removal history
    // (ExplainMiss) says "removed" too.
    Status removed = ns.tiers->Remove(key, KvRemoveReason::kRemoved);
    if (!removed.ok() && !removed.IsNotFound()) return removed;
  }
  return Status::OK();
}

Status RefuseServedBlockOfOtherShapes(cache::NamespaceState& ns,
                                      const SharedBytes& payload,
                                      const BlocksAfter& after,
                                      const DecodeLimits& limits) {
  if (ns.spec.layer_shapes.empty()) return Status::OK();
  // From a local tier: verified when stored (block_io.cc), so no checksum pass.
  const StatusOr<BlockRecord> record = DecodeTrustedBlock(payload, limits);
  if (!record.ok())
    return Status::NotFound("block does not decode: " + record.status().message());
  const Status shapes = CheckStoredShapes(ns, *record);
  if (shapes.ok()) return Status::OK();
  ns.shape_refused_tokens.fetch_add(record->token_count + after.tokens);
  if (!ns.check_layer_shapes) {
    std::vector<BlockKey> chain = {record->key};
    chain.insert(chain.end(), after.keys.begin(), after.keys.end());
    (void)DropBlocksOfOtherShapes(ns, chain, limits);
  }
  return Status::NotFound("block " + record->key.ToHex() + ": " + shapes.message());
}

}  // namespace prefixkv::cache
