// KvBoundaryAdapter: runs one shard of a pipeline-split model for one session step,
// reading and committing that session's KV through a HotKvStateManager.
//
// A step is a prefill (a prompt, or the first tokens of a new turn) or a decode
// (usually one token). The head shard takes token ids; every other shard takes the
// BoundaryBundle its upstream shard returned. A non-tail shard returns a
// BoundaryBundle for the next shard; the tail returns a TailOutput with the greedy
// token. A lookup that finds no usable state returns the CacheMiss instead of
// computing anything.
//
// Positions continue from the session's length, so a session opened with restored
// KV (OpenOptions::initial_layers) prefills only the new suffix. A step is all or
// nothing: on cancellation (Aborted), budget refusal (NoSpace) or any error the
// session is exactly as before the call, and a session the step itself opened is
// discarded again.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "prefixkv/cancellation.h"
#include "prefixkv/clock.h"
#include "prefixkv/hot_kv_state.h"
#include "prefixkv/shard_computation.h"
#include "prefixkv/status.h"

namespace prefixkv {

// What one shard hands the next: hidden states of the step's new positions.
struct BoundaryBundle {
  HiddenStates hidden;             // rows == positions.size()
  std::vector<int64_t> positions;  // absolute, consecutive
  int64_t seq_len = 0;  // sequence length after this step: positions.back() + 1
};

// What the tail shard returns.
struct TailOutput {
  int32_t token_id = -1;      // greedy (argmax) next token
  std::vector<float> logits;  // logits of the last position
  int64_t seq_len = 0;        // sequence length after this step
};

using StepOutput = std::variant<BoundaryBundle, TailOutput, CacheMiss>;

struct StepInput {
  std::vector<int32_t> token_ids;          // head shard only
  std::optional<BoundaryBundle> boundary;  // every other shard
  // The sequence length the caller believes the cache holds before this step; a
  // disagreement is a kSeqLenMismatch miss. Unset: no check (beyond the
  // boundary's own positions for non-head shards).
  std::optional<int64_t> expected_seq_len;
  const CancellationToken* cancel = nullptr;  // optional
};

// Where one step's time went (for `prefixkv bench session`).
struct StepTimings {
  uint64_t total_nanos = 0;    // the whole Prefill/Decode call
  uint64_t compute_nanos = 0;  // embed + layers + final norm + LM head
};

// Thread-safe: concurrent steps on different sessions run in parallel; steps on one
// session serialize on its KV (a step that raced another's append gets a miss).
class KvBoundaryAdapter {
 public:
  // Both must outlive the adapter. `clock` (null: System) only times steps.
  KvBoundaryAdapter(const ShardComputation* shard, HotKvStateManager* manager,
                    Clock* clock = nullptr);

  // Opens the session when it is not live (a stale epoch is an error, a newer one
  // supersedes), then runs the step. Errors: stale epoch, malformed input, Aborted,
  // NoSpace.
  StatusOr<StepOutput> Prefill(const std::string& session_id, uint64_t epoch,
                               const StepInput& input, StepTimings* timings = nullptr);
  // Runs a step on a live session; a missing session is returned as a CacheMiss.
  StatusOr<StepOutput> Decode(const std::string& session_id, uint64_t epoch,
                              const StepInput& input, StepTimings* timings = nullptr);

  const ShardComputation& shard() const { return *shard_; }

 private:
  StatusOr<StepOutput> RunStep(const std::shared_ptr<HotKvSession>& session,
                               uint64_t epoch, const StepInput& input,
                               StepTimings* timings);
  Status CheckInput(const StepInput& input) const;

  const ShardComputation* shard_;
  HotKvStateManager* manager_;
  Clock* clock_;
};

}  // namespace prefixkv
