// LayerKvCache: one layer's attention keys and values for one session.
//
// Two kinds, matching the cache type families of cache_types.h:
//   full      (KVCache)          every position since the start, [kv_heads, seq,
//   head_dim] rotating  (RotatingKVCache)  a ring of the last `window_tokens` positions;
//   position p
//                                lives in slot p % window, meta (keep, max_size, offset,
//                                idx)
// Storage is float32, head-major with spare capacity, so appending one decoded token
// is a small copy per head and exporting to a prefixkv::Tensor is one copy per head.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "prefixkv/cache_types.h"
#include "prefixkv/status.h"
#include "prefixkv/tensor.h"

namespace prefixkv {

// The shape of one layer's KV state.
struct LayerKvGeometry {
  int layer = 0;           // absolute layer index in the model
  int64_t n_kv_heads = 0;  // key/value heads (GQA: may be fewer than query heads)
  int64_t head_dim = 0;    // elements per head
  int64_t window_tokens =
      0;  // 0: full attention; > 0: sliding window of this many tokens
};

// A layer's state as tensors, ready for a prefix-cache block or a restore.
struct LayerKvExport {
  std::string_view cache_type;                // "KVCache" or "RotatingKVCache"
  Tensor keys;                                // float32 [kv_heads, held, head_dim]
  Tensor values;                              // same shape as keys
  std::optional<RotatingMeta> rotating_meta;  // set for rotating layers only
};

// Not thread-safe: HotKvSession guards its layers with its own lock.
class LayerKvCache {
 public:
  // REQUIRES: n_kv_heads > 0, head_dim > 0, window_tokens >= 0.
  explicit LayerKvCache(LayerKvGeometry geometry);

  // Rebuilds a layer from exported tensors (a prefix-cache restore). Full layers
  // take keys/values of [kv_heads, seq, head_dim]; rotating layers take the ring as
  // exported (slot order) plus its meta. InvalidArgument on any inconsistency.
  static StatusOr<LayerKvCache> Restore(LayerKvGeometry geometry, const Tensor& keys,
                                        const Tensor& values,
                                        std::optional<RotatingMeta> rotating_meta);

  const LayerKvGeometry& geometry() const { return geometry_; }
  int layer() const { return geometry_.layer; }
  bool is_rotating() const { return geometry_.window_tokens > 0; }
  // Positions seen so far (the sequence length this layer has consumed).
  int64_t length() const { return length_; }
  // Positions physically held: length() for full layers, min(length, window) otherwise.
  int64_t held_tokens() const;
  // Bytes of K and V payload held: held_tokens * 2 * kv_heads * head_dim * 4. This
  // (not the allocator capacity) is what the session manager charges.
  uint64_t payload_bytes() const;
  // Payload bytes this layer would hold at `length` positions.
  uint64_t PayloadBytesAt(int64_t length) const;

  // Appends `tokens` new positions. keys/values: float32 [kv_heads, tokens, head_dim].
  // InvalidArgument (and no change) when dtype or shape does not match the geometry.
  Status Append(const Tensor& keys, const Tensor& values);
  // Checks what Append would check, without appending.
  Status CheckChunk(const Tensor& keys, const Tensor& values) const;

  // True when Truncate(length) can be exact: always for full layers; for rotating
  // layers only while every position the shorter window needs is still in the ring.
  bool CanTruncate(int64_t length) const;
  // Drops positions >= length. InvalidArgument when length > length() or
  // !CanTruncate(length); nothing changes then.
  Status Truncate(int64_t length);

  // Row of head `head` at absolute position `pos` (head_dim floats).
  // REQUIRES: pos < length() and, for rotating layers, pos >= length() - held_tokens().
  const float* KeyRow(int64_t head, int64_t pos) const {
    return keys_.data() + Offset(head, pos);
  }
  const float* ValueRow(int64_t head, int64_t pos) const {
    return values_.data() + Offset(head, pos);
  }

  // Copies the state out as tensors (full: position order; rotating: slot order).
  LayerKvExport Export() const;
  RotatingMeta rotating_meta() const;

 private:
  size_t Offset(int64_t head, int64_t pos) const {
    int64_t slot = is_rotating() ? pos % geometry_.window_tokens : pos;
    return static_cast<size_t>((head * capacity_ + slot) * geometry_.head_dim);
  }
  void Reserve(int64_t tokens);

  LayerKvGeometry geometry_;
  int64_t length_ = 0;
  int64_t capacity_ = 0;       // slots per head allocated in keys_/values_
  std::vector<float> keys_;    // [kv_heads][capacity][head_dim]
  std::vector<float> values_;  // same layout
};

}  // namespace prefixkv
