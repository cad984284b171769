// PrefixCache: namespaces, Store (dedup, tips, supersede-on-extend) and Match.
// Restore lives in restore.cc.
#include "prefixkv/prefix_cache.h"

#include <string>

#include "src/cache/block_builder.h"
#include "src/cache/block_io.h"
#include "src/cache/namespace_state.h"

namespace prefixkv {

using cache::TipLineage;

namespace {

// Restore compares stored tokens with the prompt: never store without them.
PrefixCacheOptions WithTokens(PrefixCacheOptions options) {
  options.encode.store_tokens = true;
  return options;
}

}  // namespace

PrefixCache::PrefixCache(TierStack* default_tiers, PrefixCacheOptions options)
    : default_tiers_(default_tiers), options_(WithTokens(std::move(options))) {}

PrefixCache::~PrefixCache() = default;

namespace {

// Reads the persisted lineage; a missing or unreadable record starts empty
// (the cost is only that the next grandparent is not stripped).
TipLineage LoadLineage(const PrefixCache::NamespaceState& ns,
                       const DecodeLimits& limits) {
  BlockTier* lowest = ns.tiers->lowest();
  StatusOr<SharedBytes> payload = lowest->Get(TipLineage::RecordKey(ns.root));
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
  TierStack* tiers = options.tiers != nullptr ? options.tiers : default_tiers_;
  if (tiers == nullptr)
    return Status::InvalidArgument("no tiers for namespace " + spec.model);
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < namespaces_.size(); ++i) {
    if (namespaces_[i]->fingerprint == fingerprint) {
      return Namespace{static_cast<uint32_t>(i), namespaces_[i]->root};
    }
  }
  auto ns = std::make_unique<NamespaceState>();
  ns->spec = spec;
  ns->fingerprint = fingerprint;
  ns->root = NamespaceRootFromFingerprint(fingerprint);
  for (const std::string& type : spec.layer_types) {
    PKV_ASSIGN_OR_RETURN(CacheFamily family, CacheTypeRegistry::Lookup(type));
    ns->families.push_back(family);
    ns->has_tip_only = ns->has_tip_only || IsTipOnly(family);
  }
  ns->tiers = tiers;
  ns->owner = options.owner;
  if (ns->has_tip_only) ns->lineage = LoadLineage(*ns, options_.decode_limits);
  namespaces_.push_back(std::move(ns));
  return Namespace{static_cast<uint32_t>(namespaces_.size() - 1),
                   namespaces_.back()->root};
}

StatusOr<PrefixCache::NamespaceState*> PrefixCache::Find(Namespace ns) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (ns.index >= namespaces_.size() || namespaces_[ns.index]->root != ns.root) {
    return Status::InvalidArgument("unknown namespace " + ns.root.ToHex());
  }
  return namespaces_[ns.index].get();
}

namespace {

// True when the cached block `key` carries real tip-only state.
bool IsRealTip(const PrefixCache::NamespaceState& ns, const BlockKey& key,
               const DecodeLimits& limits) {
  StatusOr<cache::LoadedBlock> block = cache::LoadBlock(ns, key, false, limits);
  return block.ok() && cache::HasRealTipState(ns.families, block->record);
}

// Rewrites the grandparent tip with placeholders for its tip-only layers.
Status StripTip(const PrefixCache::NamespaceState& ns, const BlockKey& key,
                const PrefixCacheOptions& options) {
  StatusOr<cache::LoadedBlock> block =
      cache::LoadBlock(ns, key, false, options.decode_limits);
  if (block.status().IsNotFound()) return Status::OK();  // evicted: nothing to strip
  if (!block.ok()) return block.status();
  if (!cache::StripTipState(ns.families, &block->record)) return Status::OK();
  return cache::RewriteBlock(ns, block->record, options.encode);
}

Status PersistLineage(PrefixCache::NamespaceState& ns) {
  // Tips evicted from every tier can never be a previous tip again.
  ns.lineage.RetainIf([&](const BlockKey& k) { return ns.tiers->Contains(k); });
  PKV_ASSIGN_OR_RETURN(SharedBytes payload, EncodeBlock(ns.lineage.ToRecord(ns.root)));
  BlockMeta meta = ns.MetaFor(TipLineage::RecordKey(ns.root), ns.root);
  return ns.tiers->PutLowest(meta, std::move(payload));
}

// Supersede-on-extend for a store whose real tip is keys.back() (DESIGN 6).
Status UpdateLineage(PrefixCache::NamespaceState& ns, const std::vector<BlockKey>& keys,
                     const PrefixCacheOptions& options, StoreResult* result) {
  const BlockKey tip = keys.back();
  if (ns.lineage.IsTip(tip)) return Status::OK();  // the same tip stored again
  // The previous tip: the newest recorded tip this chain passes through.
  // Interior blocks a store branches off are never recorded, so never found.
  BlockKey previous;
  for (size_t j = keys.size() - 1; j-- > 0;) {
    if (ns.lineage.IsTip(keys[j])) {
      previous = keys[j];
      break;
    }
  }
  if (!previous.IsZero()) {
    const BlockKey grandparent = ns.lineage.PreviousOf(previous);
    if (!grandparent.IsZero() && ns.lineage.IsTip(grandparent)) {
      PKV_RETURN_IF_ERROR(StripTip(ns, grandparent, options));
      ns.lineage.Forget(grandparent);
      result->stripped_tip = grandparent;
    }
  }
  ns.lineage.Record(tip, previous);
  return PersistLineage(ns);
}

}  // namespace

