// LayerKvCache: one layer's attention keys and values for one session.
//
// Three kinds, matching the cache type families of namespace_spec.h:
//   full       (KVCache)          every position since the start, [kv_heads, seq,
//                                 head_dim]
//   rotating   (RotatingKVCache)  a ring of the last `window_tokens` positions;
//                                 position p lives in slot p % window, meta (keep,
//                                 max_size, offset, idx)
//   recurrent  (ArraysCache)      a fixed-size state: a ring of the last
//                                 `conv_tokens` short-convolution inputs
//                                 [1, conv_tokens, channels] (slot p % conv_tokens)
//                                 plus the recurrent state [state_heads, state_dim,
//                                 state_dim], valid only at length()
// Storage is float32, head-major with spare capacity, so appending one decoded token
// is a small copy per head and exporting to a prefixkv::Tensor is one copy per head.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "prefixkv/namespace_spec.h"
#include "prefixkv/status.h"
#include "prefixkv/tensor.h"

namespace prefixkv {

// The state of a recurrent layer. channels == 0: the layer is not recurrent.
struct RecurrentShape {
  int64_t conv_tokens = 0;  // convolution inputs kept: the kernel width - 1 (>= 1)
  int64_t channels = 0;     // width of one convolution input row
  int64_t state_heads = 0;  // recurrent state heads
  int64_t state_dim = 0;    // each head's state is state_dim x state_dim
  bool is_recurrent() const { return channels > 0; }
  int64_t state_floats() const { return state_heads * state_dim * state_dim; }
  bool operator==(const RecurrentShape&) const = default;
};

// The shape of one layer's KV state.
struct LayerKvGeometry {
  int layer = 0;           // absolute layer index in the model
  int64_t n_kv_heads = 0;  // key/value heads (GQA: may be fewer than query heads)
  int64_t head_dim = 0;    // elements per head
  int64_t window_tokens =
      0;                     // 0: full attention; > 0: sliding window of this many tokens
  RecurrentShape recurrent;  // set: a recurrent layer (n_kv_heads/head_dim unused)
};

// A layer's state as tensors, ready for a prefix-cache block or a restore.
struct LayerKvExport {
  std::string_view cache_type;  // "KVCache", "RotatingKVCache" or "ArraysCache"
  Tensor keys;    // float32 [kv_heads, held, head_dim]; recurrent: the conv ring
  Tensor values;  // same shape as keys; recurrent: the state
  std::optional<RotatingMeta> rotating_meta;  // set for rotating layers only
  int64_t length = 0;                         // positions consumed
};

// Not thread-safe: Session guards its layers with its own lock.
class LayerKvCache {
 public:
  // REQUIRES: n_kv_heads > 0, head_dim > 0, window_tokens >= 0 (or, for a
  // recurrent layer, every RecurrentShape field > 0 and window_tokens == 0).
  explicit LayerKvCache(LayerKvGeometry geometry);

  // Rebuilds a layer from exported tensors (a prefix-cache restore). Full layers
  // take keys/values of [kv_heads, seq, head_dim]; rotating layers take the ring as
  // exported (slot order) plus its meta; recurrent layers take the conv ring (slot
  // order) and the state plus a meta whose offset is the length (keep 0, max_size
  // conv_tokens). InvalidArgument on any inconsistency.
  static StatusOr<LayerKvCache> Restore(LayerKvGeometry geometry, const Tensor& keys,
                                        const Tensor& values,
                                        std::optional<RotatingMeta> rotating_meta);

  const LayerKvGeometry& geometry() const { return geometry_; }
  int layer() const { return geometry_.layer; }
  bool is_rotating() const { return geometry_.window_tokens > 0; }
  bool is_recurrent() const { return geometry_.recurrent.is_recurrent(); }
  // Positions seen so far (the sequence length this layer has consumed).
  int64_t length() const { return length_; }
  // Positions physically held: length() for full layers, min(length, window) for
  // rotating ones, min(length, conv_tokens) conv inputs for recurrent ones.
  int64_t held_tokens() const;
  // Bytes of K and V payload held: held_tokens * 2 * kv_heads * head_dim * 4
  // (recurrent: held conv rows * channels * 4 + the state). This (not the
  // allocator capacity) is what the session manager charges.
  uint64_t payload_bytes() const;
  // Payload bytes this layer would hold at `length` positions.
  uint64_t PayloadBytesAt(int64_t length) const;

  // Appends `tokens` new positions. keys/values: float32 [kv_heads, tokens, head_dim];
  // recurrent: keys float32 [1, tokens, channels] (the new conv inputs), values the
  // state after them, float32 [state_heads, state_dim, state_dim].
  // InvalidArgument (and no change) when dtype or shape does not match the geometry.
  Status Append(const Tensor& keys, const Tensor& values);
  // Checks what Append would check, without appending.
  Status CheckChunk(const Tensor& keys, const Tensor& values) const;

  // True when Truncate(length) can be exact: always for full layers; for rotating
  // layers only while every position the shorter window needs is still in the ring;
  // recurrent layers only for length() (a state cannot be rewound).
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
  // Recurrent layers: the conv input at `pos` (channels floats; REQUIRES pos <
  // length() and pos >= length() - held_tokens()) and the state (state_floats()).
  const float* ConvRow(int64_t pos) const { return keys_.data() + Offset(0, pos); }
  const float* State() const { return values_.data(); }

  // Copies the state out as tensors (full: position order; rotating: slot order).
  LayerKvExport Export() const;
  RotatingMeta rotating_meta() const;

 private:
  // The ring of rotating (window) and recurrent (conv_tokens) layers; 0: none.
  int64_t RingTokens() const {
    return is_recurrent() ? geometry_.recurrent.conv_tokens : geometry_.window_tokens;
  }
  int64_t Heads() const { return is_recurrent() ? 1 : geometry_.n_kv_heads; }
  int64_t RowWidth() const {
    return is_recurrent() ? geometry_.recurrent.channels : geometry_.head_dim;
  }
  size_t Offset(int64_t head, int64_t pos) const {
    int64_t slot = RingTokens() > 0 ? pos % RingTokens() : pos;
    return static_cast<size_t>((head * capacity_ + slot) * RowWidth());
  }
  Status CheckRecurrentChunk(const Tensor& keys, const Tensor& values) const;
  void Reserve(int64_t tokens);

  LayerKvGeometry geometry_;
  int64_t length_ = 0;
  int64_t capacity_ = 0;       // slots per head allocated in keys_/values_
  std::vector<float> keys_;    // [kv_heads][capacity][head_dim]
  std::vector<float> values_;  // same layout; recurrent: the state
};

}  // namespace prefixkv
