// Tensor (tensor.h): dtypes and their names, construction, and slicing and
// concatenation along one axis. Only byte moves, never arithmetic: the cache
// stores and restores tensors, it does not compute with them, so any dtype
// (quantized ones included) is handled the same way. Make checks that the bytes
// match shape times dtype size (InvalidArgument otherwise, overflow included),
// so every tensor in the process is well formed.
#include "prefixkv/tensor.h"

#include <cstring>

#include "prefixkv/memory_resource.h"

namespace prefixkv {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
    case DType::kInt32:
    case DType::kUInt32:
      return 4;
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
    case DType::kInt8:
    case DType::kUInt8:
      return 1;
    case DType::kFloat64:
    case DType::kInt64:
      return 8;
  }
  return 0;
}

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kInt32:
      return "int32";
    case DType::kInt8:
      return "int8";
    case DType::kUInt8:
      return "uint8";
    case DType::kUInt32:
      return "uint32";
    case DType::kFloat64:
      return "float64";
    case DType::kInt64:
      return "int64";
  }
  return "invalid";
}

bool IsValidDType(uint8_t raw) { return raw >= 1 && raw <= 9; }

StatusOr<DType> ParseDType(std::string_view name) {
  if (name == "fp32") return DType::kFloat32;
  if (name == "fp16") return DType::kFloat16;
  if (name == "bf16") return DType::kBFloat16;
  for (uint8_t raw = 1; raw <= 9; ++raw) {
    if (DTypeName(static_cast<DType>(raw)) == name) return static_cast<DType>(raw);
  }
  return Status::InvalidArgument("unknown dtype '" + std::string(name) + "'");
}

int64_t NumElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d != 0 && n > INT64_MAX / d) return -1;
    n *= d;
  }
  return n;
}

StatusOr<Tensor> Tensor::Make(DType dtype, std::vector<int64_t> shape,
                              SharedBytes bytes) {
  if (!IsValidDType(static_cast<uint8_t>(dtype))) {
    return Status::InvalidArgument("invalid dtype");
  }
  int64_t n = NumElements(shape);
  if (n < 0) return Status::InvalidArgument("negative or overflowing shape");
  if (static_cast<uint64_t>(n) > SIZE_MAX / DTypeSize(dtype) ||
      static_cast<size_t>(n) * DTypeSize(dtype) != bytes.size()) {
    return Status::InvalidArgument("byte length " + std::to_string(bytes.size()) +
                                   " does not match " + std::string(DTypeName(dtype)) +
                                   " shape of " + std::to_string(n) + " elements");
  }
  return Tensor(dtype, std::move(shape), std::move(bytes));
}

Tensor Tensor::Filled(DType dtype, std::vector<int64_t> shape, uint8_t byte_value) {
  size_t n = static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype);
  uint8_t* out = nullptr;
  SharedBytes bytes = SharedBytes::Allocate(n, &out);
  std::memset(out, byte_value, n);
  return Tensor(dtype, std::move(shape), std::move(bytes));
}

namespace {

// Splits a shape around `axis`: outer rows, the axis length, inner bytes per row.
struct AxisSplit {
  int64_t outer = 1;
  int64_t axis_len = 0;
  size_t inner_bytes = 0;
};

AxisSplit SplitAt(const std::vector<int64_t>& shape, size_t axis, DType dtype) {
  AxisSplit s;
  for (size_t i = 0; i < axis; ++i) s.outer *= shape[i];
  s.axis_len = shape[axis];
  s.inner_bytes = DTypeSize(dtype);
  for (size_t i = axis + 1; i < shape.size(); ++i) s.inner_bytes *= shape[i];
  return s;
}

}  // namespace

