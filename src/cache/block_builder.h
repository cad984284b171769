// Store-side block construction: checks a store's layer caches against the
// namespace layout and cuts them into per-block records.
//
// Sliceable layers are cut along the token axis (ndim - 2) into one slice per
// block, by the encoder as it copies them (no slice is made first); a sliceable layer
// whose meta is a single integer (the KVCache "offset" meta), or a quantized layer's
// offset in mlx-lm's or mlx-swift-lm's QuantizedKVCache meta, gets that integer
// rewritten to the block's end position, so the newest restored block's meta matches
// the restored length. Tip-only layers are taken whole into the tip and replaced by
// MakePlaceholder everywhere else.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "namespace_state.h"
#include "prefixkv/codec.h"

namespace prefixkv::cache {

// InvalidArgument unless `layers` fits the namespace: one per layer, same
// family as the spec's layer type, sliceable tensors of the namespace dtype
// with `token_count` rows on the token axis, rotating meta parsable with
// offset == token_count and rotating tensors of the namespace dtype, real
// rotating and arrays layers with tensors, and the spec's layer shapes where
// a restore relies on them (CheckStoredShapes).
// `other_shapes` (may be null) is set when they fail for their shapes alone.
Status CheckStoreLayers(const cache::NamespaceState& ns, size_t token_count,
                        const std::vector<LayerState>& layers,
                        bool* other_shapes = nullptr);

// One block of a store: where it sits and what it is called.
struct PlannedBlock {
  BlockKey key;
  BlockKey parent;     // the previous block, or the namespace root
  size_t start = 0;    // first token
  uint32_t count = 0;  // tokens; < block_tokens only for a marked partial tail
};

// A block of a store as the encoder takes it (EncodeBlockRows): the record,
// whose sliceable layers hold the store's whole tensors, and the token rows
// of them the block holds, so the one copy of the bytes is the encoder's.
struct BlockDraft {
  BlockRecord record;
  std::vector<std::optional<TokenRows>> rows;  // one per layer
};

// The draft of `block` cut from a store's layers. `with_tip_state`: tip-only
// layers carry the real state (else placeholders). A block shorter than
// block_tokens is marked partial.
// REQUIRES: CheckStoreLayers passed.
BlockDraft BuildBlock(const cache::NamespaceState& ns, std::span<const int32_t> tokens,
                      const std::vector<LayerState>& layers, const PlannedBlock& block,
                      bool with_tip_state);

// Replaces every tip-only layer of `record` with its placeholder. Returns
// false when there was nothing to strip.
bool StripTipState(const std::vector<CacheFamily>& families, BlockRecord* record);

// True when every tip-only layer of `record` is real (not a placeholder);
// vacuously true for namespaces without tip-only layers.
bool HasRealTipState(const std::vector<CacheFamily>& families, const BlockRecord& record);

// The axis blocks are cut along: ndim - 2 ([1, H, T, D] -> 2, [H, T, D] -> 1).
inline size_t TokenAxis(const Tensor& t) { return t.ndim() - 2; }

}  // namespace prefixkv::cache
