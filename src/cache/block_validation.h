// Restore-side checks: a block read back must fit the namespace layout and
// the chain position it was matched at before any of it is served.
#pragma once

#include <span>

#include "src/cache/namespace_state.h"

namespace prefixkv::cache {

// Checks block `index` of a match: its parent and namespace, a full block of
// exactly `tokens` (when it stores tokens), one layer per namespace layer of
// the same family (by family, not name), sliceable layers real with
// `block_tokens` rows on the token axis, the namespace dtype and the same
// shapes as the `first` block of the restore (null for the first block
// itself), real rotating layers with offset == (index + 1) * block_tokens.
// Corruption (with the reason) for the first mismatch.
Status ValidateBlock(const PrefixCache::NamespaceState& ns, const BlockRecord& record,
                     size_t index, const BlockKey& parent,
                     std::span<const int32_t> tokens, const BlockRecord* first);

}  // namespace prefixkv::cache