namespace {

// `size` uninitialised bytes in `memory` when given and it has room, else on
// the heap.
SharedBytes AllocateOutput(const std::shared_ptr<MemoryResource>& memory, size_t size,
                           uint8_t** out) {
  *out = nullptr;
  SharedBytes bytes;
  if (memory != nullptr) {
    bytes = SharedBytes::AllocateIn(memory, size, size, SharedBytes::kBufferAlign, out);
  }
  if (*out == nullptr) bytes = SharedBytes::Allocate(size, out);
  return bytes;
}

}  // namespace

StatusOr<Tensor> Tensor::SliceAxis(size_t axis, int64_t start, int64_t length,
                                   const std::shared_ptr<MemoryResource>& memory) const {
  if (axis >= shape_.size()) return Status::InvalidArgument("slice axis out of range");
  if (start < 0 || length < 0 || start > shape_[axis] || length > shape_[axis] - start) {
    return Status::InvalidArgument("slice [" + std::to_string(start) + ", +" +
                                   std::to_string(length) + ") outside " + DebugString());
  }
  AxisSplit s = SplitAt(shape_, axis, dtype_);
  std::vector<int64_t> shape = shape_;
  shape[axis] = length;
  size_t row = s.inner_bytes * static_cast<size_t>(length);
  if (s.outer == 1) {
    return Tensor(dtype_, std::move(shape),
                  bytes_.Slice(s.inner_bytes * static_cast<size_t>(start), row));
  }
  uint8_t* out = nullptr;
  SharedBytes copy = AllocateOutput(memory, row * static_cast<size_t>(s.outer), &out);
  size_t src_stride = s.inner_bytes * static_cast<size_t>(s.axis_len);
  const uint8_t* src = bytes_.data() + s.inner_bytes * static_cast<size_t>(start);
  for (int64_t o = 0; o < s.outer; ++o) {
    std::memcpy(out + row * o, src + src_stride * o, row);
  }
  return Tensor(dtype_, std::move(shape), std::move(copy));
}

StatusOr<Tensor> Tensor::Concat(const std::vector<Tensor>& parts, size_t axis,
                                const std::shared_ptr<MemoryResource>& memory) {
  if (parts.empty()) return Status::InvalidArgument("concat of no tensors");
  if (parts.size() == 1) return parts[0];
  const Tensor& first = parts[0];
  if (axis >= first.ndim()) return Status::InvalidArgument("concat axis out of range");
  int64_t total = 0;
  for (const Tensor& p : parts) {
    bool same = p.dtype_ == first.dtype_ && p.ndim() == first.ndim();
    for (size_t i = 0; same && i < p.ndim(); ++i) {
      same = i == axis || p.shape_[i] == first.shape_[i];
    }
    if (!same) {
      return Status::InvalidArgument("concat of " + first.DebugString() + " and " +
                                     p.DebugString());
    }
    total += p.shape_[axis];
  }
  AxisSplit s = SplitAt(first.shape_, axis, first.dtype_);
  std::vector<int64_t> shape = first.shape_;
  shape[axis] = total;
  size_t out_row = s.inner_bytes * static_cast<size_t>(total);
  uint8_t* out = nullptr;
  SharedBytes bytes =
      AllocateOutput(memory, out_row * static_cast<size_t>(s.outer), &out);
  size_t offset = 0;
  for (const Tensor& p : parts) {
    size_t part_row = s.inner_bytes * static_cast<size_t>(p.shape_[axis]);
    for (int64_t o = 0; o < s.outer; ++o) {
      std::memcpy(out + out_row * o + offset, p.data() + part_row * o, part_row);
    }
    offset += part_row;
  }
  return Tensor(first.dtype_, std::move(shape), std::move(bytes));
}

bool Tensor::operator==(const Tensor& other) const {
  return dtype_ == other.dtype_ && shape_ == other.shape_ &&
         bytes_.view() == other.bytes_.view();
}

std::string Tensor::DebugString() const {
  std::string out(DTypeName(dtype_));
  out += "[";
  for (size_t i = 0; i < shape_.size(); ++i) {
    if (i) out += ",";
    out += std::to_string(shape_[i]);
  }
  return out + "]";
}

}  // namespace prefixkv
