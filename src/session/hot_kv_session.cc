// HotKvSession: one (session, epoch)'s per-layer KV behind a reader/writer lock,
// plus the cache-miss vocabulary and the Status predicates of hot_kv_state.h.
#include <mutex>

#include "prefixkv/hot_kv_state.h"

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

HotKvSession::HotKvSession(std::string session_id, uint64_t route_epoch,
                           std::vector<int> owned_layers,
                           std::map<int, LayerKvCache> layers, int64_t seq_len)
    : session_id_(std::move(session_id)),
      route_epoch_(route_epoch),
      owned_layers_(std::move(owned_layers)),
      layers_(std::move(layers)),
      seq_len_(seq_len) {}

int64_t HotKvSession::seq_len() const {
  std::shared_lock lock(mu_);
  return seq_len_;
}

uint64_t HotKvSession::payload_bytes() const {
  std::shared_lock lock(mu_);
  uint64_t total = 0;
  for (const auto& [layer, cache] : layers_) total += cache.payload_bytes();
  return total;
}

namespace {
Status NotOwned(int layer, const std::vector<int>& owned) {
  return Status::NotFound("layer " + std::to_string(layer) + " is not owned (owned " +
                          std::to_string(owned.front()) + ".." +
                          std::to_string(owned.back()) + ")");
}
}  // namespace

StatusOr<int64_t> HotKvSession::LayerLength(int layer) const {
  std::shared_lock lock(mu_);
  auto it = layers_.find(layer);
  if (it == layers_.end()) return NotOwned(layer, owned_layers_);
  return it->second.length();
}

StatusOr<LayerKvCache> HotKvSession::LayerSnapshot(int layer) const {
  std::shared_lock lock(mu_);
  auto it = layers_.find(layer);
  if (it == layers_.end()) return NotOwned(layer, owned_layers_);
  return it->second;
}

std::map<int, LayerKvExport> HotKvSession::ExportLayers() const {
  std::shared_lock lock(mu_);
  std::map<int, LayerKvExport> out;
  for (const auto& [layer, cache] : layers_) out.emplace(layer, cache.Export());
  return out;
}

std::optional<std::vector<int32_t>> HotKvSession::tokens() const {
  std::shared_lock lock(mu_);
  if (!tokens_known_) return std::nullopt;
  return tokens_;
}

Status HotKvSession::ReadLayers(
    const std::function<Status(int64_t seq_len, const PastKv& past)>& fn) const {
  std::shared_lock lock(mu_);
  PastKv past;
  for (const auto& [layer, cache] : layers_) past.emplace(layer, &cache);
  return fn(seq_len_, past);
}

}  // namespace prefixkv
