// PrefixRouter (router.h): the choice between nodes. The index gives each
// node's prefix lengths; the load bound decides which nodes may take the
// request by prefix; the least-loaded node takes what no candidate holds.
#include <cmath>

#include "router_state.h"

namespace prefixkv {

StatusOr<std::unique_ptr<PrefixRouter>> PrefixRouter::Open(const RouterOptions& o) {
  if (o.nodes < 1 || o.nodes > kMaxRouterNodes)
    return Status::InvalidArgument("router nodes must be 1.." +
                                   std::to_string(kMaxRouterNodes));
  if (!std::isfinite(o.load_bound) || (o.load_bound != 0 && o.load_bound < 1))
    return Status::InvalidArgument("router load bound must be >= 1 (0: no bound)");
  if (!(o.ssd_block_weight >= 0 && o.ssd_block_weight <= 1))
    return Status::InvalidArgument("router SSD block weight must be 0..1");
  if (o.max_blocks == 0) return Status::InvalidArgument("router max blocks must be > 0");
  return std::unique_ptr<PrefixRouter>(new PrefixRouter(o));
}

PrefixRouter::PrefixRouter(const RouterOptions& options)
    : options_(options), state_(std::make_unique<internal::RouterState>(options)) {}

PrefixRouter::~PrefixRouter() = default;

void PrefixRouter::Apply(size_t node, const KvEvent& event) {
  MutexLock lock(&state_->mu);
  state_->index.Apply(node, event, &state_->stats);
}

void PrefixRouter::ForgetNode(size_t node) {
  MutexLock lock(&state_->mu);
  if (node >= options_.nodes) return;
  state_->index.Forget(node);
  ++state_->stats.node_resets;
}

void PrefixRouter::SetNodeAvailable(size_t node, bool available) {
  MutexLock lock(&state_->mu);
  if (node < options_.nodes) state_->available[node] = available;
}

RouteChoice PrefixRouter::Route(std::span<const BlockKey> keys, uint64_t load) {
  internal::RouterState& s = *state_;
  MutexLock lock(&s.mu);
  s.index.Match(keys, &s.ram, &s.local);
  const size_t n = options_.nodes;
  // The mean load over the nodes that may take the request: a node that is
  // down takes none, and its load (requests it may never finish) would skew
  // the bound.
  uint64_t total = load;
  size_t up = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!s.available[i]) continue;
    total += s.in_flight[i];
    ++up;
  }
  ++s.stats.routed;
  RouteChoice c;
  if (up == 0) {
    ++s.stats.no_node_available;
    c.no_node = true;
    c.node = kMaxRouterNodes;
    return c;
  }
  const double limit = options_.load_bound * static_cast<double>(total) / double(up);
  auto under_bound = [&](size_t i) REQUIRES(s.mu) {
    // The node's load before this request: a node at the bound may still
    // take one more (with equal loads every node is at the mean, and a bound
    // that counted the request would send everything to the least loaded).
    return options_.load_bound == 0 || static_cast<double>(s.in_flight[i]) <= limit;
  };
  auto score = [&](size_t i) REQUIRES(s.mu) {
    return double(s.ram[i]) + options_.ssd_block_weight * double(s.local[i] - s.ram[i]);
  };
  // Visiting from a rotating start spreads ties (idle nodes at the start of
  // a run) instead of always picking node 0.
  const size_t start = s.next_tie++ % n;
  size_t best = n, least = n;
  bool skipped = false;  // an unavailable node held a prefix of the request
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (start + k) % n;
    if (!s.available[i]) {
      skipped = skipped || s.local[i] > 0;
      continue;
    }
    if (least == n || s.in_flight[i] < s.in_flight[least]) least = i;
    if (s.local[i] == 0 || !under_bound(i)) continue;
    if (best == n || score(i) > score(best) ||
        (score(i) == score(best) &&
         (s.local[i] > s.local[best] ||
          (s.local[i] == s.local[best] && s.in_flight[i] < s.in_flight[best])))) {
      best = i;
    }
  }
  c.by_prefix = best != n;
  c.node = c.by_prefix ? best : least;
  c.ram_blocks = s.ram[c.node];
  c.local_blocks = s.local[c.node];
  s.in_flight[c.node] += load;
  if (c.by_prefix) ++s.stats.routed_by_prefix;
  if (skipped) ++s.stats.skipped_unavailable;
  return c;
}

void PrefixRouter::Finish(size_t node, uint64_t load) {
  MutexLock lock(&state_->mu);
  if (node >= options_.nodes) return;
  uint64_t& l = state_->in_flight[node];
  l = load > l ? 0 : l - load;
}

uint64_t PrefixRouter::in_flight(size_t node) const {
  MutexLock lock(&state_->mu);
  return node < options_.nodes ? state_->in_flight[node] : 0;
}

bool PrefixRouter::Holds(size_t node, const BlockKey& key, TierLevel tier) const {
  MutexLock lock(&state_->mu);
  return state_->index.Holds(node, key, tier);
}

RouterStats PrefixRouter::Stats() const {
  MutexLock lock(&state_->mu);
  RouterStats s = state_->stats;
  s.blocks = state_->index.blocks();
  return s;
}

}  // namespace prefixkv
