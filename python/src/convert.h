// Conversions between prefixkv values and Python objects for the prefixkv
// extension module: Status -> the exception classes of prefixkv/errors.py,
// DType <-> numpy dtype, Tensor -> a read-only numpy array that views the
// tensor's bytes (no copy) and keeps them, and a pin, alive, and a numpy array
// -> a Tensor (one copy into a fresh 64-byte aligned buffer).
//
// Everything here needs the GIL, except CopyToTensor.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <vector>

#include "prefixkv/engine.h"

namespace prefixkv::python {

namespace py = pybind11;

// Raises the prefixkv.errors class named after status.code() (InvalidArgument,
// NotFound, ...) carrying the code name and the message. REQUIRES: !ok().
[[noreturn]] void Raise(const Status& status);
// The value of `s`, or Raise(s.status()).
template <typename T>
T ValueOr(StatusOr<T>&& s) {
  if (!s.ok()) Raise(s.status());
  return std::move(s).value();
}
inline void Check(const Status& s) {
  if (!s.ok()) Raise(s);
}

// numpy's dtype for a DType: float32, float16, int32...; bfloat16 has no numpy
// type and is viewed as uint16 (its raw bits).
py::dtype NumpyDType(DType dtype);

// A read-only array of `tensor`'s shape viewing tensor.data() without a copy.
// Its base object holds the tensor's bytes and `pin` (may be null) until the
// array, and every view taken from it, is gone.
py::array ViewTensor(const Tensor& tensor, std::shared_ptr<const void> pin);

// The bytes of a numpy array checked for storing: where they are and the
// array's shape. Valid while the caller holds the array.
struct ArrayBytes {
  const void* data = nullptr;
  size_t nbytes = 0;
  std::vector<int64_t> shape;
};

// Checks `array` for a namespace whose elements are `dtype`: C-contiguous, the
// matching numpy dtype (uint16 for bfloat16), at least `min_ndim` dimensions
// (2 for a sliceable layer: the token axis is ndim - 2).
// InvalidArgument naming `what` otherwise.
StatusOr<ArrayBytes> CheckArray(const py::array& array, DType dtype,
                                const std::string& what, size_t min_ndim = 2);

// `tensor` as a numpy array: a numpy array itself, or a CPU torch tensor
// viewed without a copy (torch.bfloat16 as uint16 bits; prefixkv/tensors.py).
// InvalidArgument naming `what` for anything else.
py::array AsArray(const py::object& tensor, const std::string& what);

// The DType of an array's elements (uint16: bfloat16). InvalidArgument naming
// `what` for a numpy dtype the block format has no type for.
StatusOr<DType> DTypeOfArray(const py::array& array, const std::string& what);
// The same for a numpy dtype (a buffer's, py::dtype(buffer_info)).
StatusOr<DType> DTypeOfNumpy(const py::dtype& numpy_dtype, const std::string& what);

// Token ids as int32 from a sequence or 1-D array of ints; InvalidArgument
// for anything else or a value outside int32.
std::vector<int32_t> TokenIds(const py::object& tokens);

// A Tensor of `dtype` with a copy of the bytes into a fresh 64-byte aligned
// buffer. Needs no GIL (the caller holds the array).
Tensor CopyToTensor(const ArrayBytes& bytes, DType dtype);

}  // namespace prefixkv::python
