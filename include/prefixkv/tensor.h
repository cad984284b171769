// DType and Tensor: the n-dimensional byte arrays that layer caches are made of.
//
// A Tensor is a dtype, a row-major shape and immutable SharedBytes. prefixkv never
// does arithmetic on cache tensors; it slices them per block, stores the bytes and
// concatenates them back, so the dtype only sets the element size.
#pragma once

#include <cstdint>
#include <memory>
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

}  // namespace prefixkv
