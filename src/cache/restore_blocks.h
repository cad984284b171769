// The loading half of a restore, shared by PrefixCache::Restore (which
// concatenates the blocks into new tensors) and PrefixCache::RestoreInto
// (which copies them into the caller's memory).
#pragma once

#include <functional>
#include <vector>

#include "block_io.h"
#include "namespace_state.h"
#include "prefixkv/prefix_types.h"

namespace prefixkv::cache {

// Hears of block i of a match as soon as it is loaded and valid, while the
// next ones are still being read (on the restoring thread, in chain order).
// What the restore finally uses may be fewer blocks: walk-back drops
// trailing ones, or a partial tip beside the chain replaces them.
using LoadedBlockSink = std::function<void(size_t i, const LoadedBlock& block)>;

// Loads and validates the blocks a restore of `match` uses, in chain order
// (walk-back and the partial tip beside the chain applied: restore.cc), and
// fills `result` except its layers. Empty when nothing is restored (the
// reason in `result`). InvalidArgument for an inconsistent MatchResult.
StatusOr<std::vector<LoadedBlock>> LoadRestoreBlocks(
    NamespaceState& ns, const MatchResult& match, const DecodeLimits& limits,
    RestoreResult* result, const LoadedBlockSink& on_loaded = {});

// One restored tensor's pieces: a slice per block stacked on `axis` for
// sliceable layers, the tip's tensor otherwise, and the shape they make.
struct TensorParts {
  RestoredTensorShape restored;
  std::vector<const Tensor*> parts;  // views of the loaded blocks' bytes
  size_t axis = 0;                   // the token axis the parts are stacked on
};

// The parts of tensor `t` of layer `l` and the shape they make together (the
// shape Tensor::Concat would produce, checked the same way: Corruption when
// the blocks disagree).
StatusOr<TensorParts> GatherTensorParts(const std::vector<LoadedBlock>& blocks,
                                        bool sliceable, size_t l, size_t t);

// Restored layer `l` without its tensors: cache type (the restored rotating
// type for rotating layers), meta and placeholder flag as Restore sets them.
// REQUIRES: `blocks` not empty.
LayerState RestoredLayerHead(const NamespaceState& ns,
                             const std::vector<LoadedBlock>& blocks, size_t l);

}  // namespace prefixkv::cache
