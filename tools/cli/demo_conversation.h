// The end-to-end demo behind `prefixkv demo`: a multi-turn conversation on the
// reference model (with sliding-window layers; `--model hybrid`: sliding-window,
// recurrent and full-attention layers) whose KV caches and recurrent states are
// stored in, and restored from, a real PrefixCache over a hot RAM tier spilling
// to SSD.
//
// Every turn opens a new session of a SessionManager bound to the prefix
// cache and prefills the whole conversation through a KvBoundaryAdapter (one
// shard holding the whole model): the adapter restores the cached prefix (hot,
// then SSD) and computes only the rest. The reply is decoded greedily, then
// EndTurn stores the session's blocks for the whole conversation so far
// (partial tail on, so the rotating window state is kept at the exact end of
// every turn) and the session is released. Then the tiers are flushed and
// closed, reopened from the data directory (a restart, with a new manager) and
// one more turn runs, restored from SSD. Every turn's reply is compared with
// the model's stateless greedy decode of the same prompt, token for token and
// every decode step's logits bit for bit, and the tiers are audited.
//
// Not thread-safe: one demo run at a time per data directory.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "prefixkv/engine.h"
#include "prefixkv/status.h"

namespace prefixkv::cli {

struct DemoOptions {
  // Directory holding the SSD tier; wiped (removed and recreated) at start.
  std::string dir;
  // Conversation turns before the restart (the restart turn comes on top).
  int turns = 8;
  // "sliding": 8 layers, 6 with a 32-token window. "hybrid": 8 layers of all
  // three kinds (DemoLayerKinds). Anything else: InvalidArgument.
  std::string model = "sliding";
};

// The layer kinds of the demo model `model` (ModelConfig::layer_kinds), or
// InvalidArgument naming the models there are.
StatusOr<std::string> DemoLayerKinds(const std::string& model);

// What one turn did. Token counts are exact; restored = hot + ssd + remote.
struct DemoTurn {
  uint64_t prompt_tokens = 0;        // conversation so far + the new message
  uint64_t new_tokens = 0;           // the new user message (never cached yet)
  uint64_t restored_hot_tokens = 0;  // restored from blocks found in RAM
  uint64_t restored_ssd_tokens = 0;  // restored from blocks found on SSD
  // Restored from blocks Match fetched from the remote tier (another node
  // computed them); 0 without a remote tier.
  uint64_t restored_remote_tokens = 0;
  uint64_t computed_tokens = 0;  // prompt tokens the model ran
  uint64_t reply_tokens = 0;     // greedily decoded tokens
  double seconds = 0;            // match + restore + prefill + decode + store
  bool parity = false;           // reply == stateless greedy decode
  // Every decode step's logits are bit-identical to the stateless runner's
  // (RunDemoConversation only; --nodes 2 compares tokens).
  bool logit_parity = false;
};

struct DemoReport {
  std::string model;        // DemoOptions::model
  std::string layer_kinds;  // one letter per layer: G full, W window, R recurrent
  uint32_t block_tokens = 0;
  uint64_t hot_capacity_bytes = 0;
  uint64_t hot_evictions = 0;  // blocks the hot tier spilled before the restart
  std::vector<DemoTurn> turns;
  DemoTurn restart;
  // Restored prompt tokens over all prompt tokens, every turn and the restart.
  double hit_ratio = 0;
  bool parity = false;    // tokens and logits, every turn, restart included
  bool audit_ok = false;  // budget + SSD audits clean and no SSD orphans
  std::vector<std::string> audit_findings;  // "what: detail", empty when clean
  uint64_t ssd_blocks_after_restart = 0;    // blocks indexed when reopened
};

// Runs the whole demo. An error Status means the machinery failed (could not
// open the tiers, a store was rejected, ...); parity or audit failures are
// reported in the DemoReport instead.
StatusOr<DemoReport> RunDemoConversation(const DemoOptions& options);

// --- Building blocks of `prefixkv demo --nodes 2` (demo_nodes.h) ---

// Model and tier sizes, as DemoReport reports them.
uint32_t DemoBlockTokens();
uint64_t DemoHotCapacityBytes();

// One turn served by one node: opens the engine over `dir` (created if
// missing, kept across the node's turns) with the remote tier of `remote`,
// continues `conversation` with turn `turn`'s user message exactly as a
// RunDemoConversation turn does (restore, compute the rest, decode, store),
// then flushes (the remote write queue too) and closes the engine.
struct DemoNodeTurnOptions {
  std::string dir;
  int turn = 0;   // 0-based: picks the user message and the session epoch
  int turns = 8;  // turns of the whole run: sizes the live session's RAM room
  std::vector<int32_t> conversation;  // every token before this turn's message
  std::string model = "sliding";      // DemoOptions::model
  // Only remote, remote_write, remote_limits and remote_timeout_ms are used.
  EngineOptions remote;
};
struct DemoNodeTurn {
  DemoTurn turn;  // parity false: the caller checks the reply
  std::vector<int32_t> reply;
  RemoteCounters remote;  // what this engine's remote tier did
};
StatusOr<DemoNodeTurn> RunDemoNodeTurn(const DemoNodeTurnOptions& options);

// The prompt of turn `turn` after `conversation` (the conversation plus the
// turn's user message), and the stateless greedy reply of demo model `model`
// (DemoOptions::model) to `prompt`.
std::vector<int32_t> DemoPrompt(std::span<const int32_t> conversation, int turn);
StatusOr<std::vector<int32_t>> DemoStatelessReply(std::span<const int32_t> prompt,
                                                  const std::string& model = "sliding");

}  // namespace prefixkv::cli
