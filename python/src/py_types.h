// The Python-side value classes of the prefixkv extension module (Namespace,
// Match, Layer, Restored, RestoredBlock) and the Engine wrapper they come from.
//
// Restored holds the C++ PinnedRestore: while it lives every restored hot
// block stays pinned. Each numpy array it hands out holds its own reference to
// the bytes it views and to the pin of the block those bytes belong to, so a
// block stays pinned exactly as long as some array (or view of one) of it, or
// the Restored object, is alive.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "prefixkv/engine.h"

namespace prefixkv::python {

namespace py = pybind11;

// A registered model: its handle and the spec it was registered with.
struct PyNamespace {
  Namespace ns;
  NamespaceSpec spec;
};

struct PyMatch {
  PyNamespace ns;
  MatchResult match;
};

// One layer's cache: a type name, its meta strings and its tensors (numpy
// arrays). What store() accepts per layer and what restore() returns.
struct PyLayer {
  std::string cache_type;
  std::vector<std::string> meta;
  py::list tensors;
  bool placeholder = false;
};

struct PyRestoredBlock {
  std::string key;    // hex
  std::string level;  // "hot" (pinned, the tier's bytes) or "ssd"
  bool pinned = false;
  uint32_t token_count = 0;
  bool partial = false;
  uintptr_t payload_address = 0;  // the encoded record's buffer
  size_t payload_size = 0;
  py::list layers;  // PyLayer, tensors viewing the payload
};

// The counters of a restore (RestoreCounters in Python): the base class of
// Restored and RestoredInto.
struct PyRestoreCounters {
  std::shared_ptr<const RestoreResult> counters;
};

struct PyRestored : PyRestoreCounters {
  std::shared_ptr<const PinnedRestore> restore;
  py::list layers;  // PyLayer
  // PyRestoredBlock list, built on first access (most callers only want layers).
  py::object blocks;
  py::list Blocks();
};

// Engine.restore_into's value: the restore's counters (its layers' tensors
// empty: the bytes are the caller's) and, per layer, views of the caller's
// memory the restore wrote (py_restore_into.cc).
struct PyRestoredInto : PyRestoreCounters {
  py::list layers;  // PyLayer: tensors are writable views of the destinations
};

// The Engine behind the GIL: every call releases the GIL and holds `mu_`
// shared; close() holds it exclusively, so it never runs while another
// thread's call is in flight (Engine::Close's requirement). A call made from
// a callback of a call of the same engine on the same thread (restore_into's
// on_layer) already holds the lock: it runs under that hold, and close()
// there is refused (it would wait for the call it is in). The shared lock is
// taken through `gate_`, which close() holds while it waits: no call starts
// while a close is pending (each then finds the engine closed). The lock
// alone prefers readers, so threads whose calls overlap (events() waits,
// parallel restores) would hold a close() off for as long as they go on.
class PyEngine {
 public:
  explicit PyEngine(std::unique_ptr<Engine> engine) : engine_(std::move(engine)) {}

  // Runs fn(engine) without the GIL, under the shared lock.
  template <typename F>
  auto Call(F&& fn) {
    py::gil_scoped_release nogil;
    if (InCall()) return fn(*engine_);
    std::shared_lock lock = EnterCall();
    CallScope scope(this);
    return fn(*engine_);
  }
  Status Close() {
    if (InCall()) {
      return Status::InvalidArgument(
          "close() from a callback of this engine's own call (restore_into's "
          "on_layer): close it after the call returns");
    }
    py::gil_scoped_release nogil;
    std::lock_guard gate(gate_);
    std::unique_lock lock(mu_);
    return engine_->Close();
  }
  bool closed() const { return engine_->closed(); }

 private:
  // The shared lock for a call, taken once no close() is pending.
  std::shared_lock<std::shared_mutex> EnterCall() {
    std::lock_guard gate(gate_);
    return std::shared_lock(mu_);
  }
  // The engines whose Call this thread is inside (innermost last).
  static std::vector<const PyEngine*>& Calls() {
    thread_local std::vector<const PyEngine*> calls;
    return calls;
  }
  bool InCall() const {
    const std::vector<const PyEngine*>& calls = Calls();
    return std::find(calls.begin(), calls.end(), this) != calls.end();
  }
  struct CallScope {
    explicit CallScope(const PyEngine* e) { Calls().push_back(e); }
    ~CallScope() { Calls().pop_back(); }
    CallScope(const CallScope&) = delete;
    CallScope& operator=(const CallScope&) = delete;
  };

  std::unique_ptr<Engine> engine_;
  std::mutex gate_;  // held by close() from before it waits for mu_
  std::shared_mutex mu_;
};

// Builds the Python value of a restore (arrays viewing the blocks' bytes).
PyRestored MakeRestored(PinnedRestore restore);

// Engine.restore_into (py_restore_into.cc): restores `match` into `dests`
// (per layer, per tensor: a writable buffer or CPU torch tensor), telling
// `on_layer` (None or a callable) each completed layer.
PyRestoredInto RestoreInto(PyEngine& engine, const PyMatch& match,
                           const py::object& dests, const py::object& on_layer);
// Registers RestoreCounters and RestoredInto on `m` (py_restore_into.cc).
void BindRestoredInto(py::module_& m);

// Registers the classes above and the Engine methods on `m` (py_engine.cc).
void BindEngine(py::module_& m);
// Registers Engine.events, event_snapshot, event_log_stats and the
// EventIterator class (py_events.cc).
void BindEvents(py::module_& m, py::class_<PyEngine, std::shared_ptr<PyEngine>>& engine);
// Registers RestorePlan and Engine.plan_restore / memory_regions
// (py_restore_plan.cc).
void BindRestorePlan(py::module_& m,
                     py::class_<PyEngine, std::shared_ptr<PyEngine>>& engine);
// Registers BlockRecord and the codec functions on `m` (py_records.cc).
void BindRecords(py::module_& m);

}  // namespace prefixkv::python
