// The Python-side value classes of the prefixkv extension module (Namespace,
// Match, Layer, Restored, RestoredBlock) and the Engine wrapper they come from.
//
// Restored holds the C++ PinnedRestore: while it lives every restored hot
// block stays pinned. Each numpy array it hands out holds its own reference to
// the bytes it views and to the pin of the block those bytes belong to, so a
// block stays pinned exactly as long as some array (or view of one) of it, or
// the Restored object, is alive.
#pragma once

#include <cxxabi.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "convert.h"
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

// Runs fn() without the GIL and returns its value. The GIL is taken back
// here, not in a destructor (py::gil_scoped_release's): a daemon thread
// taking it back while the interpreter finalizes (the program ended with
// the thread in an engine call: a stats scraper, an events() tail) is ended
// by Python with pthread_exit, whose unwinding out of a destructor (noexcept)
// called std::terminate: the program aborted (SIGABRT) at its end.
template <typename F>
auto WithoutGil(F&& fn) -> decltype(fn()) {
  using Result = decltype(fn());
  PyThreadState* const state = PyEval_SaveThread();
  std::optional<std::conditional_t<std::is_void_v<Result>, bool, Result>> result;
  try {
    if constexpr (std::is_void_v<Result>) {
      fn();
    } else {
      result.emplace(fn());
    }
  } catch (abi::__forced_unwind&) {
    throw;  // this thread is ending (pthread_exit): no GIL to take back
  } catch (...) {
    PyEval_RestoreThread(state);
    throw;
  }
  PyEval_RestoreThread(state);  // may end this thread, unwinding from here
  if constexpr (!std::is_void_v<Result>) return std::move(*result);
}

// The Engine behind the GIL: every call releases the GIL and counts itself
// in flight; close() waits until no call is, so it never runs while another
// thread's call is in flight (Engine::Close's requirement). A call made from
// a callback of a call of the same engine on the same thread (restore_into's
// on_layer) runs inside that call, and close() there is refused (it would
// wait for the call it is in). No call starts while a close is pending (each
// then finds the engine closed): calls that overlap (events() waits,
// parallel restores) would otherwise hold a close() off for as long as they
// go on. Except while a callback runs: it runs Python code inside its call,
// which the close waits for, and that code may wait for another thread's
// call (on_layer joining a worker that calls the engine); gating that call
// would leave the three waiting for each other forever.
//
// A process forked while the engine is open (a preloading server's workers,
// os.fork) has a copy of this object but none of the engine's threads, and
// the engine's files are the parent's: there every call is refused, and
// close() and the destructor let go of the engine without closing it (a
// close would write the parent's queued blocks into the parent's directory
// from the child, and join threads the child does not have).
class PyEngine {
 public:
  explicit PyEngine(std::unique_ptr<Engine> engine)
      : engine_(std::move(engine)), pid_(getpid()) {}
  ~PyEngine() {
    if (Forked()) (void)engine_.release();  // the parent's: never closed here
  }
  PyEngine(const PyEngine&) = delete;
  PyEngine& operator=(const PyEngine&) = delete;

  // Raises InvalidArgument in a process forked from the one that opened
  // the engine.
  void CheckNotForked() const {
    if (Forked()) RaiseForked();
  }

  // Runs fn(engine) without the GIL, counted in flight. Refused once the
  // program ends (CloseAtExit): it would run after the engine's flush there.
  template <typename F>
  auto Call(F&& fn) {
    CheckNotForked();
    using Result = decltype(fn(*engine_));
    std::optional<Result> result = WithoutGil([&]() -> std::optional<Result> {
      if (InCall()) {
        if (Exiting()) return std::nullopt;
        return fn(*engine_);
      }
      InFlight in_flight(this);
      if (!in_flight.counted) return std::nullopt;
      CallScope scope(this);
      return fn(*engine_);
    });
    if (!result.has_value()) {
      Raise(Status::InvalidArgument(
          "engine is closed: the program is ending (its engines closed at exit)"));
    }
    return std::move(*result);
  }
  Status Close() {
    if (InCall()) {
      return Status::InvalidArgument(
          "close() from a callback of this engine's own call (restore_into's "
          "on_layer): close it after the call returns");
    }
    if (Forked()) {
      (void)engine_.release();  // the parent's: let go of it, never closed here
      return Status::OK();
    }
    return WithoutGil([&] {
      std::unique_lock lock(mu_);
      // Flushed at exit with a call in a callback, whose end a close (an
      // atexit function's after the module's, on the main thread) would
      // wait for for ever.
      if (exiting_) return Status::OK();
      changed_.wait(lock, [&] { return !closing_; });  // one close at a time
      closing_ = true;
      changed_.wait(lock, [&] { return calls_ == 0; });
      lock.unlock();  // closing_ and no call in flight: none can start
      const Status closed = engine_->Close();
      lock.lock();
      closing_ = false;
      changed_.notify_all();
      return closed;
    });
  }
  // Close at the program's end (the module's atexit function), except that
  // a call whose callback runs Python code (restore_into's on_layer in a
  // daemon thread) is not waited for: that code may wait for ever (for a
  // consumer the program no longer runs), and the close waited with it, so
  // the program never ended. The engine is flushed then (its blocks kept in
  // RAM for the SSD tier written) and left open, and calls are refused
  // from then on (as on a closed engine), so nothing is stored after it.
  Status CloseAtExit() {
    if (Forked()) return Close();
    return WithoutGil([&] {
      std::unique_lock lock(mu_);
      exiting_ = true;
      changed_.notify_all();
      // Another thread's close() also waits for the call in a callback.
      changed_.wait(lock,
                    [&] { return calls_ <= callbacks_ && (calls_ > 0 || !closing_); });
      const bool parked = calls_ > 0;
      if (parked) {
        ++calls_;  // in flight itself: a close() pending elsewhere waits for it
      } else {
        closing_ = true;
      }
      lock.unlock();
      const Status s = parked ? engine_->Flush() : engine_->Close();
      lock.lock();
      if (parked) {
        --calls_;
      } else {
        closing_ = false;
        exiting_ = false;  // closed: calls are then as on any closed engine
      }
      changed_.notify_all();
      return s;
    });
  }
  bool closed() const { return engine_ == nullptr || engine_->closed(); }

