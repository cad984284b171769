// The routed replay's flags and report (replay_routed.h): the N nodes' token
// hit ratio next to one node with N times the capacity, and the per-node load.
#include "tools/cli/replay_routed.h"

#include <cstdio>

#include "tools/cli/json.h"
#include "tools/replay/routed_replay.h"

namespace prefixkv::cli {
namespace {

using replay::RoutedReplayConfig;
using replay::RoutedReplayReport;

void PrintJson(const RoutedReplayReport& r, const RoutedReplayConfig& c) {
  const double one = r.one_node.token_hit_ratio();
  JsonWriter j;
  j.BeginObject()
      .Field("router", std::string(replay::RouterKindName(c.router)))
      .Field("nodes", uint64_t{c.nodes})
      .Field("requests", r.routed.requests)
      .Field("token_hit_ratio", r.routed.token_hit_ratio())
      .Field("block_hit_ratio", r.routed.block_hit_ratio())
      .Field("one_node_token_hit_ratio", one)
      .Field("ratio_to_one_node", one > 0 ? r.routed.token_hit_ratio() / one : 0)
      .Field("max_over_mean_tokens", r.max_over_mean_tokens())
      .Field("max_over_mean_requests", r.max_over_mean_requests())
      .Field("load_bound", c.router_options.load_bound)
      .Field("ssd_block_weight", c.router_options.ssd_block_weight)
      .Field("event_delay_requests", c.event_delay_requests)
      .Field("in_flight_per_node", c.in_flight_per_node)
      .Field("seed", c.seed)
      .Field("events", r.events)
      .Field("router_events", r.router.events)
      .Field("router_blocks", r.router.blocks)
      .Field("routed_by_prefix", r.router.routed_by_prefix)
      .Field("seconds", r.routed.seconds);
  j.Key("per_node").BeginArray();
  for (const replay::NodeLoad& l : r.loads) {
    j.BeginObject()
        .Field("requests", l.requests)
        .Field("tokens", l.tokens)
        .Field("hit_tokens", l.hit_tokens)
        .EndObject();
  }
  j.EndArray().EndObject();
  std::printf("%s\n", j.str().c_str());
}

void PrintHuman(const RoutedReplayReport& r, const RoutedReplayConfig& c) {
  const double one = r.one_node.token_hit_ratio();
  std::printf("router %s over %zu nodes: token hit ratio %.3f (block %.3f)\n",
              replay::RouterKindName(c.router), c.nodes, r.routed.token_hit_ratio(),
              r.routed.block_hit_ratio());
  std::printf(
      "one node with %zux the capacity: token hit ratio %.3f (routed / one: %.3f)\n",
      c.nodes, one, one > 0 ? r.routed.token_hit_ratio() / one : 0);
  std::printf("load: busiest node / mean %.3f by prompt tokens, %.3f by requests\n",
              r.max_over_mean_tokens(), r.max_over_mean_requests());
  if (c.router == replay::RouterKind::kPrefix) {
    std::printf(
        "events %llu emitted, %llu applied (delay %llu requests); %llu of %llu requests "
        "routed by prefix; index %llu blocks\n",
        (unsigned long long)r.events, (unsigned long long)r.router.events,
        (unsigned long long)c.event_delay_requests,
        (unsigned long long)r.router.routed_by_prefix,
        (unsigned long long)r.routed.requests, (unsigned long long)r.router.blocks);
  }
  std::printf("%-5s %10s %14s %10s\n", "node", "requests", "prompt_tokens", "hit_ratio");
  for (size_t i = 0; i < r.loads.size(); ++i) {
    const replay::NodeLoad& l = r.loads[i];
    std::printf("%-5zu %10llu %14llu %10.3f\n", i, (unsigned long long)l.requests,
                (unsigned long long)l.tokens,
                l.tokens ? double(l.hit_tokens) / double(l.tokens) : 0.0);
  }
}

// Fills `c` from the router flags; an error text for a usage error.
std::string Configure(const Flags& flags, RoutedReplayConfig* c) {
  StatusOr<replay::RouterKind> kind = replay::ParseRouterKind(flags.GetString("router"));
  if (!kind.ok()) return "--router: " + std::string(kind.status().message());
  c->router = *kind;
  std::string error;
  c->router_options.load_bound = GetReal(flags, "load-bound", 1.25, 0, 1e6, &error);
  if (!error.empty()) return error;
  if (c->router_options.load_bound != 0 && c->router_options.load_bound < 1)
    return NotInRange(flags, "load-bound", ">= 1 (0: no bound)");
  c->router_options.ssd_block_weight =
      GetReal(flags, "ssd-block-weight", 0, 0, 1, &error);
  if (!error.empty()) return error;
  auto count = [&](const char* name, uint64_t def) {
    std::optional<uint64_t> v = flags.GetCount(name, &error);
    return v ? *v : def;
  };
  c->event_delay_requests = count("event-delay-requests", 0);
  c->in_flight_per_node = count("in-flight-per-node", 32);
  c->seed = count("seed", 1);
  if (!error.empty()) return error;
  if (c->in_flight_per_node < 1 || c->in_flight_per_node > 1'000'000)
    return NotInRange(flags, "in-flight-per-node", "1..1000000");
  return "";
}

}  // namespace

std::vector<FlagSpec> RouterFlagSpecs() {
  return {
      {"router",
       "with --nodes: route each request by a router fed by the nodes' KV events: "
       "prefix (longest cached prefix under a load bound), round-robin or random; "
       "the report sets the N nodes next to one node with N times the capacity "
       "(docs/router.md)",
       false, "none: request i on node i % N"},
      {"load-bound",
       "prefix router: no node takes a request by prefix above this times the mean "
       "in-flight load (0: no bound)",
       false, "1.25"},
      {"ssd-block-weight",
       "prefix router: a block on SSD counts this much next to one in RAM (0: the "
       "longest RAM prefix wins, SSD breaks ties)",
       false, "0"},
      {"event-delay-requests",
       "events reach the router this many requests after the request that caused them",
       false, "0"},
      {"in-flight-per-node",
       "requests in flight per node: a request weighs its prompt tokens until N times "
       "this many later requests were routed",
       false, "32"},
      {"seed", "random router: the seed", false, "1"}};
}

int RunRoutedReplayCommand(const Flags& flags, const replay::ReplayConfig& node,
                           size_t nodes, const std::vector<replay::TraceRequest>& trace,
                           const std::string& ssd_dir,
                           std::function<void(size_t, size_t)> progress) {
  RoutedReplayConfig c;
  c.node = node;
  c.nodes = nodes;
  if (std::string e = Configure(flags, &c); !e.empty()) return UsageError(flags, e);
  if (!node.remote.empty()) return UsageError(flags, "--router takes no --remote");
  if (!node.ssd.off()) c.node.ssd_path = ssd_dir;
  c.progress = std::move(progress);
  StatusOr<RoutedReplayReport> r = replay::RunRoutedReplay(trace, c);
  if (!r.ok()) return Failure(flags, "replay", r.status().ToString());
  flags.GetBool("json") ? PrintJson(*r, c) : PrintHuman(*r, c);
  return kExitOk;
}

}  // namespace prefixkv::cli
