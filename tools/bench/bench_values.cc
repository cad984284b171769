// `prefixkv bench values`: the key-value space's per-operation cost in
// process (Engine::GetValue / SetValue / DeleteValue, what `prefixkv serve`
// runs for GET, SET, EXISTS and DEL), against the floor any thread-safe
// zero-copy map of names pays in the same run.
//
//   get_hit_ns       GetValue of a 4 KiB value the hot tier holds
//   get_miss_ns      GetValue of a name never stored (a miss in RAM and on SSD)
//   set_ns           SetValue (plain SET) replacing a 4 KiB value
//   exists_ns        ContainsValue of a stored name
//   limit_ns         mutex + unordered_map<string> find + one shared-buffer
//                    copy, on the same names
//
// An engine on a fresh data directory in $TMPDIR (write-back SSD tier, a hot
// tier holding every value), 1,000 names of the "key:%012d" shape
// redis-benchmark uses, each figure the median of its repeats (min and max
// given), ns per operation on one thread.
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <unordered_map>
#include <vector>

#include "prefixkv/advanced/mutex.h"
#include "prefixkv/engine.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/suite.h"
#include "tools/cli/flags.h"
#include "tools/cli/json.h"

namespace prefixkv::cli {
namespace {

constexpr int kNames = 1000;
constexpr size_t kValueBytes = 4096;
constexpr int kOpsPerRepeat = 200000;

std::vector<std::string> Names(const char* prefix) {
  std::vector<std::string> names;
  char buf[64];
  for (int i = 0; i < kNames; ++i) {
    std::snprintf(buf, sizeof(buf), "%s%012d", prefix, i);
    names.emplace_back(buf);
  }
  return names;
}

// ns per operation of `op(name)` over kOpsPerRepeat names in turn, for each
// repeat; false when an operation failed.
template <typename Op>
bool Time(int repeats, const std::vector<std::string>& names, Op op,
          std::vector<double>* out) {
  bool ok = true;
  for (int r = 0; r < repeats && ok; ++r) {
    const uint64_t start = Clock::System()->NowNanos();
    for (int i = 0; i < kOpsPerRepeat; ++i) ok = op(names[i % kNames]) && ok;
    out->push_back(static_cast<double>(Clock::System()->NowNanos() - start) /
                   kOpsPerRepeat);
  }
  return ok;
}

struct Figures {
  Range get_hit, get_miss, set, exists, limit;
};

bool Measure(Engine& e, int repeats, Figures* f) {
  const std::vector<std::string> stored = Names("key:"), absent = Names("absent:");
  const SharedBytes value = SharedBytes::Copy(std::string(kValueBytes, 'v'));
  for (const std::string& n : stored) {
    if (!e.PutValue(n, value).ok()) return false;
  }
  // The limit: a map of the same names holding the same shared buffers.
  Mutex mu;
  std::unordered_map<std::string, SharedBytes> map;
  for (const std::string& n : stored) map.emplace(n, value);
  std::vector<double> hit, miss, set, exists, limit;
  uint64_t sink = 0;
  // Alternating rounds, one repeat of each figure a round.
  for (int r = 0; r < repeats; ++r) {
    bool ok = Time(
        1, stored,
        [&](const std::string& n) {
          StatusOr<SharedBytes> v = e.GetValue(n);
          sink += v.ok() ? v->size() : 0;
          return v.ok();
        },
        &hit);
    ok = ok &&
         Time(
             1, absent,
             [&](const std::string& n) { return e.GetValue(n).status().IsNotFound(); },
             &miss);
    ok = ok && Time(
                   1, stored,
                   [&](const std::string& n) { return e.PutValue(n, value).ok(); }, &set);
    ok = ok && Time(
                   1, stored, [&](const std::string& n) { return e.ContainsValue(n); },
                   &exists);
    ok = ok && Time(
                   1, stored,
                   [&](const std::string& n) {
                     MutexLock lock(&mu);
                     auto it = map.find(n);
                     if (it == map.end()) return false;
                     SharedBytes copy = it->second;
                     sink += copy.size();
                     return true;
                   },
                   &limit);
    if (!ok) return false;
  }
  DoNotOptimize(sink);
  *f = Figures{Summarize(hit), Summarize(miss), Summarize(set), Summarize(exists),
               Summarize(limit)};
  return true;
}

void Field(JsonWriter& j, const std::string& name, const Range& r) {
  j.Field(name, r.median).Field(name + "_min", r.min).Field(name + "_max", r.max);
}

int RunValuesBench(const std::vector<std::string>& args) {
  BenchArgs bench;
  if (std::optional<int> done = ParseBenchArgs("values", 9, args, &bench)) return *done;
  std::string tmpl =
      (std::filesystem::temp_directory_path() / "prefixkv-bench-values-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) {
    return ReportError(bench.json, "prefixkv bench values", "mkdtemp failed",
                       kExitProblem);
  }
  Figures f;
  bool ok = false;
  {
    EngineOptions o;
    o.data_dir = tmpl;
    o.hot_capacity_bytes = uint64_t{256} << 20;
    o.log = [](std::string_view) {};
    StatusOr<std::unique_ptr<Engine>> e = Engine::Open(o);
    ok = e.ok() && Measure(**e, bench.repeats, &f);
    if (e.ok()) (void)(*e)->Close();
  }
  std::filesystem::remove_all(tmpl);
  if (!ok) {
    return ReportError(bench.json, "prefixkv bench values", "an operation failed",
                       kExitProblem);
  }
  if (bench.json) {
    SuiteJson out("values");
    JsonWriter& j = out.j();
    Field(j, "get_hit_ns", f.get_hit);
    Field(j, "get_miss_ns", f.get_miss);
    Field(j, "set_ns", f.set);
    Field(j, "exists_ns", f.exists);
    Field(j, "limit_ns", f.limit);
    j.Field("get_hit_ratio_vs_limit", f.limit.median / f.get_hit.median);
    out.Print();
  } else {
    std::printf("values (ns per op, median [min-max] of %d):\n", bench.repeats);
    const std::pair<const char*, Range> rows[] = {{"GET hit", f.get_hit},
                                                  {"GET miss", f.get_miss},
                                                  {"SET", f.set},
                                                  {"EXISTS", f.exists},
                                                  {"limit", f.limit}};
    for (const auto& [name, r] : rows) {
      std::printf("  %-9s %8.0f [%.0f-%.0f]\n", name, r.median, r.min, r.max);
    }
  }
  return 0;
}

}  // namespace

PKV_REGISTER_BENCH("values",
                   "Engine GET/SET/EXISTS per-operation cost vs a locked map's floor",
                   RunValuesBench);

}  // namespace prefixkv::cli
