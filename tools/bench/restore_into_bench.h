// The RestoreInto figures of `prefixkv bench restore` (issue 28): restoring
// straight into caller memory against memcpy into the same kind of memory,
// and the time until the first layer is complete next to the whole restore.
#pragma once

#include <span>
#include <vector>

#include "prefixkv/engine.h"
#include "tools/bench/bench_util.h"

namespace prefixkv::cli {

// Caller memory for a restore: one contiguous buffer per tensor of `layers`
// (their shapes), back to back in one anonymous mapping, so its pages are
// fresh (never touched) until written or Touch()ed.
class CallerMemory {
 public:
  explicit CallerMemory(const std::vector<LayerState>& layers);
  ~CallerMemory();
  CallerMemory(const CallerMemory&) = delete;
  CallerMemory& operator=(const CallerMemory&) = delete;

  bool ok() const { return data_ != nullptr; }
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<const LayerDestination> destinations() const { return destinations_; }
  // Faults every page in (a caller's reused, warm buffer).
  void Touch();
  // True when the buffers hold exactly `layers`' bytes.
  bool Holds(const std::vector<LayerState>& layers) const;
  // XXH3-64 of the buffers (to check a later restore against one checked
  // with Holds, after the source layers are gone).
  uint64_t Digest() const;

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::vector<LayerDestination> destinations_;
};

// One Match + RestoreInto, timed by the system clock.
struct TimedRestoreInto {
  double whole_s = 0;
  double first_layer_s = 0;  // until layer 0's callback
  RestoreIntoResult out;
};
StatusOr<TimedRestoreInto> TimeRestoreInto(Engine& engine, Namespace ns,
                                           const std::vector<int32_t>& tokens,
                                           const CallerMemory& memory);

struct RestoreIntoFigures {
  // memcpy's seconds over RestoreInto's, per pair of alternating runs: into
  // the same warm caller memory, and each into freshly mapped memory.
  Range ratio_warm, ratio_fresh;
  Range first_layer_ms, whole_ms;  // RestoreInto into warm memory
  bool identical = false;          // the caller memory held the chain's bytes
};

// `tokens` (whose caches are `layers`) are cached in `ns`'s hot tier.
StatusOr<RestoreIntoFigures> MeasureRestoreInto(Engine& engine, Namespace ns,
                                                const std::vector<int32_t>& tokens,
                                                const std::vector<LayerState>& layers,
                                                int repeats);

}  // namespace prefixkv::cli
