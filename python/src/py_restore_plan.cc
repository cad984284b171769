// Engine.plan_restore and Engine.memory_regions: a restore as a plan of host
// ranges (Engine::PlanRestore, RestorePlan in prefix_types.h) for a device's copy engine,
// and the regions of the engine's memory resource to register for DMA. The
// plan's ranges are plain integers (addresses, byte counts) a caller hands
// to cudaMemcpy2DAsync or torch; the plan object holds the pins and staging
// until release() or its last reference goes.
#include <memory>
#include <string>
#include <utility>

#include "convert.h"
#include "docstrings.h"
#include "py_types.h"

namespace prefixkv::python {
namespace {

// Engine.plan_restore's value: the counters and the held plan.
struct PyRestorePlan : PyRestoreCounters {
  std::shared_ptr<RestorePlan> plan;
};

py::dict LayerDict(const PlannedLayer& layer) {
  py::list tensors, ranges;
  for (const PlannedTensor& t : layer.tensors) {
    tensors.append(py::make_tuple(std::string(DTypeName(t.shape.dtype)),
                                  py::tuple(py::cast(t.shape.shape)), t.offset,
                                  t.nbytes));
  }
  for (const PlanRange& r : layer.ranges) {
    ranges.append(py::make_tuple(reinterpret_cast<uintptr_t>(r.src), r.bytes, r.count,
                                 r.src_stride_bytes, r.dst_offset, r.dst_stride_bytes));
  }
  py::dict d;
  d["bytes"] = layer.bytes;
  d["tensors"] = tensors;
  d["ranges"] = ranges;
  return d;
}

const RestorePlan& Held(const PyRestorePlan& p) {
  if (p.plan->hold == nullptr) Check(Status::InvalidArgument("the plan was released"));
  return *p.plan;
}

// `dest`'s memory, exported for writing: a writable buffer, or a CPU torch
// tensor through its numpy view. A read-only buffer (bytes, a read-only
// array) raised the exporter's bare ValueError or BufferError, which
// "except prefixkv.Error" missed (python.md: every failure is one); it is
// InvalidArgument now, as a restore_into destination is.
py::buffer_info WritableBuffer(const py::object& dest) {
  const py::object target = PyObject_CheckBuffer(dest.ptr()) != 0
                                ? dest
                                : py::object(AsArray(dest, "copy_layer's buffer"));
  try {
    return py::reinterpret_borrow<py::buffer>(target).request(/*writable=*/true);
  } catch (py::error_already_set& e) {
    Raise(Status::InvalidArgument("copy_layer's buffer: not a writable buffer (" +
                                  std::string(e.what()) + ")"));
  }
}

void CopyLayer(const PyRestorePlan& p, size_t l, const py::object& dest) {
  const RestorePlan& plan = Held(p);
  if (l >= plan.layers.size()) {
    Check(Status::InvalidArgument("layer " + std::to_string(l) + " of a plan of " +
                                  std::to_string(plan.layers.size())));
  }
  py::buffer_info info = WritableBuffer(dest);
  const uint64_t size = static_cast<uint64_t>(info.size) * info.itemsize;
  bool contiguous = true;
  for (py::ssize_t i = info.ndim - 1, want = info.itemsize; i >= 0; --i) {
    contiguous = contiguous && (info.shape[i] == 1 || info.strides[i] == want);
    want *= info.shape[i];
  }
  if (!contiguous || size < plan.layers[l].bytes) {
    Check(Status::InvalidArgument("copy_layer needs a C-contiguous buffer of at least " +
                                  std::to_string(plan.layers[l].bytes) + " bytes"));
  }
  if (InEngineMemory(info.ptr, plan.layers[l].bytes)) {
    Check(Status::InvalidArgument(
        "copy_layer: the buffer lies in an engine's own memory (a restored array, "
        "e.g. through as_torch): its blocks are read-only"));
  }
  // The copy runs without the GIL: another thread may release() the plan
  // meanwhile, so the copy holds the pins and staging itself until it ends
  // (else it would read memory the arena may already have handed out again).
  const std::shared_ptr<const void> hold = plan.hold;
  WithoutGil([&] { CopyPlannedLayer(plan.layers[l], info.ptr); });
}

}  // namespace

void BindRestorePlan(py::module_& m,
                     py::class_<PyEngine, std::shared_ptr<PyEngine>>& engine) {
  py::class_<PyRestorePlan, PyRestoreCounters>(m, "RestorePlan", doc::kRestorePlan)
      .def_property_readonly(
          "layers",
          [](const PyRestorePlan& p) {
            py::list out;
            for (const PlannedLayer& layer : Held(p).layers) out.append(LayerDict(layer));
            return out;
          },
          doc::kRestorePlanLayers)
      .def_property_readonly(
          "held", [](const PyRestorePlan& p) { return p.plan->hold != nullptr; },
          doc::kRestorePlanHeld)
      .def("copy_layer", &CopyLayer, py::arg("layer"), py::arg("dest"),
           doc::kRestorePlanCopyLayer)
      .def(
          "release", [](PyRestorePlan& p) { p.plan->Release(); },
          doc::kRestorePlanRelease)
      .def("__repr__", [](const PyRestorePlan& p) {
        return "RestorePlan(restored_tokens=" +
               std::to_string(p.counters->restored_tokens) +
               ", layers=" + std::to_string(p.plan->layers.size()) + ")";
      });
  engine
      .def(
          "plan_restore",
          [](PyEngine& e, const PyMatch& m) {
            RestorePlan plan =
                ValueOr(e.Call([&](Engine& en) { return en.PlanRestore(m.match); }));
            plan.hold = ReleasedInThisProcessOnly(std::move(plan.hold));
            PyRestorePlan out;
            out.counters = std::make_shared<const RestoreResult>(plan.result);
            out.plan = std::make_shared<RestorePlan>(std::move(plan));
            return out;
          },
          py::arg("match"), doc::kPlanRestoreCall)
      .def(
          "memory_regions",
          [](PyEngine& e) {
            std::vector<MemoryRegion> regions =
                e.Call([](Engine& en) { return en.memory_resource()->Regions(); });
            py::list out;
            for (const MemoryRegion& r : regions) {
              out.append(py::make_tuple(reinterpret_cast<uintptr_t>(r.base), r.bytes));
            }
            return out;
          },
          doc::kMemoryRegions);
}

}  // namespace prefixkv::python
