// Status -> exception, DType <-> numpy, Tensor <-> numpy array (convert.h).
#include "convert.h"

#include <unistd.h>

#include <cstring>
#include <string_view>
#include <utility>

namespace prefixkv::python {

void Raise(const Status& status) {
  py::module_ errors = py::module_::import("prefixkv.errors");
  const std::string code(StatusCodeName(status.code()));
  py::object cls = py::hasattr(errors, code.c_str()) ? errors.attr(code.c_str())
                                                     : errors.attr("Error");
  py::object error = cls(status.message(), code);
  PyErr_SetObject(cls.ptr(), error.ptr());
  throw py::error_already_set();
}

py::dtype NumpyDType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return py::dtype::of<float>();
    case DType::kFloat16:
      return py::dtype("float16");
    case DType::kBFloat16:
      return py::dtype::of<uint16_t>();
    case DType::kInt32:
      return py::dtype::of<int32_t>();
    case DType::kInt8:
      return py::dtype::of<int8_t>();
    case DType::kUInt8:
      return py::dtype::of<uint8_t>();
    case DType::kUInt32:
      return py::dtype::of<uint32_t>();
    case DType::kFloat64:
      return py::dtype::of<double>();
    case DType::kInt64:
      return py::dtype::of<int64_t>();
  }
  return py::dtype::of<uint8_t>();
}

namespace {

// What the base object of a view keeps alive, released only in the process
// that made it (ReleasedInThisProcessOnly, py_types.h, says why).
struct ViewOwner {
  SharedBytes bytes;
  std::shared_ptr<const void> pin;
  pid_t made_by = getpid();
};

}  // namespace

py::array ViewTensor(const Tensor& tensor, std::shared_ptr<const void> pin) {
  auto* owner = new ViewOwner{tensor.bytes(), std::move(pin)};
  py::capsule base(owner, [](void* p) {
    auto* owner = static_cast<ViewOwner*>(p);
    if (owner->made_by == getpid()) delete owner;  // else a fork's: let go of
  });
  py::array view(NumpyDType(tensor.dtype()), tensor.shape(), tensor.data(), base);
  // The tier's bytes are immutable (SharedBytes): nobody may write them.
  view.attr("setflags")(py::arg("write") = false);
  return view;
}

StatusOr<ArrayBytes> CheckArray(const py::array& array, DType dtype,
                                const std::string& what, size_t min_ndim) {
  const py::dtype want = NumpyDType(dtype);
  if (!array.dtype().is(want) && !array.dtype().equal(want)) {
    return Status::InvalidArgument(
        what + ": dtype " + py::str(py::object(array.dtype())).cast<std::string>() +
        ", the namespace holds " + std::string(DTypeName(dtype)) + " (numpy " +
        py::str(py::object(want)).cast<std::string>() + ")");
  }
  if ((array.flags() & py::array::c_style) == 0) {
    return Status::InvalidArgument(what +
                                   ": not C-contiguous (numpy.ascontiguousarray makes "
                                   "a contiguous copy)");
  }
  if (static_cast<size_t>(array.ndim()) < min_ndim) {
    return Status::InvalidArgument(what + ": " + std::to_string(array.ndim()) +
                                   " dimension(s); the token axis is ndim - 2, so at "
                                   "least 2 are needed");
  }
  ArrayBytes out;
  out.data = array.data();
  out.nbytes = static_cast<size_t>(array.nbytes());
  out.shape.assign(array.shape(), array.shape() + array.ndim());
  return out;
}

py::array AsArray(const py::object& tensor, const std::string& what) {
  if (py::isinstance<py::array>(tensor)) return tensor.cast<py::array>();
  return py::module_::import("prefixkv.tensors").attr("as_numpy")(tensor, what);
}

StatusOr<DType> DTypeOfArray(const py::array& array, const std::string& what) {
  return DTypeOfNumpy(array.dtype(), what);
}

StatusOr<DType> DTypeOfNumpy(const py::dtype& numpy_dtype, const std::string& what) {
  for (int raw = 0; raw < 256; ++raw) {
    if (!IsValidDType(static_cast<uint8_t>(raw))) continue;
    const auto dtype = static_cast<DType>(raw);
    if (numpy_dtype.equal(NumpyDType(dtype))) return dtype;
  }
  return Status::InvalidArgument(what + ": numpy dtype " +
                                 py::str(py::object(numpy_dtype)).cast<std::string>() +
                                 " has no block format type");
}

namespace {

// Token ids as given, without numpy's casting: a cast would turn a float id
// into another integer (0.9 -> 0), parse a string, count a boolean or wrap a
// uint64 past int64 (2**64 - 1 -> -1), and the prompt would then match, and a
// store file its KV under, another prompt's blocks.
py::array GivenTokenArray(const py::object& tokens) {
  py::array given = py::array::ensure(tokens);
  if (!given || given.ndim() != 1) {
    PyErr_Clear();
    Raise(Status::InvalidArgument("tokens: a 1-D sequence of integers is needed"));
  }
  const char kind = given.dtype().kind();
  if (given.size() > 0 && kind != 'i' && kind != 'u') {
    Raise(
        Status::InvalidArgument("tokens: integer token ids are needed, not numpy dtype " +
                                py::str(py::object(given.dtype())).cast<std::string>() +
                                " (floats, strings and booleans are not converted)"));
  }
  return given;
}

// Each id of `given` (integers), read as `Wide` and checked to fit int32.
template <typename Wide>
std::vector<int32_t> FittingIds(const py::array& given) {
  const auto wide =
      py::array_t<Wide, py::array::c_style | py::array::forcecast>::ensure(given);
  std::vector<int32_t> out(static_cast<size_t>(given.size()));
  for (size_t i = 0; i < out.size(); ++i) {
    const Wide v = wide.data()[i];
    if (!std::in_range<int32_t>(v)) {
      Raise(Status::InvalidArgument("tokens[" + std::to_string(i) + "] = " +
                                    std::to_string(v) + " does not fit in int32"));
    }
    out[i] = static_cast<int32_t>(v);
  }
  return out;
}

}  // namespace

std::vector<int32_t> TokenIds(const py::object& tokens) {
  const py::array given = GivenTokenArray(tokens);
  // Unsigned ids are read as uint64, so that none wraps into a negative id.
  return given.dtype().kind() == 'u' ? FittingIds<uint64_t>(given)
                                     : FittingIds<int64_t>(given);
}

Tensor CopyToTensor(const ArrayBytes& bytes, DType dtype) {
  uint8_t* writable = nullptr;
  SharedBytes copy = SharedBytes::Allocate(bytes.nbytes, &writable);
  if (bytes.nbytes > 0) std::memcpy(writable, bytes.data, bytes.nbytes);
  return Tensor(dtype, bytes.shape, std::move(copy));
}

}  // namespace prefixkv::python
