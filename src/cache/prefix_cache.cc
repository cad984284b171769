// PrefixCache: namespaces, Match, GetBlock and Flush. Store and StoreRecords
// (dedup, tips, supersede-on-extend) live in store.cc, Restore in restore.cc.
#include "prefixkv/advanced/prefix_cache.h"

#include <algorithm>
#include <string>

#include "block_validation.h"
#include "namespace_state.h"
#include "prefixkv/advanced/hash.h"
#include "prefixkv/advanced/mutex.h"
#include "prefixkv/codec.h"

namespace prefixkv {

namespace {

// Restore compares stored tokens with the prompt: never store without them.
PrefixCacheOptions WithTokens(PrefixCacheOptions options) {
  options.encode.store_tokens = true;
  return options;
}

}  // namespace

PrefixCache::PrefixCache(TierStack* tiers, PrefixCacheOptions options)
    : tiers_(tiers), options_(WithTokens(std::move(options))) {}

PrefixCache::~PrefixCache() = default;

namespace {

// Reads the persisted lineage; a missing or unreadable record starts empty
// (the cost is only that the next grandparent is not stripped). Bookkeeping:
// no hit or miss counted.
TipLineage LoadLineage(const cache::NamespaceState& ns, const DecodeLimits& limits) {
  BlockTier* lowest = ns.tiers->lowest();
  StatusOr<SharedBytes> payload = lowest->PeekPayload(TipLineage::RecordKey(ns.root));
  if (!payload.ok()) return {};
  StatusOr<BlockRecord> rec = DecodeBlock(*payload, limits);
  if (!rec.ok()) return {};
  StatusOr<TipLineage> lineage = TipLineage::FromRecord(*rec, ns.root);
  return lineage.ok() ? std::move(lineage).value() : TipLineage{};
}

}  // namespace

StatusOr<Namespace> PrefixCache::RegisterModel(const NamespaceSpec& spec,
                                               const NamespaceOptions& options) {
  PKV_ASSIGN_OR_RETURN(std::string fingerprint, spec.Fingerprint());
  MutexLock lock(&mu_);
  for (size_t i = 0; i < namespaces_.size(); ++i) {
    const cache::NamespaceState& known = *namespaces_[i];
    if (known.fingerprint != fingerprint) continue;
    if (known.owner != options.owner ||
        known.partial_tail != options.store_partial_tail) {
      return Status::InvalidArgument("namespace " + spec.model +
                                     " is already registered with other options");
    }
    return Namespace{static_cast<uint32_t>(i), known.root};
  }
  auto ns = std::make_unique<cache::NamespaceState>();
  ns->spec = spec;
  ns->fingerprint = fingerprint;
  ns->root =
      options.root.IsZero() ? NamespaceRootFromFingerprint(fingerprint) : options.root;
  for (const std::string& type : spec.layer_types) {
    PKV_ASSIGN_OR_RETURN(CacheFamily family, CacheTypeRegistry::Lookup(type));
    ns->families.push_back(family);
    ns->has_tip_only = ns->has_tip_only || IsTipOnly(family);
  }
  ns->tiers = tiers_;
  ns->owner = options.owner;
  ns->remote = options.remote;
  ns->partial_tail = options.store_partial_tail;
  ns->check_layer_shapes = options.check_layer_shapes && !spec.layer_shapes.empty();
  if (ns->has_tip_only) {
    MutexLock lock(&ns->store_mu);  // not shared yet; the lock states the rule
    ns->lineage = LoadLineage(*ns, options_.decode_limits);
  }
  namespaces_.push_back(std::move(ns));
  return Namespace{static_cast<uint32_t>(namespaces_.size() - 1),
                   namespaces_.back()->root};
}

StatusOr<cache::NamespaceState*> PrefixCache::Find(Namespace ns) const {
  MutexLock lock(&mu_);
  if (ns.index >= namespaces_.size() || namespaces_[ns.index]->root != ns.root) {
    return Status::InvalidArgument("unknown namespace " + ns.root.ToHex());
  }
  return namespaces_[ns.index].get();
}

StatusOr<SharedBytes> PrefixCache::GetBlock(Namespace handle, const BlockKey& key,
                                            const BlocksAfter& after) {
  PKV_ASSIGN_OR_RETURN(cache::NamespaceState * ns, Find(handle));
  // The stack's SSD tier is shared by every namespace and the key-value
  // space: look at the metadata before reading (and promoting) anything.
  StatusOr<BlockMeta> meta = ns->tiers->Peek(key);
  if (!meta.ok() || meta->namespace_id != ns->root ||
      key == TipLineage::RecordKey(ns->root)) {
    return Status::NotFound("no block " + key.ToHex() + " in namespace " +
                            ns->root.ToHex());
  }
  // From the local tiers only, as the Peek above: a failed SSD read (a
  // damaged copy) went on to the remote tier, whose value only its envelope
  // checked, and a record written damaged by another node was served.
  TierRead read = ns->Read();
  read.remote = false;
  PKV_ASSIGN_OR_RETURN(TierHit hit, ns->tiers->Get(key, read));
  StatusOr<RecordIdentity> id = PeekBlockIdentity(hit.payload.view());
  if (!id.ok() || id->key != key || id->namespace_id != ns->root) {
    return Status::NotFound("no block " + key.ToHex() + " in namespace " +
                            ns->root.ToHex());
  }
  // Served whole, the client reads it with the spec's shapes: a block of
  // others (an older binary's, a node's of one) is refused as a restore
  // refuses it, which compares the blocks it assembles with the first one.
  PKV_RETURN_IF_ERROR(cache::RefuseServedBlockOfOtherShapes(*ns, hit.payload, after,
                                                            options_.decode_limits));
  return std::move(hit.payload);
}

StatusOr<NamespaceSpec> PrefixCache::Spec(Namespace handle) const {
  PKV_ASSIGN_OR_RETURN(cache::NamespaceState * ns, Find(handle));
  return ns->spec;
}

StatusOr<MatchResult> PrefixCache::Match(Namespace handle,
                                         std::span<const int32_t> tokens) const {
  PKV_ASSIGN_OR_RETURN(cache::NamespaceState * ns, Find(handle));
  const uint32_t block = ns->spec.block_tokens;
  MatchResult match;
  match.ns = handle;
  BlockKey parent = ns->root;
  size_t start = 0;
  auto take = [&](const BlockKey& key, TierLevel level, std::span<const int32_t> part) {
    match.keys.push_back(key);
    match.tiers.push_back(level);
    match.tokens.insert(match.tokens.end(), part.begin(), part.end());
    parent = key;
    start += part.size();
  };
  while (start + block <= tokens.size()) {
    std::span<const int32_t> part = tokens.subspan(start, block);
    const BlockKey key = ChainKey(parent, part);
    const TierLevel level = ns->tiers->Locate(key);
    if (level == TierLevel::kNone) break;
    take(key, level, part);
  }
  // The blocks after the local prefix from the remote tier, one batch per
  // kRemoteBatch blocks (a batch is one round trip per cluster master): every
  // remaining full block and, with the last of them, the partial tails that
  // would follow the whole chain, so a prompt the remote tier holds to its end
  // costs one batch. Taken while each is the block asked for.
  std::vector<BlockKey> tail_keys;                      // fetched with the chain
  std::vector<std::optional<SharedBytes>> tail_values;  // (longest first)
  bool remote_chain_ended = !ns->UsesRemote();
  while (!remote_chain_ended && start < tokens.size()) {
    std::vector<BlockKey> keys;
    BlockKey p = parent;
    size_t at = start;
    for (; at + block <= tokens.size() && keys.size() < kRemoteBatch; at += block) {
      keys.push_back(ChainKey(p, tokens.subspan(at, block)));
      p = keys.back();
    }
    const size_t full = keys.size();
    const bool last_batch = at + block > tokens.size();
    // With no full block to ask for, the tails are looked for locally first
    // (below): a prompt cached here to its tail costs no round trip.
    if (last_batch && ns->partial_tail && full > 0) {
      const std::vector<BlockKey> tails = TailKeys(
          p, tokens.subspan(at, std::min<size_t>(block - 1, tokens.size() - at)));
      keys.insert(keys.end(), tails.rbegin(), tails.rend());  // longest first
    }
    if (keys.empty()) break;
    std::vector<std::optional<SharedBytes>> got = ns->tiers->FetchRemote(keys);
    size_t taken = 0;
    for (; taken < full; ++taken) {
      if (!got[taken].has_value() ||
          !PromoteRemote(*ns, keys[taken], parent, block, std::move(*got[taken]))) {
        break;
      }
      take(keys[taken], TierLevel::kRemote, tokens.subspan(start, block));
    }
    remote_chain_ended = taken < full || last_batch;
    if (taken == full && last_batch) {
      tail_keys.assign(keys.begin() + static_cast<std::ptrdiff_t>(full), keys.end());
      tail_values.assign(
          std::make_move_iterator(got.begin() + static_cast<std::ptrdiff_t>(full)),
          std::make_move_iterator(got.end()));
    }
  }
  if (!ns->partial_tail) return match;
  // The longest partial tail stored after the last matched full block.
  const size_t longest = std::min<size_t>(block - 1, tokens.size() - start);
  const std::vector<BlockKey> tail_keys_by_length =
      TailKeys(parent, tokens.subspan(start, longest));
  std::vector<BlockKey> tails;
  for (size_t n = longest; n > 0; --n) {
    std::span<const int32_t> part = tokens.subspan(start, n);
    const BlockKey& key = tail_keys_by_length[n - 1];
    const TierLevel level = ns->tiers->Locate(key);
    if (level == TierLevel::kNone) {
      tails.push_back(key);
      continue;
    }
    take(key, level, part);
    return match;
  }
  if (!ns->UsesRemote() || tails.empty()) return match;
  // Fetched with the chain when it matched to its end; else one more batch.
  std::vector<std::optional<SharedBytes>> got =
      tail_keys == tails ? std::move(tail_values) : ns->tiers->FetchRemote(tails);
  // tails[i] has `longest - i` tokens.
  for (size_t i = 0; i < tails.size(); ++i) {
    const size_t n = longest - i;
    if (got[i].has_value() &&
        PromoteRemote(*ns, tails[i], parent, n, std::move(*got[i]))) {
      take(tails[i], TierLevel::kRemote, tokens.subspan(start, n));
      break;
    }
  }
  return match;
}

bool PrefixCache::PromoteRemote(cache::NamespaceState& ns, const BlockKey& key,
                                const BlockKey& parent, size_t tokens,
                                SharedBytes payload) const {
  // A value refused here is reported: the remote tier counts it as a
  // corruption (not the hit it counted) and deletes it.
  if (Status checked = CheckRemoteRecord(payload, key, parent, ns.root, tokens);
      !checked.ok()) {
    ns.tiers->RejectRemote(key, payload.size(), checked.ToString());
    return false;
  }
  // Stored locally so Restore reads it from RAM (or SSD); when it cannot be
  // stored (pinned copies, no space), Restore reads it remotely again.
  (void)ns.tiers->Promote(ns.MetaFor(key, parent), std::move(payload));
  return true;
}

// The chain keys of the partial tails after `parent`, shortest first: the
// n-th is ChainKey(parent, tail.first(n)), the hash of the parent's bytes and
// the first n tokens', read off one stream after each token. A ChainKey per
// length hashed the tail again for each (tail.size()^2 / 2 tokens): in a
// namespace of large blocks (PKV.REGISTER takes up to 4,194,304 tokens) one
// Match of a long prompt hashed terabytes and held its thread for hours.
std::vector<BlockKey> PrefixCache::TailKeys(const BlockKey& parent,
                                            std::span<const int32_t> tail) {
  std::vector<BlockKey> keys;
  keys.reserve(tail.size());
  HashStream stream(HashStream::Width::k128);
  uint8_t parent_bytes[16];
  parent.EncodeTo(parent_bytes);
  stream.Update(parent_bytes, sizeof(parent_bytes));
  for (const int32_t& token : tail) {
    stream.Update(&token, sizeof(token));  // memory order, as ChainKey hashes it
    keys.push_back(stream.Digest128());
  }
  return keys;
}

Status PrefixCache::CheckRemoteRecord(const SharedBytes& payload, const BlockKey& key,
                                      const BlockKey& parent,
                                      const BlockKey& namespace_id, size_t tokens) {
  // The envelope checked the bytes; the record must also be this block of
  // this namespace (a chain key names the same block on every node).
  StatusOr<RecordIdentity> id = PeekBlockIdentity(payload.view());
  if (!id.ok()) return id.status();
  if (id->key != key || id->parent != parent || id->namespace_id != namespace_id ||
      id->token_count != tokens) {
    return Status::Corruption("its record is not this block of this namespace");
  }
  // The record's own checksum too, once, before the local tiers hold it:
  // their reads are decoded without it (block_io.cc). A value another node
  // wrote with a sound envelope around a damaged record is not taken.
  return VerifyBlock(payload);
}

StatusOr<std::vector<std::pair<BlockKey, BlockKey>>> PrefixCache::RecordedTips(
    Namespace handle) const {
  PKV_ASSIGN_OR_RETURN(cache::NamespaceState * ns, Find(handle));
  MutexLock lock(&ns->store_mu);
  return ns->lineage.Entries();
}

StatusOr<PrefixTokenCounters> PrefixCache::ShapeRefusals(Namespace handle) const {
  PKV_ASSIGN_OR_RETURN(cache::NamespaceState * ns, Find(handle));
  return PrefixTokenCounters{.shape_refused_stores = ns->shape_refused_stores.load(),
                             .shape_refused_tokens = ns->shape_refused_tokens.load()};
}

Status PrefixCache::Flush() { return tiers_->Flush(); }

}  // namespace prefixkv