StatusOr<StoreResult> PrefixCache::Store(Namespace handle,
                                         std::span<const int32_t> tokens,
                                         const std::vector<LayerState>& layers) {
  PKV_ASSIGN_OR_RETURN(NamespaceState * ns, Find(handle));
  PKV_RETURN_IF_ERROR(cache::CheckStoreLayers(*ns, tokens.size(), layers));
  const uint32_t block = ns->spec.block_tokens;
  StoreResult result;
  const std::vector<BlockKey> keys = ChainKeys(ns->root, tokens, block);
  result.blocks = keys.size();
  if (keys.empty()) return result;
  result.tip = keys.back();
  const bool aligned = tokens.size() % block == 0;
  const bool tip_state = ns->has_tip_only && aligned;
  if (ns->has_tip_only && !aligned) {
    result.note = "tokens do not end on a block boundary: tip-only state not stored";
  }
  std::lock_guard<std::mutex> lock(ns->store_mu);
  for (size_t i = 0; i < keys.size(); ++i) {
    const bool real_tip = tip_state && i + 1 == keys.size();
    const BlockKey parent = i == 0 ? ns->root : keys[i - 1];
    const bool cached = ns->tiers->Contains(keys[i]);
    if (cached && (!real_tip || IsRealTip(*ns, keys[i], options_.decode_limits))) {
      ++result.blocks_deduplicated;
      continue;
    }
    PKV_ASSIGN_OR_RETURN(BlockRecord rec, cache::BuildBlock(*ns, tokens, layers, i,
                                                            keys[i], parent, real_tip));
    if (cached) {
      // The new tip exists as an interior block of a longer chain: give it
      // the real state in place.
      PKV_RETURN_IF_ERROR(cache::RewriteBlock(*ns, rec, options_.encode));
      result.tip_rewritten = true;
    } else {
      PKV_RETURN_IF_ERROR(cache::PutBlock(*ns, rec, options_.encode));
      ++result.blocks_written;
      // A recorded tip that had vanished comes back as a placeholder.
      if (!real_tip) ns->lineage.Forget(keys[i]);
    }
  }
  result.tip_state_stored = tip_state;
  if (tip_state) PKV_RETURN_IF_ERROR(UpdateLineage(*ns, keys, options_, &result));
  return result;
}

StatusOr<MatchResult> PrefixCache::Match(Namespace handle,
                                         std::span<const int32_t> tokens) const {
  PKV_ASSIGN_OR_RETURN(NamespaceState * ns, Find(handle));
  const uint32_t block = ns->spec.block_tokens;
  MatchResult match;
  match.ns = handle;
  BlockKey parent = ns->root;
  for (size_t start = 0; start + block <= tokens.size(); start += block) {
    std::span<const int32_t> part = tokens.subspan(start, block);
    const BlockKey key = ChainKey(parent, part);
    const TierLevel level = ns->tiers->Locate(key);
    if (level == TierLevel::kNone) break;
    match.keys.push_back(key);
    match.tiers.push_back(level);
    match.tokens.insert(match.tokens.end(), part.begin(), part.end());
    parent = key;
  }
  return match;
}

StatusOr<std::vector<std::pair<BlockKey, BlockKey>>> PrefixCache::TipLineage(
    Namespace handle) const {
  PKV_ASSIGN_OR_RETURN(NamespaceState * ns, Find(handle));
  std::lock_guard<std::mutex> lock(ns->store_mu);
  return ns->lineage.Entries();
}

Status PrefixCache::Flush() {
  std::vector<TierStack*> stacks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (default_tiers_ != nullptr) stacks.push_back(default_tiers_);
    for (const auto& ns : namespaces_) stacks.push_back(ns->tiers);
  }
  for (TierStack* s : stacks) PKV_RETURN_IF_ERROR(s->Flush());
  return Status::OK();
}

}  // namespace prefixkv
