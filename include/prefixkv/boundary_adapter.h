// KvBoundaryAdapter: runs one shard of a pipeline-split model for one session step,
// reading and committing that session's KV through a SessionManager.
//
// A step is a prefill (a prompt, or the first tokens of a new turn) or a decode
// (usually one token). The head shard takes token ids; every other shard takes the
// BoundaryBundle its upstream shard returned. A non-tail shard returns a
// BoundaryBundle for the next shard; the tail returns a TailOutput with the greedy
// token. A lookup that finds no usable state returns the CacheMiss instead of
// computing anything.
//
// Positions continue from the session's length, so a session opened with restored
// KV (SessionOpenOptions::initial_layers) prefills only the new suffix. A step is all or
// nothing: on cancellation (Aborted), budget refusal (NoSpace) or any error the
// session is exactly as before the call, and a session the step itself opened is
// discarded again.
//
// With a manager bound to an Engine namespace (SessionManagerOptions::prefix_cache), a
// Prefill that opens the session first restores the longest cached prefix of
// its tokens (hot, then SSD) and computes only the rest: a new turn of a
// conversation, or one whose session was released, evicted or lost in a
// restart, prefills only its new tokens (up to block granularity). The head
// shard restores at most all prompt tokens but the last (the last one must run
// to give logits). In a pipeline every other shard gets the same token_ids and
// restores exactly the positions its upstream shard restored (the boundary's
// first position); when it cannot, the step is a kPrefixUnavailable miss and
// the caller re-runs the head with max_restore_tokens set to what the miss
// says that shard holds. EndTurn (or Release) stores the session's blocks.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "prefixkv/clock.h"
#include "prefixkv/session.h"
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
  // The token ids of the positions this step covers, from the session's length
  // before the step (for a session the step opens: from position 0, the whole
  // prompt). Required on the head shard. Optional on other shards; when given
  // they are recorded so the session can be stored in the prefix cache, and on
  // a Prefill that opens the session they name the prefix to restore.
  std::vector<int32_t> token_ids;
  std::optional<BoundaryBundle> boundary;  // every other shard
  // The sequence length the caller believes the cache holds before this step; a
  // disagreement is a kSeqLenMismatch miss. Unset: no check (beyond the
  // boundary's own positions for non-head shards).
  // A Prefill that opens the session checks it against 0 (before any restore).
  std::optional<int64_t> expected_seq_len;
  // Most positions a Prefill that opens the session restores from the prefix
  // cache; 0 restores nothing. Unset: as many as are cached.
  std::optional<int64_t> max_restore_tokens;
  const CancellationToken* cancel = nullptr;  // optional
};

// What one step did and where its time went (for `prefixkv bench session`).
struct StepStats {
  uint64_t total_nanos = 0;    // the whole Prefill/Decode call
  uint64_t compute_nanos = 0;  // embed + layers + final norm + LM head
  // Filled by a Prefill that opened the session (zero otherwise):
  PrefixRestore restore;
  int64_t computed_tokens = 0;  // positions this step ran
};
using StepTimings = StepStats;

// Thread-safe: concurrent steps on different sessions run in parallel; steps on one
// session serialize on its KV (a step that raced another's append gets a miss).
class KvBoundaryAdapter {
 public:
  // Both must outlive the adapter. `clock` (null: System) only times steps.
  KvBoundaryAdapter(const ShardComputation* shard, SessionManager* manager,
                    Clock* clock = nullptr);

  // Opens the session when it is not live (a stale epoch is an error, a newer one
  // supersedes), then runs the step. Errors: stale epoch, malformed input, Aborted,
  // NoSpace.
  StatusOr<StepOutput> Prefill(const std::string& session_id, uint64_t epoch,
                               const StepInput& input, StepTimings* timings = nullptr);
  // Runs a step on a live session; a missing session is returned as a CacheMiss.
  StatusOr<StepOutput> Decode(const std::string& session_id, uint64_t epoch,
                              const StepInput& input, StepTimings* timings = nullptr);
  // The end of a turn: stores the live session's blocks in the manager's
  // prefix cache (SessionManager::StoreToPrefixCache).
  StatusOr<SessionStoreResult> EndTurn(const std::string& session_id, uint64_t epoch);

  const ShardComputation& shard() const { return *shard_; }

 private:
  // What a step runs: the head's tokens to embed (or the boundary), the ids to
  // record, and the length the caller expects the session to hold.
  struct StepPlan {
    std::span<const int32_t> run_tokens;     // head: embedded
    std::span<const int32_t> record_tokens;  // recorded by Append (may be empty)
    std::optional<int64_t> expected_seq_len;
  };
  StatusOr<StepOutput> RunStep(const std::shared_ptr<Session>& session, uint64_t epoch,
                               const StepInput& input, const StepPlan& plan,
                               StepTimings* timings);
  // Opens the session for a Prefill, restoring from the prefix cache; a miss
  // when a non-head shard cannot restore its upstream's prefix. `created`:
  // false when another step opened the session meanwhile (then it is not this
  // step's to discard).
  StatusOr<std::variant<std::shared_ptr<Session>, CacheMiss>> OpenForPrefill(
      const std::string& session_id, uint64_t epoch, const StepInput& input,
      StepPlan* plan, StepTimings* timings, bool* created);
  Status CheckInput(const StepInput& input) const;

  const ShardComputation* shard_;
  SessionManager* manager_;
  Clock* clock_;
};

}  // namespace prefixkv
