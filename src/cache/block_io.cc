// Block reads and writes through a namespace's TierStack (block_io.h): the one
// place where a BlockRecord becomes tier bytes and back. Payloads from the hot
// tier were encoded or verified by this process and never left memory, so they
// are decoded without a checksum pass; anything from SSD or the remote tier is
// verified again on top of the tier's own check, and a record stored under the
// wrong key is Corruption, never served.
#include "block_io.h"

namespace prefixkv::cache {

namespace {

// A remote copy refused here is reported as PrefixCache::PromoteRemote
// reports one: the remote tier counts a corruption and a miss (not the hit
// its read counted) and deletes the value, which the cluster otherwise kept
// for every node's next Match to find damaged again. A record sound by the
// codec's default limits (Match's check) that only this node's tighter
// DecodeLimits refuse is kept for the nodes that can read it.
void RefuseRemoteCopy(const cache::NamespaceState& ns, const BlockKey& key,
                      const SharedBytes& payload, const Status& why, bool other_block) {
  if (!other_block && VerifyBlock(payload).ok()) return;
  ns.tiers->RejectRemote(key, payload.size(), why.ToString());
}

}  // namespace

StatusOr<LoadedBlock> LoadBlock(const cache::NamespaceState& ns, const BlockKey& key,
                                BlockRead read, const DecodeLimits& limits) {
  PKV_ASSIGN_OR_RETURN(TierHit hit, read == BlockRead::kRestore
                                        ? ns.tiers->Get(key, ns.Read())
                                        : ns.tiers->PeekPayload(key));
  // What the local tiers hold was encoded by this process, or fully verified
  // before it was stored (StoreRecords; a remote value's record in
  // PromoteRemote). Hot bytes never left memory since; the SSD tier checked
  // its bytes' XXH3-64 against the one it computed when they were stored.
  // Both are decoded without a second checksum pass (one hash pass per SSD
  // read). A remote hit crossed the network: verified in full here.
  const bool local = hit.level == TierLevel::kHot || hit.level == TierLevel::kSsd;
  StatusOr<BlockRecord> record =
      local ? DecodeTrustedBlock(hit.payload, limits) : DecodeBlock(hit.payload, limits);
  const bool other_key = record.ok() && record->key != key;
  if (other_key) {
    record = Status::Corruption("block " + key.ToHex() + " holds record " +
                                record->key.ToHex());
  }
  if (!record.ok()) {
    if (!local) RefuseRemoteCopy(ns, key, hit.payload, record.status(), other_key);
    return record.status();
  }
  return LoadedBlock{std::move(record).value(), hit.level, hit.payload};
}

Status CheckRemotePlace(const cache::NamespaceState& ns, const LoadedBlock& block,
                        const BlockKey& parent, size_t tokens) {
  if (block.level != TierLevel::kRemote) return Status::OK();
  const BlockRecord& r = block.record;
  if (r.parent == parent && r.namespace_id == ns.root && r.token_count == tokens) {
    return Status::OK();
  }
  const Status refused =
      Status::Corruption("its record is not this block of this namespace");
  RefuseRemoteCopy(ns, r.key, block.payload, refused, /*other_block=*/true);
  return refused;
}

Status PutBlock(const cache::NamespaceState& ns, const BlockRecord& record,
                const EncodeOptions& options) {
  PKV_ASSIGN_OR_RETURN(SharedBytes payload, EncodeBlock(record, options));
  return ns.tiers->Put(ns.MetaFor(record.key, record.parent), std::move(payload));
}

Status RewriteBlock(const cache::NamespaceState& ns, const BlockRecord& record,
                    const EncodeOptions& options) {
  PKV_ASSIGN_OR_RETURN(SharedBytes payload, EncodeBlock(record, options));
  return ns.tiers->Rewrite(ns.MetaFor(record.key, record.parent), std::move(payload),
                           KvRemoveReason::kStripped);
}

}  // namespace prefixkv::cache
