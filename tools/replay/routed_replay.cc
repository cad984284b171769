// Routed replay (routed_replay.h): N engines, their events queued and handed
// to the router after the modelled delay, a chooser per router kind, the
// in-flight window and the per-node load; then the one-node comparison.
#include "routed_replay.h"

#include <algorithm>
#include <deque>
#include <filesystem>
#include <random>

#include "prefixkv/advanced/mutex.h"

namespace prefixkv::replay {
namespace {

// The nodes' events on their way to the router. Engines call Push from the
// replaying thread (and possibly from a tier's background thread), hence the
// lock.
class EventQueue {
 public:
  explicit EventQueue(uint64_t delay) : delay_(delay) {}

  void Push(size_t node, const KvEvent& e) EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    queue_.push_back({Due(), node, e});
    ++pushed_;
  }
  // Request `request` is about to be routed: the events due by then reach
  // `router` (if any), in the order they were emitted.
  void Deliver(uint64_t request, PrefixRouter* router) EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    request_ = request;
    while (!queue_.empty() && queue_.front().due <= request) {
      if (router != nullptr) router->Apply(queue_.front().node, queue_.front().event);
      queue_.pop_front();
    }
  }
  uint64_t pushed() EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return pushed_;
  }

 private:
  // The first request routed with an event pushed now known: request_ + 1 +
  // delay_, saturated (a delay near 2^64 wrapped to a due request already
  // reached, and the events arrived at once instead of never).
  uint64_t Due() const REQUIRES(mu_) {
    return delay_ >= UINT64_MAX - request_ - 1 ? UINT64_MAX : request_ + 1 + delay_;
  }

  struct Delayed {
    uint64_t due;  // the first request routed with it known
    size_t node;
    KvEvent event;
  };
  const uint64_t delay_;
  Mutex mu_;
  std::deque<Delayed> queue_ GUARDED_BY(mu_);
  uint64_t request_ GUARDED_BY(mu_) = 0;  // the request being replayed
  uint64_t pushed_ GUARDED_BY(mu_) = 0;
};

// N times a capacity, saturated: a product past 2^64 wrapped into a small
// cache for the one-node comparison.
ReplayCapacity Times(const ReplayCapacity& c, size_t n) {
  auto times = [n](uint64_t v) { return v > UINT64_MAX / n ? UINT64_MAX : v * n; };
  ReplayCapacity out = c;
  if (out.tokens) *out.tokens = times(*out.tokens);
  if (out.bytes) *out.bytes = times(*out.bytes);
  return out;
}

double MaxOverMean(const std::vector<NodeLoad>& loads, uint64_t NodeLoad::*field) {
  uint64_t max = 0, sum = 0;
  for (const NodeLoad& l : loads) {
    max = std::max(max, l.*field);
    sum += l.*field;
  }
  return sum == 0 ? 0 : double(max) * double(loads.size()) / double(sum);
}

// Routes requests for one replay: the chosen router, the in-flight window
// and the per-node totals.
class Dispatcher {
 public:
  Dispatcher(const RoutedReplayConfig& c, PrefixRouter* router, EventQueue* events)
      : config_(c), router_(router), events_(events), loads_(c.nodes), rng_(c.seed) {}

  size_t Choose(const TraceRequest& r, std::span<const BlockKey> keys) {
    events_->Deliver(routed_, router_);
    size_t node = 0;
    switch (config_.router) {
      case RouterKind::kPrefix:
        node = router_->Route(keys, r.input_length).node;
        break;
      case RouterKind::kRoundRobin:
        node = routed_ % config_.nodes;
        break;
      case RouterKind::kRandom:
        node = std::uniform_int_distribution<size_t>(0, config_.nodes - 1)(rng_);
        break;
    }
    window_.push_back({node, r.input_length});
    if (window_.size() > config_.in_flight_per_node * config_.nodes) {
      if (router_ != nullptr)
        router_->Finish(window_.front().first, window_.front().second);
      window_.pop_front();
    }
    return node;
  }

  void Done(size_t node, const TraceRequest& r, size_t hit_blocks) {
    NodeLoad& l = loads_[node];
    ++l.requests;
    l.tokens += r.input_length;
    l.hit_tokens +=
        std::min<uint64_t>(hit_blocks * config_.node.block_tokens, r.input_length);
    ++routed_;
  }

  const std::vector<NodeLoad>& loads() const { return loads_; }

 private:
  const RoutedReplayConfig& config_;
  PrefixRouter* const router_;  // null unless kPrefix
  EventQueue* const events_;
  std::vector<NodeLoad> loads_;
  std::mt19937_64 rng_;
  uint64_t routed_ = 0;
  std::deque<std::pair<size_t, uint64_t>> window_;  // in flight: node, load
};

