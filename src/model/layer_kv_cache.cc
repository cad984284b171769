// LayerKvCache (layer_kv_cache.h): one layer's keys and values for one
// session, either a growable head-major buffer (full attention), a ring of the
// last window positions (sliding window) or a recurrent layer's conv-input ring
// plus its fixed-size state. Head-major with spare capacity so that
// appending a decoded token is one small copy per head; Export and Restore turn
// it into the tensors (and rotating meta) the prefix cache stores. Restore
// checks the tensors and the meta against the layer's geometry (InvalidArgument
// otherwise), since restored bytes come from outside the session.
#include "prefixkv/layer_kv_cache.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <functional>
#include <string>

namespace prefixkv {
namespace {

std::string ShapeText(const Tensor& t) { return t.DebugString(); }

// A float32 [heads, rows, head_dim] tensor whose rows are copied from row_of(h, r).
Tensor HeadMajorTensor(int64_t heads, int64_t rows, int64_t head_dim,
                       const std::function<const float*(int64_t, int64_t)>& row_of) {
  size_t row_bytes = static_cast<size_t>(head_dim) * sizeof(float);
  uint8_t* out = nullptr;
  SharedBytes bytes =
      SharedBytes::Allocate(static_cast<size_t>(heads * rows) * row_bytes, &out);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(out + static_cast<size_t>(h * rows + r) * row_bytes, row_of(h, r),
                  row_bytes);
    }
  }
  return Tensor(DType::kFloat32, {heads, rows, head_dim}, std::move(bytes));
}

}  // namespace

LayerKvCache::LayerKvCache(LayerKvGeometry geometry) : geometry_(geometry) {
  const RecurrentShape& r = geometry.recurrent;
  assert(r.is_recurrent() ? r.conv_tokens > 0 && r.state_heads > 0 && r.state_dim > 0 &&
                                geometry.window_tokens == 0
                          : geometry.n_kv_heads > 0 && geometry.head_dim > 0 &&
                                geometry.window_tokens >= 0);
  if (r.is_recurrent()) values_.assign(static_cast<size_t>(r.state_floats()), 0.0f);
}

int64_t LayerKvCache::held_tokens() const {
  return RingTokens() > 0 ? std::min(length_, RingTokens()) : length_;
}

uint64_t LayerKvCache::PayloadBytesAt(int64_t length) const {
  int64_t held = RingTokens() > 0 ? std::min(length, RingTokens()) : length;
  if (is_recurrent()) {
    return (static_cast<uint64_t>(held * geometry_.recurrent.channels) +
            static_cast<uint64_t>(geometry_.recurrent.state_floats())) *
           sizeof(float);
  }
  return static_cast<uint64_t>(held) * 2 * static_cast<uint64_t>(geometry_.n_kv_heads) *
         static_cast<uint64_t>(geometry_.head_dim) * sizeof(float);
}

Status LayerKvCache::CheckRecurrentChunk(const Tensor& keys, const Tensor& values) const {
  const RecurrentShape& r = geometry_.recurrent;
  bool ok =
      keys.dtype() == DType::kFloat32 && keys.ndim() == 3 && keys.dim(0) == 1 &&
      keys.dim(2) == r.channels && values.dtype() == DType::kFloat32 &&
      values.shape() == std::vector<int64_t>{r.state_heads, r.state_dim, r.state_dim};
  if (ok) return Status::OK();
  return Status::InvalidArgument(
      "recurrent layer " + std::to_string(geometry_.layer) +
      " expects float32 [1, tokens, " + std::to_string(r.channels) +
      "] conv inputs and a float32 [" + std::to_string(r.state_heads) + ", " +
      std::to_string(r.state_dim) + ", " + std::to_string(r.state_dim) + "] state, got " +
      ShapeText(keys) + " and " + ShapeText(values));
}

uint64_t LayerKvCache::payload_bytes() const { return PayloadBytesAt(length_); }

