// Restore-side checks: a block read back must fit the namespace layout and
// the chain position it was matched at before any of it is served.
#pragma once

#include <span>

#include "namespace_state.h"

namespace prefixkv::cache {

// Checks the block of a match that starts at token `start`: its parent and
// namespace, exactly `tokens` (when it stores tokens), one layer per namespace
// layer of the same family (by family, not name), sliceable layers real with
// tokens.size() rows on the token axis, the namespace dtype and the same
// shapes as the `first` block of the restore (null for the first block
// itself), real rotating and arrays layers with tensors, real rotating layers
// with offset == start + tokens.size(), and, in a spec with layer shapes, the
// shapes as CheckStoredShapes compares them wherever nothing else does (the
// first block, a real tip, a block unlike the first; every block in a
// namespace adopted from before its shapes were keyed).
// Corruption (with the reason) for the first mismatch; `other_shapes` (may be
// null) is set when the block holds other shapes than the spec's.
Status ValidateBlock(const cache::NamespaceState& ns, const BlockRecord& record,
                     size_t start, const BlockKey& parent,
                     std::span<const int32_t> tokens, const BlockRecord* first,
                     bool* other_shapes = nullptr);

// Whether a block about to be stored fits the spec's layer shapes where a
// restore relies on them: every layer in a namespace adopted from before its
// shapes were keyed (ValidateBlock checks them all there), else every layer
// but a quantized one: the real window and recurrent (tip-only) layers and
// the plain KV layers, which a restore refuses (ValidateBlock) and drops when
// they do not fit: written, they were acknowledged and never restored.
// A quantized layer packs its head dim (words, scales), which a LayerShape
// does not describe: only its KV heads are compared. OK for a spec without shapes;
// InvalidArgument naming the first misfit.
Status CheckStoredShapes(const cache::NamespaceState& ns, const BlockRecord& record);

// Whether the cached block `key` holds other shapes than the spec's
// (CheckStoredShapes). A block found right is remembered in
// ns.shapes_checked with its TierStack::LocalChangeStamp, read before its
// bytes, and not read again while the stamp stays the same. False for a
// block the local tiers do not hold (or cannot read).
bool CachedBlockHoldsOtherShapes(cache::NamespaceState& ns, const BlockKey& key,
                                 const DecodeLimits& limits) REQUIRES(ns.store_mu);

// Removes `keys` (a chain, first to last) from the local tiers when the
// cached block keys[0] holds other shapes than the spec's (CheckStoredShapes):
// the blocks after it hang below it (Match reaches them only through it), so
// the next store of those tokens writes them all instead of deduplicating
// against them or being refused for not matching them. Under the stores'
// lock, looking at keys[0] again there: a right store of its tokens made
// since the caller read it is kept. A removal that fails (a copy pinned by a
// reader) stops it. OK when it removed them; NotFound when keys[0] is gone or
// of the spec's shapes; else the removal's error.
Status DropBlocksOfOtherShapes(cache::NamespaceState& ns, std::span<const BlockKey> keys,
                               const DecodeLimits& limits);

// For a block served whole (GetBlock: PKV.GET), which its reader takes for
// the spec's shapes, and `payload` its record read from a local tier: OK when
// the spec has no shapes or the record holds them (CheckStoredShapes, every
// layer, as nothing else compares them); else NotFound, never served, as a
// restore refuses it: its tokens and `after`'s count in shape_refused_tokens,
// and it and `after` are removed (DropBlocksOfOtherShapes), but in a
// namespace adopted from before its shapes were keyed, as a restore keeps
// them there. A record that does not decode is NotFound too.
Status RefuseServedBlockOfOtherShapes(cache::NamespaceState& ns,
                                      const SharedBytes& payload,
                                      const BlocksAfter& after,
                                      const DecodeLimits& limits);

}  // namespace prefixkv::cache