  // Held (without the GIL) while a callback of a call of this engine runs
  // Python code: calls from other threads start meanwhile even when a close
  // is pending (see the class comment).
  class Callback {
   public:
    explicit Callback(PyEngine& e) : e_(e) {
      std::lock_guard lock(e_.mu_);
      ++e_.callbacks_;
      e_.changed_.notify_all();
    }
    ~Callback() {
      std::lock_guard lock(e_.mu_);
      --e_.callbacks_;
    }
    Callback(const Callback&) = delete;
    Callback& operator=(const Callback&) = delete;

   private:
    PyEngine& e_;
  };

 private:
  // Whether this process is not the one that opened the engine (a fork).
  bool Forked() const { return getpid() != pid_; }
  [[noreturn]] void RaiseForked() const {
    Raise(Status::InvalidArgument(
        "this engine was opened by process " + std::to_string(pid_) +
        "; a process forked from it cannot use it: open an engine in this process"));
  }
  // A call in flight, counted once no close() is pending or a callback runs.
  struct InFlight {
    explicit InFlight(PyEngine* e) : e_(e) {
      std::unique_lock lock(e_->mu_);
      e_->changed_.wait(
          lock, [&] { return e_->exiting_ || !e_->closing_ || e_->callbacks_ > 0; });
      counted = !e_->exiting_;  // refused once the program ends
      if (counted) ++e_->calls_;
    }
    ~InFlight() {
      if (!counted) return;
      std::lock_guard lock(e_->mu_);
      --e_->calls_;
      e_->changed_.notify_all();
    }
    InFlight(const InFlight&) = delete;
    InFlight& operator=(const InFlight&) = delete;
    PyEngine* e_;
    bool counted = false;
  };
  bool Exiting() {
    std::lock_guard lock(mu_);
    return exiting_;
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

  std::unique_ptr<Engine> engine_;  // null in a fork after close()
  const pid_t pid_;                 // the process that opened it
  std::mutex mu_;                   // guards the four below
  std::condition_variable changed_;
  size_t calls_ = 0;      // in flight (a callback's nested calls not counted)
  size_t callbacks_ = 0;  // running Python code inside a call in flight
  bool closing_ = false;  // a close() is waiting for calls_ == 0, or closing
  bool exiting_ = false;  // CloseAtExit closing, or flushed: calls refused
};

// `held` (pins, blocks, a plan's staging) as a pointer whose last copy
// releases it only in the process that made it: a process forked meanwhile
// lets go of it without releasing it. A release there would take the
// parent's engine's locks (the hot budget's, the memory arena's), which a
// thread of the parent's (one the child does not have) may have held at the
// fork, and wait for them for ever; what it would release is the child's
// copy of memory the parent owns.
template <typename T>
std::shared_ptr<T> ReleasedInThisProcessOnly(std::shared_ptr<T> held) {
  if (held == nullptr) return held;
  T* raw = held.get();
  auto* kept = new std::shared_ptr<T>(std::move(held));
  return std::shared_ptr<T>(raw, [kept, pid = getpid()](T*) {
    if (getpid() == pid) delete kept;  // else left as it is: the parent's
  });
}

// Notes the memory resource an opened engine keeps its blocks in, for
// restore_into to refuse destinations inside it (py_restore_into.cc). Held
// weakly: forgotten once nothing (engine, block, view) holds it.
void NoteEngineMemory(const std::shared_ptr<MemoryResource>& memory);
// Whether [data, data + bytes) overlaps a region of a noted engine memory:
// a block's bytes, immutable, though prefixkv.as_torch gives a writable
// tensor over a restored array. A write there would rewrite the cached
// block in place, and its key then serve another prompt's KV. Only the
// engines this process opened count: in a forked child the parent's
// engines' memory is the child's private copy, which no engine of the
// child's serves, and asking the parent's memory resource for its regions
// would take its lock, which a thread of the parent's may have held at the
// fork (the child then waited for it for ever).
bool InEngineMemory(const void* data, uint64_t bytes);

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