Status LayerKvCache::CheckChunk(const Tensor& keys, const Tensor& values) const {
  if (is_recurrent()) return CheckRecurrentChunk(keys, values);
  for (const Tensor* t : {&keys, &values}) {
    bool ok = t->dtype() == DType::kFloat32 && t->ndim() == 3 &&
              t->dim(0) == geometry_.n_kv_heads && t->dim(2) == geometry_.head_dim;
    if (!ok) {
      return Status::InvalidArgument(
          "layer " + std::to_string(geometry_.layer) + " expects float32 [" +
          std::to_string(geometry_.n_kv_heads) + ", tokens, " +
          std::to_string(geometry_.head_dim) + "] keys/values, got " + ShapeText(*t));
    }
  }
  if (keys.shape() != values.shape()) {
    return Status::InvalidArgument("keys " + ShapeText(keys) + " and values " +
                                   ShapeText(values) + " differ in shape");
  }
  return Status::OK();
}

void LayerKvCache::Reserve(int64_t tokens) {
  const int64_t ring = RingTokens();
  if (ring > 0) tokens = std::min(tokens, ring);
  if (tokens <= capacity_) return;
  // Doubling keeps decode appends amortized O(1); a ring never outgrows its window.
  int64_t cap = std::max<int64_t>({tokens, 2 * capacity_, 16});
  if (ring > 0) cap = std::min(cap, ring);
  int64_t heads = Heads(), hd = RowWidth();
  std::vector<float> keys(static_cast<size_t>(heads * cap * hd));
  // A recurrent layer's values_ is its state, not rows: it keeps its size.
  std::vector<float> values(is_recurrent() ? 0 : keys.size());
  for (int64_t h = 0; h < heads && capacity_ > 0; ++h) {
    size_t n = static_cast<size_t>(capacity_ * hd);
    std::copy_n(keys_.data() + h * capacity_ * hd, n, keys.data() + h * cap * hd);
    if (!is_recurrent())
      std::copy_n(values_.data() + h * capacity_ * hd, n, values.data() + h * cap * hd);
  }
  // A ring buffer that grows keeps slot = pos % window only because it grows to its
  // full window before wrapping (capacity < window implies length <= capacity).
  keys_ = std::move(keys);
  if (!is_recurrent()) values_ = std::move(values);
  capacity_ = cap;
}

Status LayerKvCache::Append(const Tensor& keys, const Tensor& values) {
  PKV_RETURN_IF_ERROR(CheckChunk(keys, values));
  int64_t tokens = keys.dim(1), heads = Heads(), hd = RowWidth();
  Reserve(length_ + tokens);
  const float* k = keys.data_as<float>();
  const float* v = values.data_as<float>();
  // For a ring only the last `window` of the new tokens survive; writing all of them
  // in order yields the same slots.
  int64_t first = RingTokens() > 0 ? std::max<int64_t>(0, tokens - RingTokens()) : 0;
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t t = first; t < tokens; ++t) {
      size_t dst = Offset(h, length_ + t);
      size_t src = static_cast<size_t>((h * tokens + t) * hd);
      std::copy_n(k + src, hd, keys_.data() + dst);
      if (!is_recurrent()) std::copy_n(v + src, hd, values_.data() + dst);
    }
  }
  // The state after the new tokens replaces the one before them.
  if (is_recurrent()) std::copy_n(v, values_.size(), values_.data());
  length_ += tokens;
  return Status::OK();
}

bool LayerKvCache::CanTruncate(int64_t length) const {
  if (length < 0 || length > length_) return false;
  // A recurrent state is valid at one position only: it cannot be rewound.
  if (is_recurrent()) return length == length_;
  // A ring that never wrapped still holds every position; once it wrapped, the
  // positions a shorter window would need are gone.
  return !is_rotating() || length == length_ || length_ <= geometry_.window_tokens;
}

Status LayerKvCache::Truncate(int64_t length) {
  if (!CanTruncate(length)) {
    return Status::InvalidArgument(
        "layer " + std::to_string(geometry_.layer) + " cannot truncate from " +
        std::to_string(length_) + " to " + std::to_string(length) +
        (is_rotating() ? " (rotating window already wrapped)" : "") +
        (is_recurrent() ? " (a recurrent state cannot be rewound)" : ""));
  }
  length_ = length;
  return Status::OK();
}

