// TensorDestination: caller-owned memory that a restore writes one tensor
// into (Engine::RestoreInto), described the way numpy and DLPack describe an
// array: a base pointer, the bytes writable from it, a dtype and one byte
// stride per dimension.
//
// The strides run along the dimensions of the restored tensor (keys and
// values of a KV layer are [1, kv_heads, tokens, head_dim] or [kv_heads,
// tokens, head_dim]) and say where its element (i0, i1, ...) goes:
// data + i0 * strides_bytes[0] + i1 * strides_bytes[1] + .... The tensor's
// shape is known only after the restore, so a buffer with room for more
// tokens than were restored takes a shorter restore: describe a
// [1, heads, max_tokens, head_dim] array by its own strides and the restored
// tokens land in its first positions, the rest of it untouched.
//
//   std::vector<uint16_t> k(heads * max_tokens * dim);  // fp16 keys
//   TensorDestination d{.data = k.data(), .size_bytes = k.size() * 2,
//                       .dtype = DType::kFloat16,
//                       .strides_bytes = {0, max_tokens * dim * 2, dim * 2, 2}};
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "prefixkv/status.h"
#include "prefixkv/tensor.h"

namespace prefixkv {

struct TensorDestination {
  void* data = nullptr;           // where element (0, 0, ...) goes; not null
  size_t size_bytes = 0;          // bytes writable from `data`
  DType dtype = DType::kFloat32;  // must equal the restored tensor's dtype
  // One per dimension of the restored tensor, in bytes, >= 0. Distinct
  // elements must not share bytes (ordered by stride, each stride is at
  // least the extent of the smaller ones; dimensions of size 1 are free).
  // Empty: the tensor row-major and contiguous at `data`.
  std::vector<int64_t> strides_bytes;
  // The shape of the caller's array, when `data` is one (a strided view of a
  // larger array): the restored tensor must have as many dimensions and fit
  // inside it along each, so no write lands in the gaps between its rows.
  // Empty: only size_bytes bounds the writes.
  std::vector<int64_t> shape;
};

// Where one restored layer goes: one destination per tensor of the layer, in
// the layer's order (KV layers: keys, values; arrays layers: the conv ring,
// the state; quantized layers: each packed, scales and biases tensor).
struct LayerDestination {
  std::vector<TensorDestination> tensors;
};

// The effective byte strides of writing a tensor of `dtype` and `shape` into
// `dest` (its strides, or the row-major ones when it has none), after
// checking that it fits: data not null, the same dtype, one stride per
// dimension, none negative, no two elements on the same bytes, the shape
// inside dest.shape when it has one, and every element's bytes inside
// size_bytes. InvalidArgument saying what is wrong.
StatusOr<std::vector<int64_t>> CheckTensorDestination(const TensorDestination& dest,
                                                      DType dtype,
                                                      std::span<const int64_t> shape);

// Copies a row-major, contiguous tensor of `shape` with `element_bytes`
// elements from `src` to `dst` laid out by `dst_strides` (bytes), one memcpy
// per run of elements that is contiguous on both sides. `stream`: write with
// non-temporal stores where the CPU has them (x86-64), bypassing the cache,
// for copies much larger than it whose destination is not read again soon.
// REQUIRES: dst_strides passed CheckTensorDestination for this shape.
void CopyToStrided(const uint8_t* src, std::span<const int64_t> shape,
                   size_t element_bytes, uint8_t* dst,
                   std::span<const int64_t> dst_strides, bool stream = false);

}  // namespace prefixkv
