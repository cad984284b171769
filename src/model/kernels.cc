// The reference model's numeric kernels (kernels.h): dot products, row matrix
// products, RMSNorm, rotary embeddings, SiLU and attention, written as plain
// loops whose summation order is fixed in the source. No vectorizing library
// and no blocking that depends on the row count: a kernel must give the same
// bits for one row as for that row within a batch, which is what lets a cached
// decode match the stateless runner exactly instead of approximately.
#include "kernels.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace prefixkv::model_internal {

float Dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  }
  float tail = 0;
  for (; i < n; ++i) tail += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) +
         ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
}

void MatMulRows(const float* x, int64_t rows, int64_t in, const float* w, int64_t out,
                float* y) {
  constexpr int64_t kBlock = 16;  // 16 weight rows of a 256-wide layer: 16 KiB
  for (int64_t o0 = 0; o0 < out; o0 += kBlock) {
    int64_t o1 = std::min(out, o0 + kBlock);
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * in;
      float* yr = y + r * out;
      for (int64_t o = o0; o < o1; ++o) yr[o] = Dot(xr, w + o * in, in);
    }
  }
}

void RmsNormRows(const float* x, int64_t rows, int64_t width, const float* weight,
                 float eps, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * width;
    float* yr = out + r * width;
    float mean_sq = Dot(xr, xr, width) / static_cast<float>(width);
    float inv = 1.0f / std::sqrt(mean_sq + eps);
    for (int64_t i = 0; i < width; ++i) yr[i] = xr[i] * inv * weight[i];
  }
}

void ApplyRope(float* heads, int64_t n_heads, int64_t head_dim, int64_t position,
               const float* inv_freq) {
  int64_t half = head_dim / 2;
  float pos = static_cast<float>(position);
  for (int64_t i = 0; i < half; ++i) {
    float angle = pos * inv_freq[i];
    float c = std::cos(angle);
    float s = std::sin(angle);
    for (int64_t h = 0; h < n_heads; ++h) {
      float* t = heads + h * head_dim;
      float x1 = t[i];
      float x2 = t[i + half];
      t[i] = x1 * c - x2 * s;
      t[i + half] = x2 * c + x1 * s;
    }
  }
}

float Silu(float x) { return x / (1.0f + std::exp(-x)); }

namespace {

// One query head at one position: softmax over keys [lo, hi] then weighted values.
void AttendOne(const float* q, int64_t kv_head, int64_t lo, int64_t hi, float scale,
               const KvSource& kv, std::vector<float>* scores, float* out) {
  int64_t n = hi - lo + 1;
  int64_t hd = kv.head_dim;
  scores->resize(static_cast<size_t>(n));
  float* s = scores->data();
  float max_score = -INFINITY;
  for (int64_t j = 0; j < n; ++j) {
    s[j] = Dot(q, kv.Key(kv_head, lo + j), hd) * scale;
    max_score = std::max(max_score, s[j]);
  }
  float sum = 0;
  for (int64_t j = 0; j < n; ++j) {
    s[j] = std::exp(s[j] - max_score);
    sum += s[j];
  }
  std::fill(out, out + hd, 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    const float* v = kv.Value(kv_head, lo + j);
    for (int64_t d = 0; d < hd; ++d) out[d] += s[j] * v[d];
  }
  float inv = 1.0f / sum;
  for (int64_t d = 0; d < hd; ++d) out[d] *= inv;
}

}  // namespace

void AttendRows(const float* q, int64_t rows, const int64_t* positions,
                const AttentionShape& shape, const KvSource& kv, float* out) {
  int64_t group = shape.n_heads / shape.n_kv_heads;
  int64_t width = shape.n_heads * shape.head_dim;
  float scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  std::vector<float> scores;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t p = positions[r];
    int64_t lo =
        shape.window_tokens > 0 ? std::max<int64_t>(0, p - shape.window_tokens + 1) : 0;
    for (int64_t h = 0; h < shape.n_heads; ++h) {
      AttendOne(q + r * width + h * shape.head_dim, h / group, lo, p, scale, kv, &scores,
                out + r * width + h * shape.head_dim);
    }
  }
}

}  // namespace prefixkv::model_internal