RotatingMeta LayerKvCache::rotating_meta() const {
  RotatingMeta m;
  m.keep = 0;
  m.max_size = RingTokens();
  m.offset = length_;
  m.idx = RingTokens() > 0 ? length_ % RingTokens() : 0;
  return m;
}

LayerKvExport LayerKvCache::Export() const {
  LayerKvExport out;
  out.length = length_;
  int64_t held = held_tokens();
  // Full layers export positions 0..length-1; rings export slots 0..held-1, which
  // is position order until the ring wraps and slot order (see meta.idx) after.
  auto key_row = [&](int64_t h, int64_t r) {
    return keys_.data() + static_cast<size_t>((h * capacity_ + r) * RowWidth());
  };
  if (is_recurrent()) {
    const RecurrentShape& rs = geometry_.recurrent;
    out.cache_type = "ArraysCache";
    out.keys = HeadMajorTensor(1, held, rs.channels, key_row);
    out.values = HeadMajorTensor(
        rs.state_heads, rs.state_dim, rs.state_dim, [&](int64_t h, int64_t r) {
          return values_.data() +
                 static_cast<size_t>((h * rs.state_dim + r) * rs.state_dim);
        });
    out.rotating_meta = rotating_meta();
    return out;
  }
  auto value_row = [&](int64_t h, int64_t r) {
    return values_.data() + static_cast<size_t>((h * capacity_ + r) * geometry_.head_dim);
  };
  out.keys = HeadMajorTensor(geometry_.n_kv_heads, held, geometry_.head_dim, key_row);
  out.values = HeadMajorTensor(geometry_.n_kv_heads, held, geometry_.head_dim, value_row);
  if (is_rotating()) {
    out.cache_type = "RotatingKVCache";
    out.rotating_meta = rotating_meta();
  } else {
    out.cache_type = "KVCache";
  }
  return out;
}

StatusOr<LayerKvCache> LayerKvCache::Restore(LayerKvGeometry geometry, const Tensor& keys,
                                             const Tensor& values,
                                             std::optional<RotatingMeta> meta) {
  LayerKvCache cache(geometry);
  PKV_RETURN_IF_ERROR(cache.CheckChunk(keys, values));
  if ((cache.RingTokens() > 0) != meta.has_value()) {
    return Status::InvalidArgument("layer " + std::to_string(geometry.layer) +
                                   (meta ? " is full attention but got rotating meta"
                                         : " is rotating or recurrent but got no meta"));
  }
  if (!meta) {
    PKV_RETURN_IF_ERROR(cache.Append(keys, values));
    return cache;
  }
  int64_t w = cache.RingTokens();
  bool consistent = meta->keep == 0 && meta->max_size == w && meta->offset >= 0 &&
                    meta->idx % w == meta->offset % w &&
                    keys.dim(1) == std::min(meta->offset, w);
  if (!consistent) {
    return Status::InvalidArgument("rotating meta (" + std::to_string(meta->keep) + ", " +
                                   std::to_string(meta->max_size) + ", " +
                                   std::to_string(meta->offset) + ", " +
                                   std::to_string(meta->idx) + ") does not fit window " +
                                   std::to_string(w) + " and " + ShapeText(keys));
  }
  // Slots are already in ring order, so they are copied in place.
  int64_t held = keys.dim(1), hd = cache.RowWidth();
  cache.Reserve(w);
  for (int64_t h = 0; h < cache.Heads(); ++h) {
    std::copy_n(keys.data_as<float>() + h * held * hd, held * hd,
                cache.keys_.data() + h * cache.capacity_ * hd);
    if (!cache.is_recurrent()) {
      std::copy_n(values.data_as<float>() + h * held * hd, held * hd,
                  cache.values_.data() + h * cache.capacity_ * hd);
    }
  }
  if (cache.is_recurrent())
    std::copy_n(values.data_as<float>(), cache.values_.size(), cache.values_.data());
  cache.length_ = meta->offset;
  return cache;
}

}  // namespace prefixkv
