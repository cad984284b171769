// Engine.events / event_snapshot / event_log_stats: the KV event log
// (docs/events.md) for Python. events() returns an EventIterator that reads
// pages of Engine::Events without the GIL and hands out one dict per event.
#include <algorithm>
#include <chrono>
#include <deque>
#include <utility>

#include "convert.h"
#include "docstrings.h"
#include "py_types.h"

namespace prefixkv::python {
namespace {

// Pages read at a time.
constexpr size_t kPageEvents = 1024;

// An iterator's wait is cut into calls of at most this long: a close()
// pending meanwhile goes ahead after the current slice (the next one finds
// the engine closed) instead of waiting for the whole wait, which a thread
// tailing the log makes as long as it likes.
constexpr uint64_t kWaitSliceMs = 100;

// The field names of the RESP stream entries (docs/events.md), plus "seq".
py::dict EventDict(const KvEvent& e) {
  py::dict d;
  d["seq"] = e.seq;
  d["kind"] = std::string(KvEventKindName(e.kind));
  d["reason"] = std::string(KvRemoveReasonName(e.reason));
  d["tier"] = std::string(TierLevelName(e.tier));
  d["from"] = std::string(TierLevelName(e.from));
  d["copy_remains"] = e.copy_remains;
  d["owner"] = e.owner;
  d["namespace"] = e.namespace_id.ToHex();
  d["key"] = e.key.ToHex();
  d["parent"] = e.parent.ToHex();
  d["bytes"] = e.bytes;
  d["unix_ms"] = e.unix_ms;
  return d;
}

py::list BlocksList(const std::vector<KvSnapshotBlock>& blocks) {
  py::list out;
  for (const KvSnapshotBlock& b : blocks) {
    py::dict d;
    d["namespace"] = b.namespace_id.ToHex();
    d["key"] = b.key.ToHex();
    d["parent"] = b.parent.ToHex();
    d["owner"] = b.owner;
    d["bytes"] = b.bytes;
    out.append(std::move(d));
  }
  return out;
}

py::dict LogStatsDict(const KvEventLogStats& s) {
  py::dict d;
  d["enabled"] = s.enabled;
  d["persistent"] = s.persistent;
  d["head_seq"] = s.head_seq;
  d["first_seq"] = s.first_seq;
  d["events"] = s.events;
  d["bytes"] = s.bytes;
  d["retention_bytes"] = s.retention_bytes;
  d["retention_ms"] = s.retention_ms;
  d["appended"] = s.appended;
  d["trimmed"] = s.trimmed;
  d["reconciled"] = s.reconciled;
  d["write_errors"] = s.write_errors;
  d["keys_hot"] = s.keys_hot;
  d["keys_ssd"] = s.keys_ssd;
  return d;
}

// Iterates the events from next_seq on; stops once caught up and nothing
// came within wait_ms. Threads may share one iterator: each read releases
// the GIL, so two threads can read the same page (from the same next_seq);
// Take hands each event out once all the same.
struct EventIterator {
  std::shared_ptr<PyEngine> engine;
  uint64_t next_seq = 0;  // after the last event buffered (or handed out)
  uint64_t wait_ms = 0;
  std::deque<KvEvent> buffered;

  py::dict Next() {
    if (buffered.empty()) Read();
    if (buffered.empty()) throw py::stop_iteration();
    KvEvent e = buffered.front();
    buffered.pop_front();
    return EventDict(e);
  }
  // Buffers the next page, waiting up to wait_ms for one, slice by slice.
  // Each slice reads from next_seq as it was when the slice began (a copy:
  // another thread may move it while this one reads without the GIL).
  void Read() {
    using Clock = std::chrono::steady_clock;
    const Clock::time_point start = Clock::now();
    for (;;) {
      const auto waited =
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
      const uint64_t left = wait_ms - std::min<uint64_t>(waited.count(), wait_ms);
      const uint64_t slice = std::min(left, kWaitSliceMs);
      const uint64_t from = next_seq;
      StatusOr<KvEventPage> page =
          engine->Call([&](Engine& e) { return e.Events(from, kPageEvents, slice); });
      // Another thread moved the iterator on meanwhile: what this read found
      // (or refused) may lie behind it; caught up or not, ask again from
      // where the iterator is.
      const bool overtaken = from != next_seq;
      if (!page.ok() && overtaken) continue;
      Take(ValueOr(std::move(page)));
      if (!buffered.empty() || (left <= slice && !overtaken)) return;
      RaiseIfASignalHandlerRaised();
    }
  }
  // Runs the Python handlers of the signals that came during the slice (the
  // main thread only; elsewhere nothing): a wait without the GIL defers them,
  // so a tail waiting for hours ignored Ctrl-C (KeyboardInterrupt) and a
  // SIGTERM handler until its wait ran out or an event came. A handler that
  // raises ends the wait with its exception; the events already read stay
  // buffered, so the iterator resumes where it was.
  static void RaiseIfASignalHandlerRaised() {
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
  // Buffers the events of a page read from next_seq or before it: another
  // thread's page may have buffered (or handed out) its first events while
  // this one was read; the page's events from next_seq on follow them.
  void Take(const KvEventPage& page) {
    for (const KvEvent& e : page.events) {
      if (e.seq >= next_seq) buffered.push_back(e);
    }
    next_seq = std::max(next_seq, page.next_seq);
  }
  // The seq to resume from: after the last event handed out.
  uint64_t Resume() const { return buffered.empty() ? next_seq : buffered.front().seq; }
};

}  // namespace

void BindEvents(py::module_& m, py::class_<PyEngine, std::shared_ptr<PyEngine>>& engine) {
  py::class_<EventIterator>(m, "EventIterator", doc::kEventIterator)
      .def(
          "__iter__", [](EventIterator& it) -> EventIterator& { return it; },
          doc::kEventIter)
      .def("__next__", &EventIterator::Next, doc::kEventNext)
      .def_property_readonly("next_seq", &EventIterator::Resume, doc::kEventNextSeq);
  engine
      .def(
          "events",
          [](std::shared_ptr<PyEngine> e, uint64_t from_seq, uint64_t wait_ms) {
            return EventIterator{std::move(e), from_seq, wait_ms, {}};
          },
          py::arg("from_seq") = 0, py::kw_only(), py::arg("wait_ms") = 0, doc::kEvents)
      .def(
          "event_snapshot",
          [](PyEngine& e) {
            KvEventSnapshot s =
                ValueOr(e.Call([](Engine& en) { return en.EventSnapshot(); }));
            py::dict d;
            d["seq"] = s.seq;
            d["hot"] = BlocksList(s.hot);
            d["ssd"] = BlocksList(s.ssd);
            return d;
          },
          doc::kEventSnapshot)
      .def(
          "event_log_stats",
          [](PyEngine& e) {
            return LogStatsDict(e.Call([](Engine& en) { return en.EventLogStats(); }));
          },
          doc::kEventLogStats);
}

}  // namespace prefixkv::python
