// StoreChain: what one store writes, whoever cut its blocks. Store() plans it
// from tokens and layer caches, StoreRecords() from records a client encoded
// (PlanRecords below); the shared path in store.cc then deduplicates, writes,
// rewrites a placeholder tip and updates the tip lineage the same way for
// both (docs/prefix_cache.md, "Supersede-on-extend lineage").
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "block_builder.h"
#include "namespace_state.h"
#include "prefixkv/codec.h"

namespace prefixkv::cache {

struct StoreChain {
  // Cached blocks the store extends, the root's child first: empty when the
  // store starts at the root (always, for Store()). Full blocks, so the j-th
  // starts at token j * block_tokens.
  std::vector<PlannedBlock> ancestors;
  // The store's own blocks in chain order; the last one is its tip.
  std::vector<PlannedBlock> blocks;
  // The tokens of `blocks`, from blocks[0].start on.
  std::span<const int32_t> tokens;
  // The tip carries the real state of every tip-only layer (only namespaces
  // with such layers; otherwise every block holds placeholders for them).
  bool tip_state = false;
};

// Decodes and checks the encoded records of one StoreRecords() call (see
// PrefixCache::StoreRecords for the rules) and plans them: `records` gets the
// decoded records, `tokens` their token ids (chain->tokens views it), `chain`
// the cached ancestors found by walking parent links up to the root.
// Corruption for a record that does not decode, InvalidArgument for one that
// breaks a rule; both name the record.
Status PlanRecords(NamespaceState& ns, const std::vector<SharedBytes>& encoded,
                   const DecodeLimits& limits, std::vector<BlockRecord>* records,
                   std::vector<int32_t>* tokens, StoreChain* chain);

}  // namespace prefixkv::cache
