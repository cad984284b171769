// Reading and writing block records through a namespace's TierStack.
#pragma once

#include "namespace_state.h"
#include "prefixkv/codec.h"

namespace prefixkv::cache {

struct LoadedBlock {
  BlockRecord record;
  TierLevel level = TierLevel::kNone;
  SharedBytes payload;  // the bytes read: the record's raw tensors view them
};

// How LoadBlock reads: a restore's read (TierStack::Get: counted as a hit,
// recency touched, SSD and remote hits promoted), or the cache's own
// bookkeeping (TierStack::PeekPayload: counts and moves nothing, local tiers
// only).
enum class BlockRead { kRestore, kBookkeeping };

// Reads and decodes one block. Hot hits are decoded in place (their tensors
// view the hot tier's bytes: zero copy); hot and SSD hits are decoded without
// the record's checksum pass (the SSD tier verified its read; every local
// copy was verified or encoded before it was stored), remote hits with it.
// NotFound for a miss, Corruption for a record that does not decode.
StatusOr<LoadedBlock> LoadBlock(const cache::NamespaceState& ns, const BlockKey& key,
                                BlockRead read, const DecodeLimits& limits);

// For a block read from the remote tier: Corruption unless its record is the
// block at its place in the chain (after `parent`, in this namespace,
// `tokens` tokens), as Match's PromoteRemote checks before taking one; a
// refused copy is reported as LoadBlock reports one (a corruption, deleted).
// OK for a block of a local tier.
Status CheckRemotePlace(const cache::NamespaceState& ns, const LoadedBlock& block,
                        const BlockKey& parent, size_t tokens);

// Encodes `record` and puts it as a new block.
Status PutBlock(const cache::NamespaceState& ns, const BlockRecord& record,
                const EncodeOptions& options);

// Encodes `record` and rewrites the block in every tier holding it.
Status RewriteBlock(const cache::NamespaceState& ns, const BlockRecord& record,
                    const EncodeOptions& options);

}  // namespace prefixkv::cache
