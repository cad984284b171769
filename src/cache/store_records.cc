// PlanRecords: the checks a store of client-encoded records passes before any
// of it is written (see store_chain.h and PrefixCache::StoreRecords). A
// record stored here is later served like any block (a hot copy is decoded
// without a checksum pass), so everything Restore relies on is checked now:
// the checksum, the key as the chain hash of the parent and the tokens, and
// the layout Restore validates.
#include <algorithm>
#include <optional>
#include <string>

#include "block_io.h"
#include "block_validation.h"
#include "store_chain.h"

namespace prefixkv::cache {
namespace {

// Longest chain of cached ancestors followed (a bound against a corrupted
// parent link, far beyond any real conversation).
constexpr size_t kMaxAncestors = size_t{1} << 22;

std::string RecordName(size_t i) { return "record " + std::to_string(i); }

bool TipOnlyAllPlaceholders(const NamespaceState& ns, const BlockRecord& rec) {
  for (size_t l = 0; l < rec.layers.size() && l < ns.families.size(); ++l) {
    if (IsTipOnly(ns.families[l]) && !rec.layers[l].placeholder) return false;
  }
  return true;
}

// The cached full blocks from the root down to `parent`, walking the parent
// links the tiers keep (metadata only: no payload is read).
Status FindAncestors(const NamespaceState& ns, const BlockKey& parent,
                     std::vector<PlannedBlock>* out) {
  const BlockKey lineage_key = TipLineage::RecordKey(ns.root);
  std::vector<PlannedBlock> up;
  for (BlockKey k = parent; k != ns.root;) {
    StatusOr<BlockMeta> meta = ns.tiers->Peek(k);
    if (k == lineage_key || up.size() >= kMaxAncestors || !meta.ok() ||
        meta->namespace_id != ns.root) {
      return Status::InvalidArgument(
          "record 0: parent " + parent.ToHex() +
          " is neither the namespace root nor a cached block whose chain reaches it" +
          (k == parent ? std::string() : " (the chain is broken at " + k.ToHex() + ")"));
    }
    up.push_back({k, meta->parent, 0, ns.spec.block_tokens});
    k = meta->parent;
  }
  std::reverse(up.begin(), up.end());
  for (size_t j = 0; j < up.size(); ++j) up[j].start = j * ns.spec.block_tokens;
  *out = std::move(up);
  return Status::OK();
}

// A partial tail is its chain's last block: Match takes it and looks no
// further, so a chain hanging off one would be stored and acknowledged but
// never matched, and the lineage would take the tail for its tip's previous
// tip (stripping the tip before that). The parent's record says how many
// tokens it holds (read without counting; usually the previous turn's last
// block, in RAM).
Status CheckParentIsFull(const NamespaceState& ns, const BlockKey& parent) {
  if (parent == ns.root) return Status::OK();
  StatusOr<TierHit> hit = ns.tiers->PeekPayload(parent);
  StatusOr<RecordIdentity> id =
      hit.ok() ? PeekBlockIdentity(hit->payload.view()) : hit.status();
  if (!id.ok() || id->key != parent) {
    return Status::InvalidArgument(
        "record 0: parent " + parent.ToHex() +
        " could not be read: " + (id.ok() ? "another record" : id.status().ToString()));
  }
  if (id->token_count != ns.spec.block_tokens) {
    return Status::InvalidArgument(
        "record 0: parent " + parent.ToHex() + " is a partial tail of " +
        std::to_string(id->token_count) +
        " tokens, the end of its chain: continue from the full block before it");
  }
  return Status::OK();
}

// The checks of one record at token position `start` after `parent`;
// `other_shapes` is set when it fails for holding other shapes than the spec's.
Status CheckRecord(const NamespaceState& ns, const BlockRecord& rec, bool last,
                   const BlockKey& parent, size_t start, const BlockRecord* first,
                   bool* other_shapes) {
  if (rec.namespace_id != ns.root) {
    return Status::InvalidArgument("a block of namespace " + rec.namespace_id.ToHex() +
                                   ", not " + ns.root.ToHex());
  }
  if (rec.parent != parent) {
    return Status::InvalidArgument("parent " + rec.parent.ToHex() + " is not " +
                                   parent.ToHex() + " (the previous record)");
  }
  if (rec.tokens.size() != rec.token_count || rec.token_count == 0) {
    return Status::InvalidArgument("carries no token ids (its key is checked with them)");
  }
  if (ChainKey(rec.parent, rec.tokens) != rec.key) {
    return Status::InvalidArgument("key " + rec.key.ToHex() +
                                   " is not the chain hash of its parent and tokens");
  }
  const uint32_t block = ns.spec.block_tokens;
  if (rec.token_count > block ||
      (rec.token_count < block && (!last || !ns.partial_tail))) {
    return Status::InvalidArgument(
        std::to_string(rec.token_count) + " tokens: every record holds " +
        std::to_string(block) +
        (ns.partial_tail ? ", except the last (a partial tail)"
                         : " (the namespace stores no partial tails)"));
  }
  if (Status s = ValidateBlock(ns, rec, start, parent, rec.tokens, first, other_shapes);
      !s.ok()) {
    return Status::InvalidArgument("does not fit the namespace layout: " + s.message());
  }
  // As Store (CheckStoreLayers): a tip's window or recurrent state, or plain
  // KV, of other shapes than the spec's would be restored in the spec's name.
  if (Status s = CheckStoredShapes(ns, rec); !s.ok()) {
    *other_shapes = true;
    return s;
  }
  const bool placeholders = TipOnlyAllPlaceholders(ns, rec);
  if (!last && !placeholders) {
    return Status::InvalidArgument(
        "only the last record (the tip) may carry rotating/arrays/composite state");
  }
  if (last && !placeholders && !HasRealTipState(ns.families, rec)) {
    return Status::InvalidArgument(
        "the tip's rotating/arrays/composite layers must be all real or all "
        "placeholders");
  }
  return Status::OK();
}

// Records extending cached blocks whose first holds other shapes than the
// spec's (stored by an older binary, or fetched from a node of one) cannot be
// stored: every restore refuses that chain, and its right first block is not
// among them. Kept, those blocks refused every such store (the records do
// not match them) for as long as they stayed cached; they are removed with
// the cached blocks after them on the records' chain, and the store refused,
// so the client's next store of the tokens sends them all.
Status RefuseAChainHeadOfOtherShapes(NamespaceState& ns, const LoadedBlock& head,
                                     const std::vector<PlannedBlock>& ancestors,
                                     const DecodeLimits& limits) {
  const Status shapes = CheckStoredShapes(ns, head.record);
  if (shapes.ok()) return Status::OK();
  ns.shape_refused_stores.fetch_add(1);
  std::vector<BlockKey> keys;
  for (const PlannedBlock& b : ancestors) keys.push_back(b.key);
  const Status dropped = DropBlocksOfOtherShapes(ns, keys, limits);
  return Status::InvalidArgument(
      "record 0: the chain's first block " + head.record.key.ToHex() +
      " holds other shapes: " + shapes.message() +
      (dropped.ok() ? "; it and the cached blocks after it were removed: store the "
                      "chain from the namespace root"
                    : ""));
}

// Records extending cached blocks of which a later one than the first holds
// other shapes (fetched from a node of an older binary, or stored by one)
// cannot be stored either: a restore drops that block with every block after
// it, so the records were acknowledged and never restored. That block and
// the cached blocks after it on the records' chain are removed and the store
// refused, so the client's next PKV.MATCH ends before it and its next store
// sends them. Each ancestor is read once while its bytes stay the same
// (CachedBlockHoldsOtherShapes; the first is compared by the caller).
Status RefuseAncestorsOfOtherShapes(NamespaceState& ns,
                                    const std::vector<PlannedBlock>& ancestors,
                                    const DecodeLimits& limits) {
  if (ns.spec.layer_shapes.empty()) return Status::OK();
  size_t other = ancestors.size();
  {
    MutexLock lock(&ns.store_mu);
    for (size_t j = 1; j < ancestors.size() && other == ancestors.size(); ++j) {
      if (CachedBlockHoldsOtherShapes(ns, ancestors[j].key, limits)) other = j;
    }
  }
  if (other == ancestors.size()) return Status::OK();
  ns.shape_refused_stores.fetch_add(1);
  std::vector<BlockKey> keys;
  for (size_t j = other; j < ancestors.size(); ++j) keys.push_back(ancestors[j].key);
  const Status dropped = DropBlocksOfOtherShapes(ns, keys, limits);
  return Status::InvalidArgument(
      "record 0: the chain's cached block " + std::to_string(other) + " (" +
      keys[0].ToHex() + ") holds other shapes than the namespace's" +
      (dropped.ok() ? "; it and the cached blocks after it were removed: store the "
                      "chain from the block before it"
                    : ""));
}

}  // namespace

Status PlanRecords(NamespaceState& ns, const std::vector<SharedBytes>& encoded,
                   const DecodeLimits& limits, std::vector<BlockRecord>* records,
                   std::vector<int32_t>* tokens, StoreChain* chain) {
  if (encoded.empty()) return Status::InvalidArgument("no records to store");
  records->clear();
  records->reserve(encoded.size());
  for (size_t i = 0; i < encoded.size(); ++i) {
    StatusOr<BlockRecord> rec = DecodeBlock(encoded[i], limits);
    if (!rec.ok()) return rec.status().WithContext(RecordName(i));
    records->push_back(std::move(rec).value());
  }
  PKV_RETURN_IF_ERROR(FindAncestors(ns, (*records)[0].parent, &chain->ancestors));
  PKV_RETURN_IF_ERROR(CheckParentIsFull(ns, (*records)[0].parent));
  // A restore checks every block's shapes against the chain's first block:
  // the cached one when the records extend cached blocks, else record 0.
  std::optional<LoadedBlock> chain_head;
  if (!chain->ancestors.empty()) {
    StatusOr<LoadedBlock> head =
        LoadBlock(ns, chain->ancestors[0].key, BlockRead::kBookkeeping, limits);
    if (!head.ok() || head->record.layers.size() != ns.families.size()) {
      return Status::InvalidArgument(
          "record 0: the chain's first block " + chain->ancestors[0].key.ToHex() +
          (head.ok() ? " does not fit the namespace layout"
                     : " could not be read: " + head.status().ToString()));
    }
    chain_head = std::move(head).value();
    PKV_RETURN_IF_ERROR(
        RefuseAChainHeadOfOtherShapes(ns, *chain_head, chain->ancestors, limits));
    PKV_RETURN_IF_ERROR(RefuseAncestorsOfOtherShapes(ns, chain->ancestors, limits));
  }
  size_t start = chain->ancestors.size() * ns.spec.block_tokens;
  BlockKey parent = (*records)[0].parent;
  tokens->clear();
  for (size_t i = 0; i < records->size(); ++i) {
    const BlockRecord& rec = (*records)[i];
    const bool last = i + 1 == records->size();
    const BlockRecord* first = chain_head.has_value() ? &chain_head->record
                               : i == 0               ? nullptr
                                                      : &(*records)[0];
    bool other_shapes = false;
    Status s = CheckRecord(ns, rec, last, parent, start, first, &other_shapes);
    if (!s.ok()) {
      if (other_shapes) ns.shape_refused_stores.fetch_add(1);
      return s.WithContext(RecordName(i));
    }
    chain->blocks.push_back({rec.key, rec.parent, start, rec.token_count});
    tokens->insert(tokens->end(), rec.tokens.begin(), rec.tokens.end());
    start += rec.token_count;
    parent = rec.key;
  }
  chain->tokens = *tokens;
  chain->tip_state = ns.has_tip_only && HasRealTipState(ns.families, records->back());
  return Status::OK();
}

}  // namespace prefixkv::cache
