// PrefixCache: namespaces, Store (dedup, tips, supersede-on-extend) and Match.
// Restore lives in restore.cc.
#include "prefixkv/advanced/prefix_cache.h"

#include <algorithm>
#include <string>
#include <unordered_map>

#include "block_builder.h"
#include "block_io.h"
#include "namespace_state.h"
#include "prefixkv/advanced/mutex.h"

namespace prefixkv {

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
TipLineage LoadLineage(const cache::NamespaceState& ns, const DecodeLimits& limits) {
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
  MutexLock lock(&mu_);
  for (size_t i = 0; i < namespaces_.size(); ++i) {
    const cache::NamespaceState& known = *namespaces_[i];
    if (known.fingerprint != fingerprint) continue;
    if (known.tiers != tiers || known.owner != options.owner ||
        known.partial_tail != options.store_partial_tail) {
      return Status::InvalidArgument("namespace " + spec.model +
                                     " is already registered with other options");
    }
    return Namespace{static_cast<uint32_t>(i), known.root};
  }
  auto ns = std::make_unique<cache::NamespaceState>();
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
  ns->partial_tail = options.store_partial_tail;
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

namespace {

// True when the cached block `key` carries real tip-only state.
bool IsRealTip(const cache::NamespaceState& ns, const BlockKey& key,
               const DecodeLimits& limits) {
  StatusOr<cache::LoadedBlock> block = cache::LoadBlock(ns, key, false, limits);
  return block.ok() && cache::HasRealTipState(ns.families, block->record);
}

// Rewrites the grandparent tip with placeholders for its tip-only layers.
Status StripTip(const cache::NamespaceState& ns, const BlockKey& key,
                const PrefixCacheOptions& options) {
  StatusOr<cache::LoadedBlock> block =
      cache::LoadBlock(ns, key, false, options.decode_limits);
  if (block.status().IsNotFound()) return Status::OK();  // evicted: nothing to strip
  if (!block.ok()) return block.status();
  if (!cache::StripTipState(ns.families, &block->record)) return Status::OK();
  return cache::RewriteBlock(ns, block->record, options.encode);
}

Status PersistLineage(cache::NamespaceState& ns) REQUIRES(ns.store_mu) {
  // Tips evicted from every tier can never be a previous tip again.
  ns.lineage.RetainIf([&](const BlockKey& k) { return ns.tiers->Contains(k); });
  PKV_ASSIGN_OR_RETURN(SharedBytes payload, EncodeBlock(ns.lineage.ToRecord(ns.root)));
  BlockMeta meta = ns.MetaFor(TipLineage::RecordKey(ns.root), ns.root);
  return ns.tiers->PutLowest(meta, std::move(payload));
}

// The previous tip of a store: the recorded tip on this store's chain that
// ends last before the store's own tip. A full tip is on the chain when its
// key is; a partial tail tip when its parent is and its tokens are the
// store's tokens at that position. Interior blocks a store branches off are
// never recorded, so never found.
BlockKey FindPreviousTip(const cache::NamespaceState& ns,
                         const std::vector<cache::PlannedBlock>& plan,
                         std::span<const int32_t> tokens) REQUIRES(ns.store_mu) {
  const cache::PlannedBlock& tip = plan.back();
  const size_t tip_end = tip.start + tip.count;
  std::unordered_map<BlockKey, size_t, BlockKeyHash> end_of{{ns.root, 0}};
  for (const cache::PlannedBlock& b : plan) end_of[b.key] = b.start + b.count;
  BlockKey previous;
  size_t best_end = 0;
  ns.lineage.ForEachTip([&](const BlockKey& key, const TipPlace& place) {
    size_t end = 0;
    if (!place.partial) {
      auto it = end_of.find(key);
      if (it == end_of.end()) return;
      end = it->second;
    } else {
      auto it = end_of.find(place.parent);
      if (it == end_of.end()) return;
      end = it->second + place.token_count;
      if (end > tokens.size()) return;
      if (ChainKey(place.parent, tokens.subspan(it->second, place.token_count)) != key)
        return;
    }
    if (end < tip_end && end > best_end) {
      best_end = end;
      previous = key;
    }
  });
  return previous;
}

// Supersede-on-extend for a store whose real tip is plan.back() (docs/prefix_cache.md,
// "Supersede-on-extend lineage").
Status UpdateLineage(cache::NamespaceState& ns,
                     const std::vector<cache::PlannedBlock>& plan,
                     std::span<const int32_t> tokens, const PrefixCacheOptions& options,
                     StoreResult* result) REQUIRES(ns.store_mu) {
  const cache::PlannedBlock& tip = plan.back();
  if (ns.lineage.IsTip(tip.key)) return Status::OK();  // the same tip stored again
  const BlockKey previous = FindPreviousTip(ns, plan, tokens);
  if (!previous.IsZero()) {
    const BlockKey grandparent = ns.lineage.PreviousOf(previous);
    if (!grandparent.IsZero() && ns.lineage.IsTip(grandparent)) {
      PKV_RETURN_IF_ERROR(StripTip(ns, grandparent, options));
      ns.lineage.Forget(grandparent);
      result->stripped_tip = grandparent;
    }
  }
  const bool partial = tip.count < ns.spec.block_tokens;
  ns.lineage.Record(tip.key, previous, TipPlace{tip.parent, tip.count, partial});
  return PersistLineage(ns);
}

// The blocks of a store: every full block, then the partial tail if opted in.
std::vector<cache::PlannedBlock> PlanBlocks(const cache::NamespaceState& ns,
                                            std::span<const int32_t> tokens) {
  const uint32_t block = ns.spec.block_tokens;
  std::vector<cache::PlannedBlock> plan;
  plan.reserve(tokens.size() / block + 1);
  BlockKey parent = ns.root;
  for (size_t start = 0; start < tokens.size(); start += block) {
    const size_t count = std::min<size_t>(block, tokens.size() - start);
    if (count < block && !ns.partial_tail) break;
    const BlockKey key = ChainKey(parent, tokens.subspan(start, count));
    plan.push_back({key, parent, start, static_cast<uint32_t>(count)});
    parent = key;
  }
  return plan;
}

}  // namespace

StatusOr<StoreResult> PrefixCache::Store(Namespace handle,
                                         std::span<const int32_t> tokens,
                                         const std::vector<LayerState>& layers) {
  PKV_ASSIGN_OR_RETURN(cache::NamespaceState * ns, Find(handle));
  PKV_RETURN_IF_ERROR(cache::CheckStoreLayers(*ns, tokens.size(), layers));
  StoreResult result;
  const std::vector<cache::PlannedBlock> plan = PlanBlocks(*ns, tokens);
  result.blocks = plan.size();
  if (plan.empty()) return result;
  result.tip = plan.back().key;
  const bool ends_at_tip = plan.back().start + plan.back().count == tokens.size();
  const bool tip_state = ns->has_tip_only && ends_at_tip;
  if (ns->has_tip_only && !ends_at_tip) {
    result.note = "tokens do not end on a block boundary: tip-only state not stored";
  }
  MutexLock lock(&ns->store_mu);
  for (size_t i = 0; i < plan.size(); ++i) {
    const BlockKey& key = plan[i].key;
    const bool real_tip = tip_state && i + 1 == plan.size();
    const bool cached = ns->tiers->Contains(key);
    if (cached && (!real_tip || IsRealTip(*ns, key, options_.decode_limits))) {
      ++result.blocks_deduplicated;
      continue;
    }
    PKV_ASSIGN_OR_RETURN(BlockRecord rec,
                         cache::BuildBlock(*ns, tokens, layers, plan[i], real_tip));
    if (cached) {
      // The new tip exists as an interior block of a longer chain: give it
      // the real state in place.
      PKV_RETURN_IF_ERROR(cache::RewriteBlock(*ns, rec, options_.encode));
      result.tip_rewritten = true;
    } else {
      PKV_RETURN_IF_ERROR(cache::PutBlock(*ns, rec, options_.encode));
      ++result.blocks_written;
      // A recorded tip that had vanished comes back as a placeholder.
      if (!real_tip) ns->lineage.Forget(key);
    }
  }
  result.tip_state_stored = tip_state;
  if (tip_state) PKV_RETURN_IF_ERROR(UpdateLineage(*ns, plan, tokens, options_, &result));
  return result;
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
  if (!ns->partial_tail) return match;
  // The longest partial tail stored after the last matched full block.
  for (size_t n = std::min<size_t>(block - 1, tokens.size() - start); n > 0; --n) {
    std::span<const int32_t> part = tokens.subspan(start, n);
    const BlockKey key = ChainKey(parent, part);
    const TierLevel level = ns->tiers->Locate(key);
    if (level == TierLevel::kNone) continue;
    take(key, level, part);
    break;
  }
  return match;
}

StatusOr<std::vector<std::pair<BlockKey, BlockKey>>> PrefixCache::RecordedTips(
    Namespace handle) const {
  PKV_ASSIGN_OR_RETURN(cache::NamespaceState * ns, Find(handle));
  MutexLock lock(&ns->store_mu);
  return ns->lineage.Entries();
}

Status PrefixCache::Flush() {
  std::vector<TierStack*> stacks;
  {
    MutexLock lock(&mu_);
    if (default_tiers_ != nullptr) stacks.push_back(default_tiers_);
    for (const auto& ns : namespaces_) stacks.push_back(ns->tiers);
  }
  for (TierStack* s : stacks) PKV_RETURN_IF_ERROR(s->Flush());
  return Status::OK();
}

}  // namespace prefixkv
