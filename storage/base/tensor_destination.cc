// TensorDestination (tensor.h): checking a caller's description
// of its memory before anything is written, and the strided copy into it.
// The check is what makes RestoreInto safe with memory prefixkv does not own:
// every byte a copy will touch is proven to lie inside [data, data +
// size_bytes) and no two elements of one destination land on the same
// bytes, with overflow-free arithmetic, so a wrong description is an error
// and never a stray write. (Destinations are not checked against each other:
// docs/prefix_cache.md, "Nothing written on a bad destination".)
#include <algorithm>
#include <cstring>
#include <string>

#include "prefixkv/tensor.h"

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace prefixkv {
namespace {

std::string ShapeString(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ",";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::vector<int64_t> RowMajorStrides(std::span<const int64_t> shape,
                                     size_t element_bytes) {
  std::vector<int64_t> strides(shape.size());
  int64_t stride = static_cast<int64_t>(element_bytes);
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

// Runs shorter than this are copied with plain stores even when streaming
// (the head and tail alignment would dominate).
constexpr size_t kStreamRunBytes = 256;

// a * b + c, or UINT64_MAX when it overflows (then larger than any buffer).
uint64_t MulAdd(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t product = 0, sum = 0;
  if (__builtin_mul_overflow(a, b, &product) || __builtin_add_overflow(product, c, &sum))
    return UINT64_MAX;
  return sum;
}

// Distinct elements on distinct bytes: ordered by stride, every dimension
// that has more than one index steps over the whole extent of the smaller.
Status CheckNoOverlap(std::span<const int64_t> shape, std::span<const int64_t> strides,
                      size_t element_bytes) {
  std::vector<size_t> dims;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] > 1) dims.push_back(i);
  }
  std::sort(dims.begin(), dims.end(),
            [&](size_t a, size_t b) { return strides[a] < strides[b]; });
  uint64_t extent = element_bytes;
  for (size_t d : dims) {
    if (static_cast<uint64_t>(strides[d]) < extent) {
      return Status::InvalidArgument("destination stride " + std::to_string(strides[d]) +
                                     " of dimension " + std::to_string(d) +
                                     " overlaps the elements of the smaller strides");
    }
    extent =
        MulAdd(static_cast<uint64_t>(strides[d]), static_cast<uint64_t>(shape[d]), 0);
  }
  return Status::OK();
}

// memcpy with non-temporal stores: the destination's lines are written
// without being read into the cache first (a plain store reads each line
// before writing it, which for a copy larger than the cache is a third
// memory pass). glibc's memcpy does the same for one large copy; a strided
// copy is many smaller ones, which it would not stream. Ordered by the
// sfence in CopyToStrided.
void StreamCopy(uint8_t* dst, const uint8_t* src, size_t n) {
#if defined(__x86_64__)
  const size_t head = std::min(n, (16 - reinterpret_cast<uintptr_t>(dst) % 16) % 16);
  std::memcpy(dst, src, head);
  dst += head, src += head, n -= head;
  for (; n >= 64; n -= 64, dst += 64, src += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 48), d);
  }
#endif
  std::memcpy(dst, src, n);
}

}  // namespace

StatusOr<std::vector<int64_t>> CheckTensorDestination(const TensorDestination& dest,
                                                      DType dtype,
                                                      std::span<const int64_t> shape) {
  const size_t element_bytes = DTypeSize(dtype);
  if (DTypeSize(dest.dtype) == 0)
    return Status::InvalidArgument("destination dtype is invalid");
  if (dest.dtype != dtype) {
    return Status::InvalidArgument(
        "destination dtype " + std::string(DTypeName(dest.dtype)) +
        " but the restored tensor is " + std::string(DTypeName(dtype)));
  }
  if (dest.data == nullptr) return Status::InvalidArgument("destination data is null");
  if (!dest.strides_bytes.empty() && dest.strides_bytes.size() != shape.size()) {
    return Status::InvalidArgument(
        "destination has " + std::to_string(dest.strides_bytes.size()) +
        " strides for a tensor of " + std::to_string(shape.size()) + " dimensions " +
        ShapeString(shape));
  }
  if (!dest.shape.empty()) {
    bool fits = dest.shape.size() == shape.size();
    for (size_t i = 0; fits && i < shape.size(); ++i) fits = shape[i] <= dest.shape[i];
    if (!fits) {
      return Status::InvalidArgument(
          "the restored " + std::string(DTypeName(dtype)) + ShapeString(shape) +
          " does not fit the destination's " + ShapeString(dest.shape));
    }
  }
  // Without strides the memory is row-major: the caller's array when its
  // shape is given (the restored tensor fills the first positions of each
  // row, as a strided description of that array puts it), else the tensor
  // itself, contiguous. (The tensor's own row-major strides in an array of
  // room for more tokens put each head after the previous one's restored
  // rows: into the positions past them, and the heads out of place.)
  std::vector<int64_t> strides = dest.strides_bytes;
  if (strides.empty())
    strides = RowMajorStrides(dest.shape.empty() ? shape : dest.shape, element_bytes);
  uint64_t end = element_bytes;  // one past the last element's bytes
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) return Status::InvalidArgument("negative dimension");
    if (strides[i] < 0) {
      return Status::InvalidArgument("destination stride " + std::to_string(strides[i]) +
                                     " of dimension " + std::to_string(i) +
                                     " is negative");
    }
    if (shape[i] == 0) return strides;  // no element: nothing will be written
    end = MulAdd(static_cast<uint64_t>(shape[i] - 1), static_cast<uint64_t>(strides[i]),
                 end);
  }
  if (end > dest.size_bytes) {
    return Status::InvalidArgument(
        "destination of " + std::to_string(dest.size_bytes) + " bytes is too small for " +
        std::string(DTypeName(dtype)) + ShapeString(shape) + " at its strides");
  }
  PKV_RETURN_IF_ERROR(CheckNoOverlap(shape, strides, element_bytes));
  return strides;
}

void CopyToStrided(const uint8_t* src, std::span<const int64_t> shape,
                   size_t element_bytes, uint8_t* dst,
                   std::span<const int64_t> dst_strides, bool stream) {
  const size_t n = shape.size();
  for (int64_t d : shape) {
    if (d == 0) return;
  }
  // The run: trailing dimensions contiguous in the destination too (the
  // source is contiguous throughout), copied by one memcpy.
  size_t outer = n;  // dimensions [0, outer) are walked, [outer, n) are the run
  size_t run = element_bytes;
  while (outer > 0 &&
         (shape[outer - 1] == 1 || dst_strides[outer - 1] == static_cast<int64_t>(run))) {
    run *= static_cast<size_t>(shape[outer - 1]);
    --outer;
  }
  std::vector<int64_t> index(outer, 0);
  for (;;) {
    int64_t offset = 0;
    for (size_t i = 0; i < outer; ++i) offset += index[i] * dst_strides[i];
    if (stream && run >= kStreamRunBytes) {
      StreamCopy(dst + offset, src, run);
    } else {
      std::memcpy(dst + offset, src, run);
    }
    src += run;
    size_t i = outer;
    while (i > 0 && ++index[i - 1] == shape[i - 1]) index[--i] = 0;
    if (i == 0) break;
  }
#if defined(__x86_64__)
  if (stream) _mm_sfence();  // the streamed stores are visible before we return
#endif
}

}  // namespace prefixkv
