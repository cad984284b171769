// The Engine class of the prefixkv extension module and its value classes
// (py_types.h). Every engine call runs without the GIL (PyEngine::Call); numpy
// arrays are checked and read with it, and copied into tensors without it.
#include <pthread.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "convert.h"
#include "docstrings.h"
#include "prefixkv/advanced/engine_internals.h"
#include "prefixkv/advanced/hot_tier.h"
#include "prefixkv/prefix_token_fields.h"
#include "prefixkv/remote_counter_fields.h"
#include "prefixkv/tier_counter_fields.h"
#include "py_types.h"

namespace prefixkv::python {
namespace {

py::dict CountersDict(const TierCounters& c) {
  py::dict d;
  for (const TierCounterField& f : kTierCounterFields) d[f.name] = c.*f.field;
  return d;
}

// Restore latencies: bucket upper bounds (microseconds), per-bucket counts
// (one more than bounds: the last counts the slower ones), their sum.
py::dict LatencyDict(const RestoreLatencyStats& l) {
  py::dict d;
  d["bucket_bounds_micros"] =
      std::vector<uint64_t>(RestoreLatencyStats::kBucketBoundsMicros.begin(),
                            RestoreLatencyStats::kBucketBoundsMicros.end());
  d["counts"] = std::vector<uint64_t>(l.counts.begin(), l.counts.end());
  d["sum_micros"] = l.sum_micros;
  d["count"] = l.count();
  return d;
}

py::dict StatsDict(const EngineStats& s) {
  py::dict d;
  d["hot_capacity_bytes"] = s.hot_capacity_bytes;
  d["hot"] = CountersDict(s.hot);
  py::list owners;
  for (const EngineOwnerStats& o : s.owners) {
    py::dict od;
    od["name"] = o.name;
    od["hot"] = CountersDict(o.hot);
    od["hot_quota_bytes"] = o.hot_quota_bytes ? py::cast(*o.hot_quota_bytes) : py::none();
    od["ssd"] = CountersDict(o.ssd);
    od["restore_latency"] =
        o.restore_latency ? py::object(LatencyDict(*o.restore_latency)) : py::none();
    // A registered model's token counters, under their INFO/PKV.STATS names.
    if (o.prefix_tokens) {
      py::dict tokens;
      for (const PrefixTokenField& f : kPrefixTokenFields)
        tokens[f.name] = (*o.prefix_tokens).*f.field;
      od["prefix_tokens"] = tokens;
    } else {
      od["prefix_tokens"] = py::none();
    }
    owners.append(od);
  }
  d["owners"] = owners;
  d["dirty_blocks"] = s.dirty_blocks;
  d["memory_mapped_bytes"] = s.memory_mapped_bytes;
  d["memory_regions"] = s.memory_regions;
  d["has_ssd"] = s.has_ssd;
  d["ssd_capacity_bytes"] = s.ssd_capacity_bytes;
  d["ssd"] = CountersDict(s.ssd);
  d["ssd_queued_blocks"] = s.ssd_queued_blocks;
  d["ssd_write_back_failed_blocks"] = s.ssd_write_back_failed_blocks;
  d["ssd_write_back_failures"] = s.ssd_write_back_failures;
  d["ssd_read_ahead_reads"] = s.ssd_read_ahead_reads;
  d["ssd_read_ahead_served"] = s.ssd_read_ahead_served;
  d["ssd_read_ahead_stale"] = s.ssd_read_ahead_stale;
  d["ssd_read_ahead_unused"] = s.ssd_read_ahead_unused;
  d["ssd_read_ahead_bytes"] = s.ssd_read_ahead_bytes;
  d["has_remote"] = s.has_remote;
  py::dict r;
  r["cluster"] = s.remote_describe;
  r["available"] = s.remote.available;
  for (const RemoteCounterField& f : kRemoteCounterFields) r[f.name] = s.remote.*f.field;
  d["remote"] = r;
  py::dict a;
  a["sampling_rate"] = s.advisor.sampling_rate;
  a["sampled_keys"] = s.advisor.sampled_keys;
  a["memory_bytes"] = s.advisor.memory_bytes;
  a["references"] = s.advisor.references;
  py::list points;
  for (const AdvisorPoint& p : s.advisor.points) {
    py::dict pd;
    pd["tier"] = p.tier;
    pd["factor"] = p.factor;
    pd["capacity_bytes"] = p.capacity_bytes;
    pd["capacity_blocks"] = p.capacity_blocks;
    pd["hit_ratio"] = p.hit_ratio;
    points.append(pd);
  }
  a["points"] = points;
  d["advisor"] = a;
  return d;
}

py::dict AuditDict(const EngineAudit& a) {
  py::dict d;
  d["ok"] = a.ok();
  py::list findings, orphans;
  for (const AuditFinding& f : a.findings)
    findings.append(py::make_tuple(f.what, f.detail));
  for (const BlockKey& k : a.orphans) orphans.append(k.ToHex());
  d["findings"] = findings;
  d["orphans"] = orphans;
  return d;
}

// One layer to store: a Layer, or a sequence of arrays taking the namespace's
// layer type and no meta.
struct LayerToStore {
  std::string cache_type;
  std::vector<std::string> meta;
  bool placeholder = false;
  std::vector<ArrayBytes> tensors;
  py::list arrays;  // keeps the arrays alive while their bytes are copied
};

std::vector<LayerToStore> CheckLayers(const PyNamespace& ns, const py::sequence& layers) {
  const size_t want = ns.spec.layer_types.size();
  if (layers.size() != want) {
    Raise(Status::InvalidArgument(std::to_string(layers.size()) +
                                  " layers given; model " + ns.spec.model + " has " +
                                  std::to_string(want)));
  }
  std::vector<LayerToStore> out(want);
  for (size_t l = 0; l < want; ++l) {
    LayerToStore& layer = out[l];
    py::object item = layers[l];
    py::sequence tensors;
    if (py::isinstance<PyLayer>(item)) {
      const PyLayer& given = item.cast<const PyLayer&>();
      layer.cache_type = given.cache_type;
      layer.meta = given.meta;
      layer.placeholder = given.placeholder;
      tensors = given.tensors;
    } else if (py::isinstance<py::sequence>(item) && !py::isinstance<py::array>(item)) {
      layer.cache_type = ns.spec.layer_types[l];
      tensors = item.cast<py::sequence>();
    } else {
      Raise(Status::InvalidArgument("layer " + std::to_string(l) +
                                    ": a prefixkv.Layer or a sequence of numpy arrays "
                                    "is needed"));
    }
    for (size_t i = 0; i < tensors.size(); ++i) {
      const std::string what =
          "layer " + std::to_string(l) + " tensor " + std::to_string(i);
      py::array array = AsArray(tensors[i], what);
      layer.tensors.push_back(ValueOr(CheckArray(array, ns.spec.dtype, what)));
      layer.arrays.append(array);
    }
  }
  return out;
}

// "normal" or "unlikely" (ReuseHint); InvalidArgument otherwise (a
// prefixkv.Error, as python.md promises of every failure, and a ValueError).
StoreOptions ParseStoreOptions(const std::string& reuse) {
  if (reuse == "normal") return {};
  if (reuse == "unlikely") return {.reuse = ReuseHint::kUnlikely};
  Raise(Status::InvalidArgument("reuse must be 'normal' or 'unlikely', not '" + reuse +
                                "'"));
}

StoreResult Store(PyEngine& engine, const PyNamespace& ns, const py::object& tokens,
                  const py::sequence& layers, const std::string& reuse) {
  const StoreOptions options = ParseStoreOptions(reuse);
  const std::vector<int32_t> ids = TokenIds(tokens);
  const std::vector<LayerToStore> checked = CheckLayers(ns, layers);
  return ValueOr(engine.Call([&](Engine& e) -> StatusOr<StoreResult> {
    // The copies run here, without the GIL.
    std::vector<LayerState> states(checked.size());
    for (size_t l = 0; l < checked.size(); ++l) {
      states[l].cache_type = checked[l].cache_type;
      states[l].meta = checked[l].meta;
      states[l].placeholder = checked[l].placeholder;
      for (const ArrayBytes& bytes : checked[l].tensors) {
        states[l].tensors.push_back(CopyToTensor(bytes, ns.spec.dtype));
      }
    }
    return e.Store(ns.ns, ids, states, options);
  }));
}

// A child forked from a process that opened an engine, ending as a Python
// program ends (sys.exit, the end of its script: a preloading server's
// worker), ran the C++ static destructors the parent registered, and
// RocksDB's wait for ever for threads only the parent has (a timer's
// condition variable one of them was waiting on). Such a child now ends
// right after its interpreter (whose exit handlers have run, sys.stdout
// flushed), with its status and C stdio flushed: as os._exit would then.
void EndWithoutTheParentsStaticDestructors(int status, void* /*unused*/) {
  std::fflush(nullptr);
  _exit(status);
}
void AfterForkInTheChild() { on_exit(&EndWithoutTheParentsStaticDestructors, nullptr); }
// Called by every open: the handler registered in a child runs before the
// destructors of every static constructed before the fork (exit handlers run
// last registered first).
void EndForkedChildrenWithoutStaticDestructors() {
  static std::once_flag once;
  std::call_once(once, [] { pthread_atfork(nullptr, nullptr, &AfterForkInTheChild); });
}

// The process whose engines with a data directory started RocksDB's
// background threads (flushes, compactions: one set per process, kept for
// its life once started); 0: none yet. Read and set with the GIL.
pid_t rocksdb_threads_process = 0;

// A forked child has none of those threads, yet its RocksDB thinks it has
// them: a database opened there waited for ever for its first flush (the
// engine's close() never returned). So an engine with a data directory is
// refused in a process forked from one that opened such an engine.
Status CheckRocksDbCanRunHere(const std::string& data_dir) {
  if (data_dir.empty()) return Status::OK();  // RAM only: no RocksDB
  if (rocksdb_threads_process == 0) rocksdb_threads_process = getpid();
  if (rocksdb_threads_process == getpid()) return Status::OK();
  return Status::NotSupported(
      "this process was forked from process " + std::to_string(rocksdb_threads_process) +
      ", which opened an engine with a data directory: RocksDB's background "
      "threads stay there, and one opened here would wait for them for ever; open "
      "it in a process started afresh (multiprocessing's spawn or forkserver), or "
      "open a RAM-only engine (data_dir=None) here");
}

// The engines this process opened, to close at its end. Read and changed
// with the GIL.
std::vector<std::weak_ptr<PyEngine>>& OpenedEngines() {
  static auto* engines = new std::vector<std::weak_ptr<PyEngine>>();  // used at exit
  return *engines;
}

void NoteOpenedEngine(const std::shared_ptr<PyEngine>& engine) {
  std::vector<std::weak_ptr<PyEngine>>& engines = OpenedEngines();
  std::erase_if(engines, [](const std::weak_ptr<PyEngine>& e) { return e.expired(); });
  engines.push_back(engine);
}

// An atexit function: closes every engine still open, then raises the first
// failure. A daemon thread still calling an engine when the program ends
// (a stats scraper, an events() tail) holds it, so it was never collected,
// hence never closed: the blocks it held in RAM for the SSD tier were lost.
// The close waits for the thread's call in flight (daemon threads still run
// during atexit); its later calls are refused. A fork's copies
// are let go of, not closed (PyEngine::Close), and an engine whose call is
// in a callback running Python code is flushed, not closed
// (PyEngine::CloseAtExit).
void CloseOpenedEnginesAtExit() {
  std::vector<std::weak_ptr<PyEngine>> engines;
  engines.swap(OpenedEngines());
  Status first = Status::OK();
  for (const std::weak_ptr<PyEngine>& weak : engines) {
    const std::shared_ptr<PyEngine> engine = weak.lock();
    if (engine == nullptr) continue;
    const Status closed = engine->CloseAtExit();
    if (first.ok()) first = closed;
  }
  Check(first);
}

std::shared_ptr<PyEngine> OpenEngine(std::optional<std::string> data_dir,
                                     uint64_t hot_bytes, uint64_t ssd_bytes,
                                     const std::string& durability, bool write_through,
                                     bool create_if_missing,
                                     const std::string& hot_policy, bool quiet,
                                     const std::string& remote,
                                     const std::string& remote_write, bool event_log) {
  EngineOptions o;
  o.event_log = event_log;
  o.remote = remote;
  o.remote_write = ValueOr(ParseRemoteWriteMode(remote_write));
  // data_dir="" (an unset variable: os.environ.get("DIR", "")) opened a RAM
  // only engine, as None does, and every store was lost at close().
  if (data_dir && data_dir->empty()) {
    Raise(Status::InvalidArgument(
        "data_dir is empty: give a directory, or None for a RAM-only engine"));
  }
  o.data_dir = data_dir.value_or("");
  o.hot_capacity_bytes = hot_bytes;
  o.ssd_capacity_bytes = ssd_bytes;
  o.durability = ValueOr(ParseSsdDurability(durability));
  o.write_through = write_through;
  o.create_if_missing = create_if_missing;
  o.hot_policy = ValueOr(ParseEvictionPolicy(hot_policy));
  if (quiet) o.log = [](std::string_view) {};
  EndForkedChildrenWithoutStaticDestructors();
  Check(CheckRocksDbCanRunHere(o.data_dir));
  std::unique_ptr<Engine> engine = ValueOr(WithoutGil([&] { return Engine::Open(o); }));
  NoteEngineMemory(engine->memory_resource());
  auto opened = std::make_shared<PyEngine>(std::move(engine));
  NoteOpenedEngine(opened);
  return opened;
}

// Sets the spec field `key` (a register_model / explain_miss keyword) from
// `v`; TypeError for a name that is no spec field.
void SetSpecFieldOrThrow(NamespaceSpec* spec, const std::string& key,
                         const py::handle& v) {
  if (key == "model") {
    spec->model = v.cast<std::string>();
  } else if (key == "layer_types") {
    spec->layer_types = v.cast<std::vector<std::string>>();
  } else if (key == "block_tokens") {
    spec->block_tokens = v.cast<uint32_t>();
  } else if (key == "dtype") {
    spec->dtype = ValueOr(ParseDType(v.cast<std::string>()));
  } else if (key == "layer_shapes") {
    std::string joined;
    for (const std::string& s : v.cast<std::vector<std::string>>()) {
      joined += (joined.empty() ? "" : ",") + s;
    }
    spec->layer_shapes = ValueOr(ParseLayerShapes(joined));
  } else {
    const std::pair<const char*, std::string*> strings[] = {
        {"salt", &spec->salt},
        {"revision", &spec->revision},
        {"tokenizer_hash", &spec->tokenizer_hash},
        {"quantization", &spec->quantization}};
    const std::pair<const char*, uint32_t*> numbers[] = {{"tp_rank", &spec->tp_rank},
                                                         {"tp_size", &spec->tp_size},
                                                         {"pp_rank", &spec->pp_rank},
                                                         {"pp_size", &spec->pp_size}};
    for (const auto& [name, field] : strings) {
      if (key == name) return void(*field = v.cast<std::string>());
    }
    for (const auto& [name, field] : numbers) {
      if (key == name) return void(*field = v.cast<uint32_t>());
    }
    throw py::type_error("no spec field named '" + key + "'");
  }
}

// SetSpecFieldOrThrow, with a value of the wrong type a TypeError naming the
// field and what it takes (pybind11's cast error names neither).
void SetSpecField(NamespaceSpec* spec, const std::string& key, const py::handle& v) {
  try {
    SetSpecFieldOrThrow(spec, key, v);
  } catch (const py::cast_error&) {
    const bool list = key == "layer_types" || key == "layer_shapes";
    const bool number =
        key == "block_tokens" || key.starts_with("tp_") || key.starts_with("pp_");
    throw py::type_error("spec field '" + key + "' takes " +
                         (list     ? "a list of strings"
                          : number ? "an integer in [0, 2**32)"
                                   : "a string") +
                         ", not " + py::repr(v).cast<std::string>());
  }
}

PyNamespace RegisterModel(PyEngine& engine, const std::string& model,
                          const std::vector<std::string>& layer_types,
                          uint32_t block_tokens, const std::string& dtype,
                          const std::string& salt, bool store_partial_tail,
                          std::optional<uint64_t> hot_quota_bytes,
                          const py::kwargs& more) {
  PyNamespace out;
  out.spec.model = model;
  out.spec.layer_types = layer_types;
  out.spec.block_tokens = block_tokens;
  out.spec.dtype = ValueOr(ParseDType(dtype));
  out.spec.salt = salt;
  for (const auto& [key, value] : more)
    SetSpecField(&out.spec, key.cast<std::string>(), value);
  const ModelOptions options{.store_partial_tail = store_partial_tail,
                             .hot_quota_bytes = hot_quota_bytes};
  out.ns =
      ValueOr(engine.Call([&](Engine& e) { return e.RegisterModel(out.spec, options); }));
  return out;
}

py::dict MissDict(const MissExplanation& m) {
  py::dict d;
  d["kind"] = std::string(MissKindName(m.kind));
  d["reason"] = m.reason;
  d["root"] = m.root.ToHex();
  d["prompt_tokens"] = m.prompt_tokens;
  d["full_blocks"] = m.full_blocks;
  d["cached_blocks"] = m.cached_blocks;
  d["restorable_tokens"] = m.restorable_tokens;
  d["first_missed_block"] = m.first_missed_block;
  d["first_missed_key"] = m.first_missed_key.IsZero() ? "" : m.first_missed_key.ToHex();
  d["other_namespace"] = m.other_root.IsZero() ? "" : m.other_root.ToHex();
  d["other_cached_blocks"] = m.other_cached_blocks;
  d["other_has_manifest"] = m.other_has_manifest;
  d["remote_blocks"] = m.remote_blocks;
  d["restorable_with_remote_tokens"] = m.restorable_with_remote_tokens;
  py::list differences;
  for (const ManifestDifference& diff : m.differences) {
    py::dict one;
    one["field"] = diff.field;
    one["stored"] = diff.stored;
    one["asked"] = diff.asked;
    one["text"] = diff.ToString();
    differences.append(one);
  }
  d["differences"] = differences;
  return d;
}

// Engine.explain_miss: the spec of `ns` (or an empty one) with every keyword
// replacing its field.
py::dict ExplainMiss(PyEngine& engine, const py::object& tokens,
                     const std::optional<PyNamespace>& ns, const py::kwargs& fields) {
  NamespaceSpec spec = ns ? ns->spec : NamespaceSpec{};
  for (const auto& [key, value] : fields)
    SetSpecField(&spec, key.cast<std::string>(), value);
  const std::vector<int32_t> ids = TokenIds(tokens);
  return MissDict(
      ValueOr(engine.Call([&](Engine& e) { return e.ExplainMiss(spec, ids); })));
}

void BindValues(py::module_& m) {
  py::class_<PyNamespace>(m, "Namespace", doc::kNamespace)
      .def_property_readonly(
          "model", [](const PyNamespace& n) { return n.spec.model; },
          doc::kNamespaceModel)
      .def_property_readonly(
          "index", [](const PyNamespace& n) { return n.ns.index; }, doc::kNamespaceIndex)
      .def_property_readonly(
          "root", [](const PyNamespace& n) { return n.ns.root.ToHex(); },
          doc::kNamespaceRoot)
      .def_property_readonly(
          "block_tokens", [](const PyNamespace& n) { return n.spec.block_tokens; },
          doc::kNamespaceBlockTokens)
      .def_property_readonly(
          "dtype",
          [](const PyNamespace& n) { return std::string(DTypeName(n.spec.dtype)); },
          doc::kNamespaceDType)
      .def_property_readonly(
          "layer_types", [](const PyNamespace& n) { return n.spec.layer_types; },
          doc::kNamespaceLayerTypes)
      .def("__repr__", [](const PyNamespace& n) {
        return "Namespace(model=" + n.spec.model + ", root=" + n.ns.root.ToHex() + ")";
      });

  py::class_<PyMatch>(m, "Match", doc::kMatch)
      .def_readonly("ns", &PyMatch::ns, doc::kMatchNs)
      .def_property_readonly(
          "matched_tokens", [](const PyMatch& p) { return p.match.matched_tokens(); },
          doc::kMatchTokens)
      .def_property_readonly(
          "keys",
          [](const PyMatch& p) {
            std::vector<std::string> keys;
            for (const BlockKey& k : p.match.keys) keys.push_back(k.ToHex());
            return keys;
          },
          doc::kMatchKeys)
      .def_property_readonly(
          "tiers",
          [](const PyMatch& p) {
            std::vector<std::string> tiers;
            for (TierLevel t : p.match.tiers) tiers.emplace_back(TierLevelName(t));
            return tiers;
          },
          doc::kMatchTiers)
      .def_property_readonly(
          "tokens", [](const PyMatch& p) { return p.match.tokens; }, doc::kMatchTokenIds)
      .def("__repr__", [](const PyMatch& p) {
        return "Match(matched_tokens=" + std::to_string(p.match.matched_tokens()) +
               ", blocks=" + std::to_string(p.match.keys.size()) + ")";
      });

  py::class_<PyLayer>(m, "Layer", doc::kLayer)
      .def(py::init([](std::string cache_type, py::list tensors,
                       std::vector<std::string> meta, bool placeholder) {
             return PyLayer{std::move(cache_type), std::move(meta), std::move(tensors),
                            placeholder};
           }),
           py::arg("cache_type"), py::arg("tensors"),
           py::arg("meta") = std::vector<std::string>{}, py::arg("placeholder") = false,
           doc::kLayerInit)
      .def_readwrite("cache_type", &PyLayer::cache_type, doc::kLayerCacheType)
      .def_readwrite("meta", &PyLayer::meta, doc::kLayerMeta)
      .def_readwrite("tensors", &PyLayer::tensors, doc::kLayerTensors)
      .def_readwrite("placeholder", &PyLayer::placeholder, doc::kLayerPlaceholder)
      .def("__repr__", [](const PyLayer& l) {
        return "Layer(" + l.cache_type + ", " + std::to_string(l.tensors.size()) +
               " tensors" + (l.placeholder ? ", placeholder)" : ")");
      });

  py::class_<PyRestoredBlock>(m, "RestoredBlock", doc::kRestoredBlock)
      .def_readonly("key", &PyRestoredBlock::key, doc::kBlockKey)
      .def_readonly("level", &PyRestoredBlock::level, doc::kBlockLevel)
      .def_readonly("pinned", &PyRestoredBlock::pinned, doc::kBlockPinned)
      .def_readonly("token_count", &PyRestoredBlock::token_count, doc::kBlockTokenCount)
      .def_readonly("partial", &PyRestoredBlock::partial, doc::kBlockPartial)
      .def_readonly("payload_address", &PyRestoredBlock::payload_address,
                    doc::kBlockPayloadAddress)
      .def_readonly("payload_size", &PyRestoredBlock::payload_size,
                    doc::kBlockPayloadSize)
      .def_readonly("layers", &PyRestoredBlock::layers, doc::kBlockLayers);

  py::class_<PyRestored, PyRestoreCounters> restored(m, "Restored", doc::kRestored);
  restored.def_readonly("layers", &PyRestored::layers, doc::kRestoredLayers)
      .def_property_readonly("blocks", &PyRestored::Blocks, doc::kRestoredBlocks);
  restored.def("__repr__", [](const PyRestored& r) {
    return "Restored(restored_tokens=" +
           std::to_string(r.restore->result.restored_tokens) +
           ", blocks=" + std::to_string(r.restore->result.restored_blocks) + ")";
  });

  py::class_<StoreResult>(m, "StoreResult", doc::kStoreResult)
      .def_readonly("blocks", &StoreResult::blocks, doc::kStoreBlocks)
      .def_readonly("blocks_written", &StoreResult::blocks_written, doc::kStoreWritten)
      .def_readonly("blocks_deduplicated", &StoreResult::blocks_deduplicated,
                    doc::kStoreDeduplicated)
      .def_property_readonly(
          "tip", [](const StoreResult& s) { return s.tip.ToHex(); }, doc::kStoreTip)
      .def_readonly("tip_state_stored", &StoreResult::tip_state_stored,
                    doc::kStoreTipState)
      .def_readonly("blocks_hinted_unlikely", &StoreResult::blocks_hinted_unlikely,
                    doc::kStoreHinted)
      .def_readonly("note", &StoreResult::note, doc::kStoreNote)
      .def("__repr__", [](const StoreResult& s) {
        return "StoreResult(blocks=" + std::to_string(s.blocks) +
               ", written=" + std::to_string(s.blocks_written) + ")";
      });
}

}  // namespace

void BindEngine(py::module_& m) {
  py::module_::import("atexit").attr("register")(
      py::cpp_function(&CloseOpenedEnginesAtExit));
  BindRestoredInto(m);  // RestoreCounters first: Restored derives from it
  BindValues(m);
  py::class_<PyEngine, std::shared_ptr<PyEngine>> engine(m, "Engine", doc::kEngine);
  engine
      .def_static(
          "open", &OpenEngine, py::kw_only(), py::arg("data_dir") = py::none(),
          py::arg("hot_bytes") = uint64_t{1} << 30,
          py::arg("ssd_bytes") = uint64_t{64} << 30, py::arg("durability") = "wal",
          py::arg("write_through") = false, py::arg("create_if_missing") = true,
          py::arg("hot_policy") = "lru", py::arg("quiet") = false, py::arg("remote") = "",
          py::arg("remote_write") = "on_spill", py::arg("event_log") = true, doc::kOpen)
      .def("register_model", &RegisterModel, py::arg("model"), py::arg("layer_types"),
           py::kw_only(), py::arg("block_tokens") = 256, py::arg("dtype") = "float16",
           py::arg("salt") = "", py::arg("store_partial_tail") = false,
           py::arg("hot_quota_bytes") = py::none(), doc::kRegisterModel)
      .def("explain_miss", &ExplainMiss, py::arg("tokens"), py::arg("ns") = py::none(),
           doc::kExplainMiss)
      .def(
          "match",
          [](PyEngine& e, const PyNamespace& ns, const py::object& tokens) {
            const std::vector<int32_t> ids = TokenIds(tokens);
            return PyMatch{
                ns, ValueOr(e.Call([&](Engine& en) { return en.Match(ns.ns, ids); }))};
          },
          py::arg("ns"), py::arg("tokens"), doc::kMatchCall)
      .def(
          "restore",
          [](PyEngine& e, const PyMatch& m) {
            return MakeRestored(
                ValueOr(e.Call([&](Engine& en) { return en.RestorePinned(m.match); })));
          },
          py::arg("match"), doc::kRestoreCall)
      .def("restore_into", &RestoreInto, py::arg("match"), py::arg("dests"),
           py::kw_only(), py::arg("on_layer") = py::none(), doc::kRestoreIntoCall)
      .def("store", &Store, py::arg("ns"), py::arg("tokens"), py::arg("layers"),
           py::arg("reuse") = "normal", doc::kStore)
      .def(
          "flush",
          [](PyEngine& e) { Check(e.Call([](Engine& en) { return en.Flush(); })); },
          doc::kFlush)
      .def(
          "close", [](PyEngine& e) { Check(e.Close()); }, doc::kClose)
      .def_property_readonly("closed", &PyEngine::closed, doc::kClosed)
      .def(
          "stats",
          [](PyEngine& e) {
            return StatsDict(e.Call([](Engine& en) { return en.Stats(); }));
          },
          doc::kStats)
      .def(
          "audit",
          [](PyEngine& e) {
            return AuditDict(ValueOr(e.Call([](Engine& en) { return en.Audit(); })));
          },
          doc::kAudit)
      .def(
          "hot_block_address",
          [](PyEngine& e, const PyNamespace& ns, const std::string& key) -> py::object {
            const BlockKey k = ValueOr(BlockKey::FromHex(key));
            StatusOr<SharedBytes> bytes =
                e.Call([&](Engine& en) -> StatusOr<SharedBytes> {
                  PKV_RETURN_IF_ERROR(en.closed()
                                          ? Status::InvalidArgument("engine is closed")
                                          : Status::OK());
                  HotTier* hot = EngineHotTier(en, ns.ns);
                  if (hot == nullptr)
                    return Status::NotFound("no hot tier for this namespace");
                  return hot->Get(k);
                });
            if (!bytes.ok()) return py::none();
            return py::cast(reinterpret_cast<uintptr_t>(bytes->data()));
          },
          py::arg("ns"), py::arg("key"), doc::kHotBlockAddress)
      .def(
          "get_block",
          [](PyEngine& e, const PyNamespace& ns, const std::string& key) -> py::object {
            const BlockKey k = ValueOr(BlockKey::FromHex(key));
            StatusOr<SharedBytes> bytes =
                e.Call([&](Engine& en) { return en.GetBlock(ns.ns, k); });
            if (!bytes.ok() && bytes.status().code() == StatusCode::kNotFound)
              return py::none();
            const SharedBytes record = ValueOr(std::move(bytes));
            return py::bytes(reinterpret_cast<const char*>(record.data()), record.size());
          },
          py::arg("ns"), py::arg("key"), doc::kGetBlock)
      .def(
          "__enter__", [](std::shared_ptr<PyEngine> e) { return e; }, doc::kEnter)
      .def(
          "__exit__",
          [](PyEngine& e, py::args) {
            Check(e.Close());
            return false;
          },
          doc::kExit);
  BindEvents(m, engine);
  BindRestorePlan(m, engine);
}

}  // namespace prefixkv::python
