// `prefixkv demo --nodes 2`: the demo's conversation served by two prefixkv
// nodes that share a remote tier (issue 13, docs/remote.md "Two nodes").
//
// Node A and node B are separate processes with separate data directories
// (<dir>/node-a, <dir>/node-b, wiped at start). Turn i (1-based) runs on node A
// when i is odd and on node B when it is even. The calling process stays
// single-threaded and opens no engine: for every turn it fork()s one child,
// which opens its node's engine (hot + SSD + the remote tier, remote_write
// always, so every block stored is shared), serves the turn
// (RunDemoNodeTurn), flushes and closes, and sends the turn's counts, reply
// tokens and remote counters back through a pipe. The parent keeps the
// conversation and checks every reply against the model's stateless greedy
// decode. A child that fails, crashes or outlives turn_timeout_ms is an error
// (it is killed and reaped).
//
// Not thread-safe, and it forks: call it from a single-threaded process.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "prefixkv/engine.h"
#include "prefixkv/status.h"
#include "tools/cli/demo_conversation.h"

namespace prefixkv::cli {

struct DemoNodesOptions {
  // Parent of node-a/ and node-b/; wiped (removed and recreated) at start.
  std::string dir;
  int turns = 8;
  std::string model = "sliding";  // DemoOptions::model: sliding or hybrid
  // The remote tier (EngineOptions::remote must be set); remote_write is
  // forced to always.
  EngineOptions remote;
  // Bound of one turn's child process, from fork to exit.
  uint32_t turn_timeout_ms = 60000;
};

struct DemoNodesTurn {
  char node = 'A';  // 'A' or 'B'
  DemoTurn turn;
};

struct DemoNodesReport {
  std::string model;        // DemoNodesOptions::model
  std::string layer_kinds;  // one letter per layer: G full, W window, R recurrent
  uint32_t block_tokens = 0;
  uint64_t hot_capacity_bytes = 0;  // of each node
  std::vector<DemoNodesTurn> turns;
  RemoteCounters remote;  // summed over every turn's process
  bool parity = false;    // every reply equals stateless greedy decode
  // Every turn after the first restored tokens (locally or from the remote
  // tier), and node B's first turn restored some from the remote tier.
  bool later_turns_restored = false;
  bool node_b_restored_remote = false;
  bool pass() const { return parity && later_turns_restored && node_b_restored_remote; }
};

// An error Status means the machinery failed (a node's process failed,
// crashed or timed out, a directory could not be wiped, ...); parity and
// restore failures are reported in the DemoNodesReport instead.
StatusOr<DemoNodesReport> RunDemoNodes(const DemoNodesOptions& options);

}  // namespace prefixkv::cli
