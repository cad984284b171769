// The reference model's numeric kernels (private to src/model).
//
// Every kernel fixes its summation order in the source: no kernel's result
// depends on how many rows it is given at once or where a key row is stored. That
// is what makes cached decoding bit-identical to the stateless runner.
#pragma once

#include <cstdint>

#include "prefixkv/layer_kv_cache.h"

namespace prefixkv::model_internal {

// sum_i a[i] * b[i] with eight interleaved partial sums combined in a fixed tree.
float Dot(const float* a, const float* b, int64_t n);

// y[r][o] = Dot(x[r], w[o]) for x [rows][in], w [out][in], y [rows][out].
// Blocked over outputs so a block of weight rows stays in cache across rows.
void MatMulRows(const float* x, int64_t rows, int64_t in, const float* w, int64_t out,
                float* y);

// out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight. out may alias x.
void RmsNormRows(const float* x, int64_t rows, int64_t width, const float* weight,
                 float eps, float* out);

// Rotate-half RoPE in place on `n_heads` heads of `head_dim` at `position`.
void ApplyRope(float* heads, int64_t n_heads, int64_t head_dim, int64_t position,
               const float* inv_freq);

float Silu(float x);

// Where attention reads keys/values by absolute position: positions below
// past_len come from `past`, the rest from this run's chunk ([kv_heads][new_len][hd]).
struct KvSource {
  const LayerKvCache* past = nullptr;
  int64_t past_len = 0;
  const float* new_keys = nullptr;
  const float* new_values = nullptr;
  int64_t new_len = 0;
  int64_t head_dim = 0;

  const float* Key(int64_t head, int64_t pos) const {
    if (pos < past_len) return past->KeyRow(head, pos);
    return new_keys + (head * new_len + (pos - past_len)) * head_dim;
  }
  const float* Value(int64_t head, int64_t pos) const {
    if (pos < past_len) return past->ValueRow(head, pos);
    return new_values + (head * new_len + (pos - past_len)) * head_dim;
  }
};

struct AttentionShape {
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t window_tokens = 0;  // 0: causal full attention
};

// Causal (optionally sliding-window) softmax attention of q [rows][n_heads*hd] at
// `positions`, keys visited in absolute position order. out [rows][n_heads*hd].
void AttendRows(const float* q, int64_t rows, const int64_t* positions,
                const AttentionShape& shape, const KvSource& kv, float* out);

}  // namespace prefixkv::model_internal
