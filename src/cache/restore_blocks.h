// The loading half of a restore, shared by PrefixCache::Restore (which
// concatenates the blocks into new tensors) and PrefixCache::RestoreInto
// (which copies them into the caller's memory).
#pragma once

#include <vector>

#include "block_io.h"
#include "namespace_state.h"
#include "prefixkv/prefix_types.h"

namespace prefixkv::cache {

// Loads and validates the blocks a restore of `match` uses, in chain order
// (walk-back and the partial tip beside the chain applied: restore.cc), and
// fills `result` except its layers. Empty when nothing is restored (the
// reason in `result`). InvalidArgument for an inconsistent MatchResult.
StatusOr<std::vector<LoadedBlock>> LoadRestoreBlocks(NamespaceState& ns,
                                                     const MatchResult& match,
                                                     const DecodeLimits& limits,
                                                     RestoreResult* result);

// Restored layer `l` without its tensors: cache type (the restored rotating
// type for rotating layers), meta and placeholder flag as Restore sets them.
// REQUIRES: `blocks` not empty.
LayerState RestoredLayerHead(const NamespaceState& ns,
                             const std::vector<LoadedBlock>& blocks, size_t l);

}  // namespace prefixkv::cache
