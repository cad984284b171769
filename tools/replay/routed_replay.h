// Routed replay (`prefixkv replay --nodes N --router ...`; docs/router.md):
// a trace replayed through N in-process engines, each request sent to the
// node a router picks, next to one engine with N times the capacity.
//
// The prefix router (router.h) learns what each node holds only from the
// nodes' KV events (EngineOptions::on_kv_event). The event delay is modelled
// in requests: an event emitted while request j is replayed reaches the
// router before request j + 1 + event_delay_requests is routed (0: the router
// knows every change of the requests before).
//
// Load: a request weighs its prompt tokens (input_length) and stays in flight
// until in_flight_per_node * N later requests have been routed (a fixed
// concurrency, 32 per node by default, as a continuously batching server
// runs dozens of sequences at once; the trace's timestamps do not say when
// a request ends). The load bound acts on this in-flight load; the report
// gives the total tokens and requests each node took.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "prefixkv/router.h"
#include "trace_reader.h"
#include "trace_replay.h"

namespace prefixkv::replay {

enum class RouterKind { kPrefix, kRoundRobin, kRandom };
// "prefix", "round-robin", "random"; InvalidArgument for anything else.
StatusOr<RouterKind> ParseRouterKind(const std::string& name);
const char* RouterKindName(RouterKind kind);

struct RoutedReplayConfig {
  ReplayConfig node;  // every node's tiers; ssd_path is a base directory
  size_t nodes = 4;   // 1..kMaxRouterNodes
  RouterKind router = RouterKind::kPrefix;
  RouterOptions router_options;  // `nodes` is set from above
  uint64_t event_delay_requests = 0;
  uint64_t in_flight_per_node = 32;  // >= 1
  uint64_t seed = 1;                 // for kRandom
  bool compare_one_node = true;      // also replay one node with N x the capacity
  // Called every few hundred requests with the requests replayed and the
  // total, over both replays (the routed one, then the one node's). Null:
  // none.
  std::function<void(size_t done, size_t total)> progress;
};

struct NodeLoad {
  uint64_t requests = 0;
  uint64_t tokens = 0;      // prompt tokens routed to the node
  uint64_t hit_tokens = 0;  // of them, served from its cache
};

struct RoutedReplayReport {
  ReplayReport routed;    // the N nodes together
  ReplayReport one_node;  // one node with N times the capacity (if compared)
  std::vector<NodeLoad> loads;
  RouterStats router;   // the prefix router's counters (zero for the others)
  uint64_t events = 0;  // events the nodes emitted
  // Busiest node over the mean, by prompt tokens and by requests.
  double max_over_mean_tokens() const;
  double max_over_mean_requests() const;
};

// InvalidArgument for a bad configuration; a tier failure as the replayer
// reports it.
StatusOr<RoutedReplayReport> RunRoutedReplay(const std::vector<TraceRequest>& trace,
                                             const RoutedReplayConfig& config);

}  // namespace prefixkv::replay
