// DType and Tensor: the n-dimensional byte arrays that layer caches are made of.
//
// A Tensor is a dtype, a row-major shape and immutable SharedBytes. prefixkv never
// does arithmetic on cache tensors; it slices them per block, stores the bytes and
// concatenates them back, so the dtype only sets the element size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "prefixkv/bytes.h"
#include "prefixkv/status.h"

namespace prefixkv {

// Element types. Values are stored in the block format: never renumber.
enum class DType : uint8_t {
  kFloat32 = 1,
  kFloat16 = 2,
  kBFloat16 = 3,
  kInt32 = 4,
  kInt8 = 5,
  kUInt8 = 6,
  kUInt32 = 7,
  kFloat64 = 8,
  kInt64 = 9,
};

// Bytes per element; 0 for a value that is not a DType.
size_t DTypeSize(DType dtype);
// "float32", "float16", ...; "invalid" for a value that is not a DType.
std::string_view DTypeName(DType dtype);
// Parses the names above (and "fp16", "fp32", "bf16"). InvalidArgument otherwise.
StatusOr<DType> ParseDType(std::string_view name);
// True when `raw` names a DType.
bool IsValidDType(uint8_t raw);

// Immutable; thread-safe for concurrent readers.
class Tensor {
 public:
  Tensor() = default;
  // REQUIRES: bytes.size() == NumElements(shape) * DTypeSize(dtype). Use Make to check.
  Tensor(DType dtype, std::vector<int64_t> shape, SharedBytes bytes)
      : dtype_(dtype), shape_(std::move(shape)), bytes_(std::move(bytes)) {}

  // Checked constructor: InvalidArgument when the byte length does not fit.
  static StatusOr<Tensor> Make(DType dtype, std::vector<int64_t> shape,
                               SharedBytes bytes);
  // A tensor of `shape` filled with `value` repeated (for tests and examples).
  static Tensor Filled(DType dtype, std::vector<int64_t> shape, uint8_t byte_value);

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(size_t i) const { return shape_[i]; }
  size_t ndim() const { return shape_.size(); }
  size_t nbytes() const { return bytes_.size(); }
  const SharedBytes& bytes() const { return bytes_; }
  const uint8_t* data() const { return bytes_.data(); }
  template <typename T>
  const T* data_as() const {
    return reinterpret_cast<const T*>(bytes_.data());
  }

  // Rows [start, start+length) along `axis`. Shares the bytes (no copy) when every
  // dimension before `axis` is 1; copies otherwise (into `memory` when given
  // and it has room, else the heap).
  StatusOr<Tensor> SliceAxis(
      size_t axis, int64_t start, int64_t length,
      const std::shared_ptr<MemoryResource>& memory = nullptr) const;

  // Concatenates along `axis`; all other dimensions and the dtype must agree.
  // One part is returned as is (no copy).
  // The result is allocated in `memory` when given (and it has room), else
  // on the heap.
  static StatusOr<Tensor> Concat(const std::vector<Tensor>& parts, size_t axis,
                                 const std::shared_ptr<MemoryResource>& memory = nullptr);

  // Same dtype, shape and bytes.
  bool operator==(const Tensor& other) const;
  // "float16[1,8,256,128]"
  std::string DebugString() const;

 private:
  DType dtype_ = DType::kFloat32;
  std::vector<int64_t> shape_;
  SharedBytes bytes_;
};

// Product of dimensions, or -1 on a negative dimension or overflow.
int64_t NumElements(const std::vector<int64_t>& shape);

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

struct TensorDestination {
  void* data = nullptr;           // where element (0, 0, ...) goes; not null
  size_t size_bytes = 0;          // bytes writable from `data`
  DType dtype = DType::kFloat32;  // must equal the restored tensor's dtype
  // One per dimension of the restored tensor, in bytes, >= 0. Distinct
  // elements must not share bytes (ordered by stride, each stride is at
  // least the extent of the smaller ones; dimensions of size 1 are free).
  // Empty: row-major and contiguous at `data`: the caller's array of
  // `shape` when it is given (the restored tensor in the first positions of
  // its rows), else the restored tensor itself.
  std::vector<int64_t> strides_bytes;
  // The shape of the caller's array, when `data` is one (a strided view of a
  // larger array, or without strides a C-contiguous one): the restored
  // tensor must have as many dimensions and fit inside it along each, so no
  // write lands in the gaps between its rows. Empty: only size_bytes bounds
  // the writes.
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
