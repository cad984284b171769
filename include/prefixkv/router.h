// A prefix-aware router over N prefixkv nodes, fed only by their KV event
// streams (kv_events.h; docs/router.md).
//
// The router never asks a node what it holds: it applies each node's events
// to an index of which node holds which block in RAM (the hot tier) and on
// SSD, and routes a request, given as the chain keys of its prompt blocks
// (ChainKeys in block_key.h, the keys the engine stores them under), among
// the nodes available (SetNodeAvailable), to
//   1. among the nodes under the load bound, the one holding the longest
//      prefix of the request in RAM, then the longest in RAM or on SSD, then
//      the least loaded;
//   2. when none of them holds the request's first block, the least-loaded
//      node.
// The load is what the caller says a request weighs (requests, prompt
// tokens): Route() adds it to the chosen node's in-flight load and Finish()
// takes it off again.
//
// Example:
//   RouterOptions o;
//   o.nodes = 4;
//   auto router = PrefixRouter::Open(o).value();
//   engine_options[i].on_kv_event = [&, i](const KvEvent& e) { router->Apply(i, e); };
//   ...
//   RouteChoice c = router->Route(ChainKeys(root, tokens, 256), tokens.size());
//   ... send the request to node c.node; when it is done:
//   router->Finish(c.node, tokens.size());
//
// Thread-safe: every method takes one internal lock (events and requests may
// come from different threads).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "prefixkv/block.h"
#include "prefixkv/kv_events.h"
#include "prefixkv/status.h"

namespace prefixkv {

namespace internal {
class RouterState;  // src/router/router_state.h
}  // namespace internal

// Most nodes one router routes to (one bit each in an index entry).
inline constexpr size_t kMaxRouterNodes = 64;

struct RouterOptions {
  // Nodes routed to, numbered 0..nodes-1; 1..kMaxRouterNodes.
  size_t nodes = 1;
  // The load bound: a node takes a request by prefix only while its in-flight
  // load is at most load_bound times the mean in-flight load over all nodes
  // (the request included), so no node goes above the bound by more than one
  // request. Above every node's bound the request goes to the least-loaded
  // node. >= 1; 0 turns the bound off. Default: 1.25.
  double load_bound = 1.25;
  // What a block on SSD (not in RAM) is worth next to one in RAM when prefixes
  // are compared: a node's score is ram_blocks + ssd_block_weight *
  // (local_blocks - ram_blocks). 0 (default): the longest RAM prefix wins and
  // the longest RAM-or-SSD prefix breaks ties. 0..1.
  double ssd_block_weight = 0;
  // Most distinct blocks the index holds (about 64 bytes each, whatever the
  // number of nodes holding the block: docs/router.md). A stored
  // event for a new block beyond it is dropped (RouterStats::dropped_blocks):
  // the router then routes as if that node did not hold it. Default: 16M
  // blocks (about 1 GiB).
  size_t max_blocks = size_t{1} << 24;
};

struct RouteChoice {
  size_t node = 0;
  // Leading blocks of the request the chosen node holds in RAM, and in RAM or
  // on SSD (as far as its events said when the request was routed).
  size_t ram_blocks = 0;
  size_t local_blocks = 0;
  // False: no node under the bound held the first block, or every node was
  // over its bound; the least-loaded node was chosen.
  bool by_prefix = false;
  // True when every node was unavailable (SetNodeAvailable): no node was
  // chosen (`node` is kMaxRouterNodes) and no load was added.
  bool no_node = false;
};

struct RouterStats {
  uint64_t events = 0;          // applied
  uint64_t ignored_events = 0;  // for a node out of range or a remote tier
  uint64_t dropped_blocks = 0;  // stored events refused at max_blocks
  uint64_t node_resets = 0;     // ForgetNode calls
  uint64_t blocks = 0;          // distinct blocks in the index now
  uint64_t routed = 0;          // Route calls
  uint64_t routed_by_prefix = 0;
  // Route calls that left out an unavailable node holding a prefix of the
  // request (which it would otherwise have been weighed for).
  uint64_t skipped_unavailable = 0;
  // Route calls that found every node unavailable (RouteChoice::no_node).
  uint64_t no_node_available = 0;
};

class PrefixRouter {
 public:
  // InvalidArgument for nodes outside 1..kMaxRouterNodes, a load bound in
  // (0, 1) or not finite, an SSD weight outside [0, 1] or max_blocks 0.
  static StatusOr<std::unique_ptr<PrefixRouter>> Open(const RouterOptions& options);
  ~PrefixRouter();
  PrefixRouter(const PrefixRouter&) = delete;
  PrefixRouter& operator=(const PrefixRouter&) = delete;

  // Applies one event of `node`'s stream; events of a node must come in the
  // node's order, none missing. The numbers are not checked: a node's log
  // skips numbers after a restart without losing events, and tells a
  // consumer that asks for events it no longer holds to resnapshot (the
  // consumer then calls ForgetNode and reads again). kRemote events are
  // ignored (the remote tier is shared, not a node's). A node's restart
  // needs nothing more: its kCleared event empties its RAM bits, its SSD
  // bits stay true.
  void Apply(size_t node, const KvEvent& event);
  // Forgets every block of `node` (a consumer that lost the node's events
  // and must resnapshot). Its in-flight load stays.
  void ForgetNode(size_t node);

  // An unavailable node is left out of Route's choice (prefix and least
  // loaded alike) and of the mean load the bound compares with, until it is
  // available again; what the index knows of it stays, so a node that comes
  // back costs nothing (a restarted one's kCleared empties its RAM bits).
  // `prefixkv route` marks a node unavailable while its event feed is not
  // connected (the node died or left). Every node starts available.
  void SetNodeAvailable(size_t node, bool available);

  // Picks a node for a request whose prompt blocks have chain keys `keys` (in
  // chain order) among the available ones and adds `load` to its in-flight
  // load; RouteChoice::no_node when none is available.
  RouteChoice Route(std::span<const BlockKey> keys, uint64_t load);
  // The request routed to `node` with `load` is done.
  void Finish(size_t node, uint64_t load);

  uint64_t in_flight(size_t node) const;
  // Whether the index says `node` holds `key` in `tier` (kHot or kSsd).
  bool Holds(size_t node, const BlockKey& key, TierLevel tier) const;
  RouterStats Stats() const;
  const RouterOptions& options() const { return options_; }

 private:
  explicit PrefixRouter(const RouterOptions& options);
  const RouterOptions options_;
  std::unique_ptr<internal::RouterState> state_;
};

}  // namespace prefixkv
