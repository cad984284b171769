// Engine.restore_into: a restore written straight into memory the caller
// owns (numpy arrays, CPU torch tensors, any writable buffer), through
// Engine::RestoreInto. Each Python object is described to the engine as a
// TensorDestination (pointer, extent, dtype, byte strides, shape) from its
// writable buffer; the buffers stay acquired until the restore returns, so
// nothing moves or is freed under the copy, which runs without the GIL.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "convert.h"
#include "docstrings.h"
#include "py_types.h"

namespace prefixkv::python {
namespace {

// A destination object, its buffer held writable, and the object the views
// of the written part keep alive.
struct HeldDestination {
  py::object owner;
  std::unique_ptr<py::buffer_info> buffer;
};

// Acquires `obj`'s buffer for writing and describes it.
TensorDestination Describe(const py::handle& obj, const std::string& what,
                           HeldDestination* held) {
  py::object target = py::reinterpret_borrow<py::object>(obj);
  if (!py::isinstance<py::array>(target) && !PyObject_CheckBuffer(target.ptr())) {
    target = AsArray(target, what);  // a CPU torch tensor's memory, or InvalidArgument
  }
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
  held->owner = target;
  const py::buffer_info& info = *held->buffer;
  TensorDestination d;
  d.data = info.ptr;
  d.dtype = ValueOr(DTypeOfNumpy(py::dtype(info), what));
  d.strides_bytes.assign(info.strides.begin(), info.strides.end());
  d.shape.assign(info.shape.begin(), info.shape.end());
  // The extent of the buffer: its last element's end.
  uint64_t end = static_cast<uint64_t>(info.itemsize);
  for (size_t i = 0; i < d.shape.size(); ++i) {
    if (d.strides_bytes[i] < 0)
      Raise(Status::InvalidArgument(what + ": negative strides"));
    if (d.shape[i] == 0) end = 0;
    if (end == 0) break;
    end +=
        static_cast<uint64_t>(d.shape[i] - 1) * static_cast<uint64_t>(d.strides_bytes[i]);
  }
  d.size_bytes = end;
  return d;
}

// A writable array of the written part of `held`'s memory.
py::array WrittenView(const RestoredTensorShape& written, const HeldDestination& held) {
  std::vector<py::ssize_t> strides(held.buffer->strides.begin(),
                                   held.buffer->strides.end());
  return py::array(NumpyDType(written.dtype), written.shape, strides, held.buffer->ptr,
                   held.owner);
}

}  // namespace

PyRestoredInto RestoreInto(PyEngine& engine, const PyMatch& match,
                           const py::object& dests, const py::object& on_layer) {
  std::vector<LayerDestination> destinations;
  std::vector<std::vector<HeldDestination>> held;
  for (const py::handle& layer : dests) {
    const size_t l = destinations.size();
    destinations.emplace_back();
    held.emplace_back();
    for (const py::handle& tensor : layer) {
      const std::string what =
          "layer " + std::to_string(l) + " tensor " + std::to_string(held[l].size());
      held[l].emplace_back();
      destinations[l].tensors.push_back(Describe(tensor, what, &held[l].back()));
    }
  }
  std::optional<py::error_already_set> raised;
  LayerRestoredCallback told;
  if (!on_layer.is_none()) {
    told = [&](size_t l) {
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
      py_layer.tensors.append(WrittenView(out.written[l][t], held[l][t]));
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
