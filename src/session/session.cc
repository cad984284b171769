// Session: one (session, epoch)'s per-layer KV behind a reader/writer lock
// (its State, session_internal.h), plus the cache-miss vocabulary and the
// Status predicates of session.h.
#include "session_internal.h"

namespace prefixkv {

std::string_view CacheMissReasonName(CacheMissReason reason) {
  switch (reason) {
    case CacheMissReason::kUnknownSession:
      return "unknown-session";
    case CacheMissReason::kReleased:
      return "released";
    case CacheMissReason::kEvictedTtl:
      return "evicted-ttl";
    case CacheMissReason::kEvictedLru:
      return "evicted-lru";
    case CacheMissReason::kSeqLenMismatch:
      return "seq-len-mismatch";
    case CacheMissReason::kPrefixUnavailable:
      return "prefix-unavailable";
  }
  return "invalid";
}

namespace {
bool Mentions(const Status& s, StatusCode code, std::string_view marker) {
  return s.code() == code && s.message().find(marker) != std::string::npos;
}
}  // namespace

bool IsStaleRouteEpoch(const Status& s) {
  return Mentions(s, StatusCode::kInvalidArgument, "stale route epoch");
}
bool IsIncompatibleRecipe(const Status& s) {
  return Mentions(s, StatusCode::kInvalidArgument, "incompatible kv cache recipe");
}
bool IsKvCacheMiss(const Status& s) {
  return Mentions(s, StatusCode::kNotFound, "kv cache miss");
}

Session::Session(std::string session_id, uint64_t route_epoch,
                 std::vector<int> owned_layers, std::map<int, LayerKvCache> layers,
                 int64_t seq_len)
    : session_id_(std::move(session_id)),
      route_epoch_(route_epoch),
      owned_layers_(std::move(owned_layers)),
      state_(std::make_unique<State>(std::move(layers), seq_len)) {}

Session::~Session() = default;

int64_t Session::seq_len() const {
  ReaderLock lock(&state_->mu);
  return state_->seq_len;
}

uint64_t Session::payload_bytes() const {
  ReaderLock lock(&state_->mu);
  uint64_t total = 0;
  for (const auto& [layer, cache] : state_->layers) total += cache.payload_bytes();
  return total;
}

namespace {
Status NotOwned(int layer, const std::vector<int>& owned) {
  return Status::NotFound("layer " + std::to_string(layer) + " is not owned (owned " +
                          std::to_string(owned.front()) + ".." +
                          std::to_string(owned.back()) + ")");
}
}  // namespace

StatusOr<int64_t> Session::LayerLength(int layer) const {
  ReaderLock lock(&state_->mu);
  auto it = state_->layers.find(layer);
  if (it == state_->layers.end()) return NotOwned(layer, owned_layers_);
  return it->second.length();
}

StatusOr<LayerKvCache> Session::LayerSnapshot(int layer) const {
  ReaderLock lock(&state_->mu);
  auto it = state_->layers.find(layer);
  if (it == state_->layers.end()) return NotOwned(layer, owned_layers_);
  return it->second;
}

std::map<int, LayerKvExport> Session::ExportLayers() const {
  ReaderLock lock(&state_->mu);
  std::map<int, LayerKvExport> out;
  for (const auto& [layer, cache] : state_->layers) out.emplace(layer, cache.Export());
  return out;
}

std::optional<std::vector<int32_t>> Session::tokens() const {
  ReaderLock lock(&state_->mu);
  if (!state_->tokens_known) return std::nullopt;
  return state_->tokens;
}

Status Session::ReadLayers(
    const std::function<Status(int64_t seq_len, const PastKv& past)>& fn) const {
  ReaderLock lock(&state_->mu);
  PastKv past;
  for (const auto& [layer, cache] : state_->layers) past.emplace(layer, &cache);
  return fn(state_->seq_len, past);
}

}  // namespace prefixkv
