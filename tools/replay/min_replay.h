// Belady's offline MIN over a trace (`prefixkv replay --policy min`): the
// reference line for the online policies, not a tier.
//
// Same request semantics as TraceReplayer (trace_replay.h): the blocks of a
// request are looked up in chain order up to the first miss, then every later
// block is put. MIN knows, for every resident block, the index of the next
// request that contains it; when a put makes the cache hold more than
// `capacity_blocks` blocks it drops the one whose next use is furthest away
// (never used again = infinitely far), which may be the block just put (a
// bypass). A block is a chain prefix: block i of a request is identified by
// ids 0..i (a 64-bit hash of them), as the chain keys of a real replay are.
#pragma once

#include <cstdint>
#include <vector>

#include "trace_reader.h"
#include "trace_replay.h"

namespace prefixkv::replay {

// The 64-bit prefix identity of every block of every request, in order.
std::vector<std::vector<uint64_t>> PrefixIds(const std::vector<TraceRequest>& requests);

// Replays `requests` under MIN with room for `capacity_blocks` blocks. The
// report has one tier, "min", with the hits, final entries and evictions.
ReplayReport ReplayMin(const std::vector<TraceRequest>& requests,
                       uint64_t capacity_blocks, uint32_t block_tokens);

}  // namespace prefixkv::replay