Status CheckConfig(const RoutedReplayConfig& c) {
  if (c.nodes < 1 || c.nodes > kMaxRouterNodes)
    return Status::InvalidArgument("nodes must be 1.." + std::to_string(kMaxRouterNodes));
  if (c.in_flight_per_node < 1)
    return Status::InvalidArgument("in-flight requests per node must be >= 1");
  if (!c.node.remote.empty() || c.node.remote_store_factory)
    return Status::InvalidArgument("a routed replay has no remote tier");
  return Status::OK();
}

// config.progress over both replays: `before` requests were replayed before
// this pass, of `total`.
std::function<void(size_t, size_t)> PassProgress(const RoutedReplayConfig& config,
                                                 size_t before, size_t total) {
  if (!config.progress) return nullptr;
  return [&config, before, total](size_t done, size_t) {
    config.progress(before + done, total);
  };
}

StatusOr<ReplayReport> ReplayOneNode(
    const std::vector<TraceRequest>& trace, const RoutedReplayConfig& c,
    const std::function<void(size_t, size_t)>& progress) {
  ReplayConfig big = c.node;
  big.hot = Times(c.node.hot, c.nodes);
  big.ssd = Times(c.node.ssd, c.nodes);
  if (!big.ssd_path.empty())
    big.ssd_path = (std::filesystem::path(big.ssd_path) / "one-node").string();
  PKV_ASSIGN_OR_RETURN(std::unique_ptr<ReplayTiers> tiers, ReplayTiers::Open(big));
  TraceReplayer replayer(tiers.get(), c.node.block_tokens);
  PKV_RETURN_IF_ERROR(replayer.ReplayAll(trace, progress));
  return replayer.Report();
}

}  // namespace

StatusOr<RouterKind> ParseRouterKind(const std::string& name) {
  for (RouterKind k :
       {RouterKind::kPrefix, RouterKind::kRoundRobin, RouterKind::kRandom}) {
    if (name == RouterKindName(k)) return k;
  }
  return Status::InvalidArgument("unknown router '" + name +
                                 "' (expected prefix, round-robin or random)");
}

const char* RouterKindName(RouterKind kind) {
  switch (kind) {
    case RouterKind::kPrefix:
      return "prefix";
    case RouterKind::kRoundRobin:
      return "round-robin";
    case RouterKind::kRandom:
      return "random";
  }
  return "?";
}

double RoutedReplayReport::max_over_mean_tokens() const {
  return MaxOverMean(loads, &NodeLoad::tokens);
}
double RoutedReplayReport::max_over_mean_requests() const {
  return MaxOverMean(loads, &NodeLoad::requests);
}

StatusOr<RoutedReplayReport> RunRoutedReplay(const std::vector<TraceRequest>& trace,
                                             const RoutedReplayConfig& config) {
  PKV_RETURN_IF_ERROR(CheckConfig(config));
  std::unique_ptr<PrefixRouter> router;
  if (config.router == RouterKind::kPrefix) {
    RouterOptions o = config.router_options;
    o.nodes = config.nodes;
    PKV_ASSIGN_OR_RETURN(router, PrefixRouter::Open(o));
  }
  EventQueue events(config.event_delay_requests);
  std::vector<std::unique_ptr<ReplayTiers>> opened;
  std::vector<ReplayTiers*> nodes;
  for (size_t i = 0; i < config.nodes; ++i) {
    ReplayConfig node = config.node;
    if (!node.ssd_path.empty())
      node.ssd_path =
          (std::filesystem::path(node.ssd_path) / ("node-" + std::to_string(i))).string();
    node.on_kv_event = [&events, i](const KvEvent& e) { events.Push(i, e); };
    PKV_ASSIGN_OR_RETURN(std::unique_ptr<ReplayTiers> t, ReplayTiers::Open(node));
    nodes.push_back(t.get());
    opened.push_back(std::move(t));
  }
  Dispatcher dispatcher(config, router.get(), &events);
  TraceReplayer replayer(nodes, config.node.block_tokens);
  replayer.set_chooser(
      [&](const TraceRequest& r, std::span<const BlockKey> keys) {
        return dispatcher.Choose(r, keys);
      },
      [&](size_t node, const TraceRequest& r, size_t hit) {
        dispatcher.Done(node, r, hit);
      });
  const size_t total = trace.size() * (config.compare_one_node ? 2 : 1);
  PKV_RETURN_IF_ERROR(replayer.ReplayAll(trace, PassProgress(config, 0, total)));
  RoutedReplayReport report;
  report.routed = replayer.Report();
  report.loads = dispatcher.loads();
  report.events = events.pushed();
  if (router) report.router = router->Stats();
  opened.clear();  // the engines close before the comparison opens its own
  if (config.compare_one_node) {
    PKV_ASSIGN_OR_RETURN(
        report.one_node,
        ReplayOneNode(trace, config, PassProgress(config, trace.size(), total)));
  }
  return report;
}

}  // namespace prefixkv::replay
