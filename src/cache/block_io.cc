// Block reads and writes through a namespace's TierStack (block_io.h): the one
// place where a BlockRecord becomes tier bytes and back. Payloads from the hot
// tier were encoded or verified by this process and never left memory, so they
// are decoded without a checksum pass; anything from SSD or the remote tier is
// verified again on top of the tier's own check, and a record stored under the
// wrong key is Corruption, never served.
#include "block_io.h"

namespace prefixkv::cache {

StatusOr<LoadedBlock> LoadBlock(const cache::NamespaceState& ns, const BlockKey& key,
                                BlockRead read, const DecodeLimits& limits) {
  PKV_ASSIGN_OR_RETURN(TierHit hit, read == BlockRead::kRestore
                                        ? ns.tiers->Get(key)
                                        : ns.tiers->PeekPayload(key));
  // Hot bytes were encoded by this process, or fully verified when they were
  // stored (StoreRecords), and never left memory since: decode in place
  // without a checksum pass. SSD bytes are verified again here on top
  // of the tier's own check.
  PKV_ASSIGN_OR_RETURN(BlockRecord record, hit.level == TierLevel::kHot
                                               ? DecodeTrustedBlock(hit.payload, limits)
                                               : DecodeBlock(hit.payload, limits));
  if (record.key != key) {
    return Status::Corruption("block " + key.ToHex() + " holds record " +
                              record.key.ToHex());
  }
  return LoadedBlock{std::move(record), hit.level};
}

Status PutBlock(const cache::NamespaceState& ns, const BlockRecord& record,
                const EncodeOptions& options) {
  PKV_ASSIGN_OR_RETURN(SharedBytes payload, EncodeBlock(record, options));
  return ns.tiers->Put(ns.MetaFor(record.key, record.parent), std::move(payload));
}

Status RewriteBlock(const cache::NamespaceState& ns, const BlockRecord& record,
                    const EncodeOptions& options) {
  PKV_ASSIGN_OR_RETURN(SharedBytes payload, EncodeBlock(record, options));
  return ns.tiers->Rewrite(ns.MetaFor(record.key, record.parent), std::move(payload));
}

}  // namespace prefixkv::cache
