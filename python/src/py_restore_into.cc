// Engine.restore_into: a restore written straight into memory the caller
// owns (numpy arrays, CPU torch tensors, any writable buffer or DLPack
// host tensor), through
// Engine::RestoreInto. Each Python object is described to the engine as a
// TensorDestination (pointer, extent, dtype, byte strides, shape) from its
// writable buffer; the buffers stay acquired until the restore returns, so
// nothing moves or is freed under the copy, which runs without the GIL.
#include <unistd.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "convert.h"
#include "docstrings.h"
#include "py_types.h"

namespace prefixkv::python {
namespace {

// DLPack's ABI (dlpack.h, v0.8; stable since v0.2): what a "dltensor"
// capsule points to.
struct DLDevice {
  int32_t device_type;  // 1: CPU, 3: CUDA host (pinned) memory
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;  // 0 int, 1 uint, 2 float, 4 bfloat
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; null: row-major compact
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

// A destination object, its memory held (a writable buffer, or a consumed
// DLPack tensor) until the restore is done and then by the view of the part
// written (WrittenView), and where that view goes.
struct HeldDestination {
  py::object owner;  // what the views of the written part keep alive
  std::unique_ptr<py::buffer_info> buffer;
  std::shared_ptr<DLManagedTensor> dlpack;
  void* data = nullptr;
  std::vector<py::ssize_t> strides;  // bytes
};

// The bytes from `data` to the end of the last element of an array of
// `shape` and byte `strides`: the memory the array may be written in.
uint64_t ExtentBytes(const TensorDestination& d, size_t itemsize,
                     const std::string& what) {
  uint64_t end = itemsize;
  for (size_t i = 0; i < d.shape.size(); ++i) {
    if (d.strides_bytes[i] < 0)
      Raise(Status::InvalidArgument(what + ": negative strides"));
    if (d.shape[i] == 0) return 0;
    end +=
        static_cast<uint64_t>(d.shape[i] - 1) * static_cast<uint64_t>(d.strides_bytes[i]);
  }
  return end;
}

// Acquires `target`'s buffer for writing and describes it.
TensorDestination DescribeBuffer(const py::object& target, const std::string& what,
                                 HeldDestination* held) {
  auto* view = new Py_buffer();
  if (PyObject_GetBuffer(target.ptr(), view,
                         PyBUF_WRITABLE | PyBUF_STRIDES | PyBUF_FORMAT) != 0) {
    delete view;
    py::error_already_set e;
    Raise(Status::InvalidArgument(what + ": not a writable buffer (" +
                                  std::string(e.what()) +
                                  "); restore_into writes into it"));
  }
  held->buffer = std::make_unique<py::buffer_info>(view, /*ownview=*/true);
  const py::buffer_info& info = *held->buffer;
  TensorDestination d;
  d.data = info.ptr;
  d.dtype = ValueOr(DTypeOfNumpy(py::dtype(info), what));
  d.strides_bytes.assign(info.strides.begin(), info.strides.end());
  d.shape.assign(info.shape.begin(), info.shape.end());
  d.size_bytes = ExtentBytes(d, static_cast<size_t>(info.itemsize), what);
  return d;
}

// DLPack type code and bits of each block format type (uint16: bfloat16's
// bits, as the arrays carry them).
struct DlpackType {
  uint8_t code, bits;
  DType dtype;
};
constexpr DlpackType kDlpackTypes[] = {
    {2, 16, DType::kFloat16},  {2, 32, DType::kFloat32},  {2, 64, DType::kFloat64},
    {4, 16, DType::kBFloat16}, {1, 16, DType::kBFloat16}, {0, 8, DType::kInt8},
    {1, 8, DType::kUInt8},     {0, 32, DType::kInt32},    {1, 32, DType::kUInt32},
    {0, 64, DType::kInt64}};

StatusOr<DType> DTypeOfDlpack(const DLDataType& t) {
  for (const DlpackType& known : kDlpackTypes) {
    if (t.lanes == 1 && t.code == known.code && t.bits == known.bits) return known.dtype;
  }
  return Status::InvalidArgument("DLPack dtype code " + std::to_string(t.code) +
                                 " bits " + std::to_string(t.bits) + " lanes " +
                                 std::to_string(t.lanes) + " has no block format type");
}

// Consumes `obj.__dlpack__()` (host memory only) and describes it. DLPack
// before 1.0 cannot say read-only: the exporter decides (numpy refuses to
// export a read-only array).
TensorDestination DescribeDlpack(const py::object& obj, const std::string& what,
                                 HeldDestination* held) {
  py::object capsule;
  try {
    capsule = obj.attr("__dlpack__")();
  } catch (py::error_already_set& e) {  // numpy's, for a read-only array
    Raise(Status::InvalidArgument(what + ": __dlpack__() failed: " + e.what()));
  }
  auto* m =
      static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  if (m == nullptr) {
    PyErr_Clear();
    Raise(Status::InvalidArgument(what + ": __dlpack__ gave no unused dltensor capsule"));
  }
  PyCapsule_SetName(capsule.ptr(), "used_dltensor");  // ours now: we call its deleter
  held->dlpack.reset(m, [](DLManagedTensor* t) {
    if (t->deleter != nullptr) t->deleter(t);
  });
  const DLTensor& t = m->dl_tensor;
  if (t.device.device_type != 1 && t.device.device_type != 3) {
    Raise(Status::InvalidArgument(
        what + ": DLPack device type " + std::to_string(t.device.device_type) +
        " is not host memory; restore into host memory and copy"));
  }
  TensorDestination d;
  d.data = static_cast<uint8_t*>(t.data) + t.byte_offset;
  StatusOr<DType> dtype = DTypeOfDlpack(t.dtype);
  if (!dtype.ok()) Raise(Status::InvalidArgument(what + ": " + dtype.status().message()));
  d.dtype = *dtype;
  const int64_t itemsize = t.dtype.bits / 8;
  d.shape.assign(t.shape, t.shape + t.ndim);
  d.strides_bytes.resize(d.shape.size());
  int64_t compact = itemsize;
  for (size_t i = d.shape.size(); i-- > 0;) {
    d.strides_bytes[i] = t.strides != nullptr ? t.strides[i] * itemsize : compact;
    compact *= d.shape[i];
  }
  d.size_bytes = ExtentBytes(d, static_cast<size_t>(itemsize), what);
  return d;
}

bool IsTorchTensor(const py::handle& obj) {
  py::object torch = py::module_::import("sys").attr("modules").attr("get")("torch");
  return !torch.is_none() && py::isinstance(obj, torch.attr("Tensor"));
}

// Describes `obj` for writing: a numpy array or any object with the buffer
// protocol, a CPU torch tensor (through its numpy view), or a DLPack object.
TensorDestination Describe(const py::handle& obj, const std::string& what,
                           HeldDestination* held) {
  py::object target = py::reinterpret_borrow<py::object>(obj);
  const bool buffer =
      py::isinstance<py::array>(target) || PyObject_CheckBuffer(target.ptr());
  const bool dlpack =
      !buffer && !IsTorchTensor(target) && py::hasattr(target, "__dlpack__");
  if (!buffer && !dlpack)
    target = AsArray(target, what);  // CPU torch, or InvalidArgument
  held->owner = target;
  TensorDestination d =
      dlpack ? DescribeDlpack(target, what, held) : DescribeBuffer(target, what, held);
  held->data = d.data;
  held->strides.assign(d.strides_bytes.begin(), d.strides_bytes.end());
  return d;
}

// The memory resources of the engines opened (NoteEngineMemory), each with
// the process that opened its engine (a forked child inherits the list).
struct EngineMemory {
  std::weak_ptr<MemoryResource> resource;
  pid_t opened_by;
};
struct EngineMemories {
  std::mutex mu;
  std::vector<EngineMemory> resources;
};
EngineMemories& Memories() {
  static auto* memories = new EngineMemories();  // never destroyed: used at exit
  return *memories;
}

// A writable array of the written part of `held`'s memory, which takes
// over the hold: while the array (or a view of it) lives the buffer stays
// exported and a DLPack tensor unreleased. Holding the object alone let its
// memory go under the array: a memoryview's release() then a resize of its
// bytearray freed the bytes the array still read.
py::array WrittenView(const RestoredTensorShape& written, HeldDestination* held) {
  auto* kept = new HeldDestination(std::move(*held));
  py::capsule base(kept, [](void* p) { delete static_cast<HeldDestination*>(p); });
  return py::array(NumpyDType(written.dtype), written.shape, kept->strides, kept->data,
                   base);
}

}  // namespace

void NoteEngineMemory(const std::shared_ptr<MemoryResource>& memory) {
  if (memory == nullptr) return;
  EngineMemories& m = Memories();
  std::lock_guard lock(m.mu);
  std::erase_if(m.resources, [](const EngineMemory& r) { return r.resource.expired(); });
  m.resources.push_back({memory, getpid()});
}

bool InEngineMemory(const void* data, uint64_t bytes) {
  const auto begin = reinterpret_cast<uintptr_t>(data);
  EngineMemories& m = Memories();
  const pid_t self = getpid();
  std::lock_guard lock(m.mu);
  for (const EngineMemory& noted : m.resources) {
    if (noted.opened_by != self) continue;  // a parent's (see InEngineMemory)
    const std::shared_ptr<MemoryResource> memory = noted.resource.lock();
    if (memory == nullptr) continue;
    for (const MemoryRegion& r : memory->Regions()) {
      const auto base = reinterpret_cast<uintptr_t>(r.base);
      if (begin < base + r.bytes && base < begin + bytes) return true;
    }
  }
  return false;
}

// The items of `list` (dests, or one layer of it); an object one cannot
// iterate (None, a number) is InvalidArgument naming `what` and its type,
// not the bare TypeError of a failed iteration.
std::vector<py::object> ItemsOf(const py::handle& list, const std::string& what,
                                const char* items) {
  if (!list.is_none()) {
    PyObject* it = PyObject_GetIter(list.ptr());
    if (it != nullptr) {
      std::vector<py::object> out;  // owned: a generator's items have no other owner
      for (const py::handle& item : py::reinterpret_steal<py::iterator>(it)) {
        out.push_back(py::reinterpret_borrow<py::object>(item));
      }
      return out;
    }
    PyErr_Clear();
  }
  Raise(Status::InvalidArgument(
      what + ": not a sequence of " + items + " (" +
      std::string(py::str(py::type::handle_of(list).attr("__name__"))) + ")"));
}

PyRestoredInto RestoreInto(PyEngine& engine, const PyMatch& match,
                           const py::object& dests, const py::object& on_layer) {
  engine.CheckNotForked();  // before any destination is taken (DLPack's consumed)
  std::vector<LayerDestination> destinations;
  std::vector<std::vector<HeldDestination>> held;
  for (const py::object& layer : ItemsOf(dests, "dests", "layers")) {
    const size_t l = destinations.size();
    destinations.emplace_back();
    held.emplace_back();
    for (const py::object& tensor :
         ItemsOf(layer, "layer " + std::to_string(l), "destinations")) {
      const std::string what =
          "layer " + std::to_string(l) + " tensor " + std::to_string(held[l].size());
      held[l].emplace_back();
      destinations[l].tensors.push_back(Describe(tensor, what, &held[l].back()));
      const TensorDestination& d = destinations[l].tensors.back();
      if (d.size_bytes > 0 && InEngineMemory(d.data, d.size_bytes)) {
        Raise(Status::InvalidArgument(
            what +
            ": the destination lies in an engine's own memory (a restored "
            "array, e.g. through as_torch): its blocks are read-only"));
      }
    }
  }
  std::optional<py::error_already_set> raised;
  LayerRestoredCallback told;
  if (!on_layer.is_none()) {
    told = [&](size_t l) {
      const PyEngine::Callback callback(engine);  // before the GIL: see PyEngine
      py::gil_scoped_acquire gil;
      if (raised) return;
      try {
        on_layer(l);
      } catch (py::error_already_set& e) {
        raised = std::move(e);
      }
    };
  }
  RestoreIntoResult out = ValueOr(engine.Call(
      [&](Engine& e) { return e.RestoreInto(match.match, destinations, told); }));
  if (raised) throw std::move(*raised);
  PyRestoredInto r;
  for (size_t l = 0; l < out.written.size(); ++l) {
    const LayerState& layer = out.result.layers[l];
    PyLayer py_layer{layer.cache_type, layer.meta, py::list(), layer.placeholder};
    for (size_t t = 0; t < out.written[l].size(); ++t) {
      py_layer.tensors.append(WrittenView(out.written[l][t], &held[l][t]));
    }
    r.layers.append(std::move(py_layer));
  }
  r.counters = std::make_shared<const RestoreResult>(std::move(out.result));
  return r;
}

void BindRestoredInto(py::module_& m) {
  py::class_<PyRestoreCounters> counters(m, "RestoreCounters", doc::kRestoreCounters);
  auto field = [](auto member) {
    return [member](const PyRestoreCounters& r) { return (*r.counters).*member; };
  };
  counters
      .def_property_readonly("restored_tokens", field(&RestoreResult::restored_tokens),
                             doc::kRestoredTokens)
      .def_property_readonly("restored_blocks", field(&RestoreResult::restored_blocks),
                             doc::kRestoredBlockCount)
      .def_property_readonly("blocks_from_hot", field(&RestoreResult::blocks_from_hot),
                             doc::kBlocksFromHot)
      .def_property_readonly("blocks_from_ssd", field(&RestoreResult::blocks_from_ssd),
                             doc::kBlocksFromSsd)
      .def_property_readonly("tokens_from_hot", field(&RestoreResult::tokens_from_hot),
                             doc::kTokensFromHot)
      .def_property_readonly("tokens_from_ssd", field(&RestoreResult::tokens_from_ssd),
                             doc::kTokensFromSsd)
      .def_property_readonly("tokens_from_remote",
                             field(&RestoreResult::tokens_from_remote),
                             doc::kTokensFromRemote)
      .def_property_readonly("reason", field(&RestoreResult::reason), doc::kReason)
      .def_property_readonly(
          "window_tokens",
          [](const PyRestoreCounters& r) { return r.counters->window.window_tokens; },
          doc::kWindowTokens);
  py::class_<PyRestoredInto, PyRestoreCounters>(m, "RestoredInto", doc::kRestoredInto)
      .def_readonly("layers", &PyRestoredInto::layers, doc::kRestoredIntoLayers)
      .def("__repr__", [](const PyRestoredInto& r) {
        return "RestoredInto(restored_tokens=" +
               std::to_string(r.counters->restored_tokens) +
               ", blocks=" + std::to_string(r.counters->restored_blocks) + ")";
      });
}

}  // namespace prefixkv::python
