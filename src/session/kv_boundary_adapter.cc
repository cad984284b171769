// KvBoundaryAdapter: one shard step = resolve or open, compute under the session's
// shared lock, commit through SessionManager::Append, shape the output.
#include <algorithm>

#include "prefixkv/boundary_adapter.h"

namespace prefixkv {
namespace {

// The computed but not yet committed result of one step.
struct PendingStep {
  std::optional<CacheMiss> miss;
  int64_t base_len = 0;  // session length the computation started from
  std::vector<int64_t> positions;
  CachedRunResult run;
  std::optional<TailOutput> tail;
};

std::vector<int64_t> Consecutive(int64_t first, int64_t count) {
  std::vector<int64_t> out(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) out[static_cast<size_t>(i)] = first + i;
  return out;
}

// Embeds (head) or takes the boundary (others), runs the owned layers against
// `past`, and for the tail applies the final norm and LM head to the last row.
Status Compute(const ShardComputation& shard, const StepInput& input,
               std::span<const int32_t> run_tokens, int64_t seq_len, const PastKv& past,
               PendingStep* step) {
  HiddenStates hidden;
  if (shard.is_head()) {
    PKV_ASSIGN_OR_RETURN(hidden, shard.EmbedTokens(run_tokens));
    step->positions = Consecutive(seq_len, hidden.rows);
  } else {
    hidden = input.boundary->hidden;
    step->positions = input.boundary->positions;
  }
  PKV_ASSIGN_OR_RETURN(
      step->run, shard.RunLayersCached(hidden, step->positions, past, input.cancel));
  if (!shard.is_tail()) return Status::OK();
  const HiddenStates& h = step->run.hidden;
  HiddenStates last{1, h.width,
                    std::vector<float>(h.row(h.rows - 1), h.row(h.rows - 1) + h.width)};
  TailOutput tail;
  tail.logits = shard.LmHead(shard.FinalNorm(last).values.data());
  tail.token_id = ArgMax(tail.logits);
  tail.seq_len = seq_len + h.rows;
  step->tail = std::move(tail);
  return Status::OK();
}

}  // namespace

KvBoundaryAdapter::KvBoundaryAdapter(const ShardComputation* shard,
                                     SessionManager* manager, Clock* clock)
    : shard_(shard), manager_(manager), clock_(clock ? clock : Clock::System()) {}

Status KvBoundaryAdapter::CheckInput(const StepInput& input) const {
  if (shard_->is_head()) {
    if (input.token_ids.empty())
      return Status::InvalidArgument("head shard step without tokens");
    return Status::OK();
  }
  if (!input.boundary)
    return Status::InvalidArgument("non-head shard step without a boundary");
  const BoundaryBundle& b = *input.boundary;
  if (b.positions.empty() || b.hidden.rows != static_cast<int64_t>(b.positions.size()) ||
      b.seq_len != b.positions.back() + 1) {
    return Status::InvalidArgument(
        "malformed boundary bundle: " + std::to_string(b.hidden.rows) + " rows, " +
        std::to_string(b.positions.size()) + " positions, seq_len " +
        std::to_string(b.seq_len));
  }
  return Status::OK();
}

// The ids a step records: the head's run tokens; on other shards the given
// token_ids when they cover exactly the step's positions, else none (unknown).
static std::span<const int32_t> RecordTokens(const ShardComputation& shard,
                                             const StepInput& input,
                                             std::span<const int32_t> ids) {
  if (shard.is_head()) return ids;
  return ids.size() == input.boundary->positions.size() ? ids
                                                        : std::span<const int32_t>();
}

StatusOr<std::variant<std::shared_ptr<Session>, CacheMiss>>
KvBoundaryAdapter::OpenForPrefill(const std::string& session_id, uint64_t epoch,
                                  const StepInput& input, StepPlan* plan,
                                  StepTimings* timings, bool* created) {
  *created = false;
  using Result = std::variant<std::shared_ptr<Session>, CacheMiss>;
  // A new session holds 0 positions before its restore.
  if (input.expected_seq_len && *input.expected_seq_len != 0) {
    return Result(CacheMiss{CacheMissReason::kSeqLenMismatch, session_id, epoch,
                            "step expects " + std::to_string(*input.expected_seq_len) +
                                " cached positions, the session is new"});
  }
  const std::span<const int32_t> ids(input.token_ids);
  // How many leading positions to restore: the head keeps its last token to
  // run; another shard needs exactly its upstream's restored prefix.
  int64_t want = 0;
  if (shard_->is_head()) {
    want = static_cast<int64_t>(ids.size()) - 1;
  } else if (static_cast<int64_t>(ids.size()) == input.boundary->seq_len) {
    want = input.boundary->positions.front();
  }
  const int64_t cap = std::min(want, input.max_restore_tokens.value_or(want));
  PrefixRestore restore;
  PKV_ASSIGN_OR_RETURN(
      std::shared_ptr<Session> session,
      manager_->OpenFromPrefixCache(
          session_id, epoch, ids.first(static_cast<size_t>(std::max<int64_t>(cap, 0))),
          &restore));
  const int64_t restored = restore.restored_tokens;
  if (timings) timings->restore = restore;
  if (!restore.created) {
    // Another step opened it meanwhile: this one runs on it as a step that
    // believes the session new, so it misses unless nothing was appended yet,
    // and it never discards what it did not open.
    plan->run_tokens = ids;
    plan->record_tokens = RecordTokens(*shard_, input, ids);
    plan->expected_seq_len = 0;
    *created = false;
    return Result(std::move(session));
  }
  *created = true;
  const bool bound = manager_->config().prefix_cache.engine != nullptr;
  if (bound && !shard_->is_head() && want > 0 && restored != want) {
    manager_->DiscardIfUnchanged(session, restored);
    return Result(CacheMiss{CacheMissReason::kPrefixUnavailable, session_id, epoch,
                            "the boundary starts at position " + std::to_string(want) +
                                ", this shard's prefix cache restores " +
                                std::to_string(restored)});
  }
  if (shard_->is_head() || (bound && want > 0)) {
    plan->run_tokens = ids.subspan(static_cast<size_t>(restored));
    plan->record_tokens = plan->run_tokens;
  } else {
    plan->run_tokens = {};
    plan->record_tokens = RecordTokens(*shard_, input, ids);
  }
  plan->expected_seq_len = restored;
  return Result(std::move(session));
}

StatusOr<StepOutput> KvBoundaryAdapter::Prefill(const std::string& session_id,
                                                uint64_t epoch, const StepInput& input,
                                                StepTimings* timings) {
  uint64_t start = clock_->NowNanos();
  PKV_RETURN_IF_ERROR(CheckInput(input));
  PKV_ASSIGN_OR_RETURN(SessionOrMiss found, manager_->Resolve(session_id, epoch));
  std::shared_ptr<Session> session;
  StepPlan plan;
  bool opened_here = std::holds_alternative<CacheMiss>(found);
  if (opened_here) {
    PKV_ASSIGN_OR_RETURN(auto opened, OpenForPrefill(session_id, epoch, input, &plan,
                                                     timings, &opened_here));
    if (auto* miss = std::get_if<CacheMiss>(&opened)) return StepOutput(std::move(*miss));
    session = std::get<std::shared_ptr<Session>>(std::move(opened));
  } else {
    session = std::get<std::shared_ptr<Session>>(std::move(found));
    plan.run_tokens = input.token_ids;
    plan.record_tokens = RecordTokens(*shard_, input, input.token_ids);
    plan.expected_seq_len = input.expected_seq_len;
  }
  const int64_t opened_len = plan.expected_seq_len.value_or(0);
  StatusOr<StepOutput> out = RunStep(session, epoch, input, plan, timings);
  // All or nothing: a session this call opened must not outlive a failed step
  // (unless a racing step has filled it meanwhile: then it is that step's).
  if (opened_here && (!out.ok() || std::holds_alternative<CacheMiss>(*out))) {
    manager_->DiscardIfUnchanged(session, opened_len);
  }
  if (timings) timings->total_nanos = clock_->NowNanos() - start;
  return out;
}

StatusOr<StepOutput> KvBoundaryAdapter::Decode(const std::string& session_id,
                                               uint64_t epoch, const StepInput& input,
                                               StepTimings* timings) {
  uint64_t start = clock_->NowNanos();
  PKV_RETURN_IF_ERROR(CheckInput(input));
  PKV_ASSIGN_OR_RETURN(SessionOrMiss found, manager_->Resolve(session_id, epoch));
  if (auto* miss = std::get_if<CacheMiss>(&found)) return StepOutput(std::move(*miss));
  StepPlan plan{input.token_ids, RecordTokens(*shard_, input, input.token_ids),
                input.expected_seq_len};
  StatusOr<StepOutput> out =
      RunStep(std::get<std::shared_ptr<Session>>(found), epoch, input, plan, timings);
  if (timings) timings->total_nanos = clock_->NowNanos() - start;
  return out;
}

StatusOr<SessionStoreResult> KvBoundaryAdapter::EndTurn(const std::string& session_id,
                                                        uint64_t epoch) {
  return manager_->StoreToPrefixCache(session_id, epoch);
}

StatusOr<StepOutput> KvBoundaryAdapter::RunStep(const std::shared_ptr<Session>& session,
                                                uint64_t epoch, const StepInput& input,
                                                const StepPlan& plan,
                                                StepTimings* timings) {
  PendingStep step;
  if (shard_->is_head() && plan.run_tokens.empty()) {
    return Status::InvalidArgument("head shard step without tokens to run");
  }
  Status computed = session->ReadLayers([&](int64_t seq_len, const PastKv& past) {
    step.base_len = seq_len;
    int64_t first = shard_->is_head() ? seq_len : input.boundary->positions.front();
    int64_t expected = plan.expected_seq_len.value_or(first);
    if (expected != seq_len || first != seq_len) {
      step.miss =
          CacheMiss{CacheMissReason::kSeqLenMismatch, session->session_id(), epoch,
                    "step expects " + std::to_string(expected) +
                        " cached positions, cache holds " + std::to_string(seq_len)};
      return Status::OK();
    }
    uint64_t compute_start = clock_->NowNanos();
    Status s = Compute(*shard_, input, plan.run_tokens, seq_len, past, &step);
    if (timings) timings->compute_nanos = clock_->NowNanos() - compute_start;
    return s;
  });
  PKV_RETURN_IF_ERROR(computed);
  if (step.miss) return StepOutput(std::move(*step.miss));
  if (IsCancelled(input.cancel)) return Status::Aborted("cancelled before commit");
  if (timings) timings->computed_tokens = static_cast<int64_t>(step.positions.size());
  // The commit point: refused (a miss) if another step appended since seq_len was read.
  PKV_ASSIGN_OR_RETURN(SessionOrMiss committed,
                       manager_->Append(session->session_id(), epoch, step.run.new_kv,
                                        step.base_len, plan.record_tokens));
  if (auto* miss = std::get_if<CacheMiss>(&committed))
    return StepOutput(std::move(*miss));
  if (step.tail) return StepOutput(std::move(*step.tail));
  int64_t seq_len = step.positions.back() + 1;
  return StepOutput(
      BoundaryBundle{std::move(step.run.hidden), std::move(step.positions), seq_len});
}

}  // namespace prefixkv
