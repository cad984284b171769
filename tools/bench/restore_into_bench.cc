// RestoreInto against memcpy (restore_into_bench.h). The two sides run in
// pairs, alternating which goes first (the machine's speed drifts within a
// run), and each pair gives one ratio: into one warm caller buffer (what an
// embedder that registered its memory once sees), and into freshly mapped
// memory for both (every page faulted in by the copy itself).
#include "tools/bench/restore_into_bench.h"

#include <sys/mman.h>

#include <cstring>

#include "prefixkv/advanced/hash.h"

namespace prefixkv::cli {

CallerMemory::CallerMemory(const std::vector<LayerState>& layers) {
  for (const LayerState& l : layers) {
    for (const Tensor& t : l.tensors) size_ += t.nbytes();
  }
  void* p =
      mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return;
  data_ = static_cast<uint8_t*>(p);
  size_t at = 0;
  for (const LayerState& l : layers) {
    LayerDestination& d = destinations_.emplace_back();
    for (const Tensor& t : l.tensors) {
      d.tensors.push_back(
          {.data = data_ + at, .size_bytes = t.nbytes(), .dtype = t.dtype()});
      at += t.nbytes();
    }
  }
}

CallerMemory::~CallerMemory() {
  if (data_ != nullptr) munmap(data_, size_);
}

void CallerMemory::Touch() { std::memset(data_, 0, size_); }

bool CallerMemory::Holds(const std::vector<LayerState>& layers) const {
  size_t at = 0;
  for (const LayerState& l : layers) {
    for (const Tensor& t : l.tensors) {
      if (std::memcmp(data_ + at, t.data(), t.nbytes()) != 0) return false;
      at += t.nbytes();
    }
  }
  return at == size_;
}

uint64_t CallerMemory::Digest() const { return Hash64(data_, size_); }

StatusOr<TimedRestoreInto> TimeRestoreInto(Engine& engine, Namespace ns,
                                           const std::vector<int32_t>& tokens,
                                           const CallerMemory& memory) {
  TimedRestoreInto t;
  const uint64_t start = Clock::System()->NowNanos();
  uint64_t first = 0;
  PKV_ASSIGN_OR_RETURN(MatchResult m, engine.Match(ns, tokens));
  PKV_ASSIGN_OR_RETURN(t.out, engine.RestoreInto(m, memory.destinations(), [&](size_t l) {
    if (l == 0) first = Clock::System()->NowNanos();
  }));
  const uint64_t end = Clock::System()->NowNanos();
  if (t.out.result.restored_tokens != tokens.size()) {
    return Status::Internal("RestoreInto restored " +
                            std::to_string(t.out.result.restored_tokens) + " of " +
                            std::to_string(tokens.size()) + " tokens");
  }
  t.whole_s = static_cast<double>(end - start) * 1e-9;
  t.first_layer_s = static_cast<double>(first - start) * 1e-9;
  return t;
}

namespace {

double SecondsOf(const std::function<void()>& fn) {
  const uint64_t start = Clock::System()->NowNanos();
  fn();
  return static_cast<double>(Clock::System()->NowNanos() - start) * 1e-9;
}

}  // namespace

StatusOr<RestoreIntoFigures> MeasureRestoreInto(Engine& engine, Namespace ns,
                                                const std::vector<int32_t>& tokens,
                                                const std::vector<LayerState>& layers,
                                                int repeats) {
  RestoreIntoFigures f;
  CallerMemory warm(layers);
  if (!warm.ok()) return Status::NoSpace("cannot map the caller memory");
  warm.Touch();
  std::vector<uint8_t> src(warm.size(), 1);
  PKV_ASSIGN_OR_RETURN(TimedRestoreInto checked,
                       TimeRestoreInto(engine, ns, tokens, warm));
  f.identical = checked.out.result.restored_tokens == tokens.size() && warm.Holds(layers);
  std::vector<double> ratio_warm, ratio_fresh, first_ms, whole_ms;
  Status failed;
  for (int i = 0; i < repeats; ++i) {
    double into_s = 0, memcpy_s = 0;
    auto into = [&](const CallerMemory& memory) {
      StatusOr<TimedRestoreInto> t = TimeRestoreInto(engine, ns, tokens, memory);
      if (!t.ok()) {
        failed = t.status();
        return;
      }
      into_s = t->whole_s;
      if (&memory == &warm) {
        first_ms.push_back(t->first_layer_s * 1e3);
        whole_ms.push_back(t->whole_s * 1e3);
      }
    };
    auto copy = [&](const CallerMemory& memory) {
      memcpy_s = SecondsOf([&] {
        std::memcpy(memory.data(), src.data(), src.size());
        DoNotOptimize(memory.data());
      });
    };
    // Warm: the same buffer for both sides.
    if (i % 2 == 0)
      into(warm), copy(warm);
    else
      copy(warm), into(warm);
    ratio_warm.push_back(memcpy_s / into_s);
    // Fresh: a new mapping for each side, unmapped outside the timing.
    {
      CallerMemory a(layers), b(layers);
      if (!a.ok() || !b.ok()) return Status::NoSpace("cannot map the caller memory");
      if (i % 2 == 0)
        into(a), copy(b);
      else
        copy(a), into(b);
    }
    ratio_fresh.push_back(memcpy_s / into_s);
    PKV_RETURN_IF_ERROR(failed);
  }
  f.ratio_warm = Summarize(ratio_warm);
  f.ratio_fresh = Summarize(ratio_fresh);
  f.first_layer_ms = Summarize(first_ms);
  f.whole_ms = Summarize(whole_ms);
  return f;
}

}  // namespace prefixkv::cli
