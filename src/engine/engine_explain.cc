// Engine::ExplainMiss: why a prompt stops hitting. It walks the prompt's
// chain keys through the local tiers (no hit counted, nothing promoted),
// finds where a restore would stop (the first missing block, or the walk-back
// past blocks whose tip-only state is a placeholder), and names the cause:
// the SSD tier's removal history (evicted, removed, corrupt-dropped), or, when
// the first block is missing, another namespace that holds it with the fields
// its manifest differs in. docs/prefix_cache.md "Explaining a miss".
#include <algorithm>
#include <functional>
#include <optional>

#include "engine_impl.h"
#include "prefixkv/namespace_spec.h"

namespace prefixkv {
namespace {

// Where a namespace's blocks are looked up: a registered model's stack (hot,
// then SSD), else the SSD tier alone.
struct BlockSource {
  TierStack* stack = nullptr;
  SsdTier* ssd = nullptr;

  bool Has(const BlockKey& key) const {
    if (stack != nullptr) return stack->Locate(key) != TierLevel::kNone;
    return ssd != nullptr && ssd->Contains(key);
  }
  // A quiet read (no hit, no promotion); a damaged SSD copy is dropped and
  // recorded as corrupt by the SSD tier.
  StatusOr<SharedBytes> Peek(const BlockKey& key) const {
    if (stack != nullptr) {
      PKV_ASSIGN_OR_RETURN(TierHit hit, stack->PeekPayload(key));
      return std::move(hit.payload);
    }
    if (ssd != nullptr) return ssd->PeekPayload(key);
    return Status::NotFound("no tier");
  }
  // How many leading blocks of `tokens` under `root` are held.
  uint64_t LeadingBlocks(const BlockKey& root, std::span<const int32_t> tokens,
                         uint32_t block_tokens) const {
    uint64_t n = 0;
    for (const BlockKey& key : ChainKeys(root, tokens, block_tokens)) {
      if (!Has(key)) break;
      ++n;
    }
    return n;
  }
};

// Another namespace ExplainMiss may find the prompt under.
struct Candidate {
  BlockKey root;
  std::optional<NamespaceSpec> spec;  // none: no manifest (an older directory)
  BlockSource source;
};

// Whether every tip-only layer of a block is real (what a restore needs at
// the block it ends on).
bool TipStateIsReal(const BlockRecord& rec, const std::vector<bool>& tip_only) {
  if (rec.layers.size() != tip_only.size()) return false;
  for (size_t i = 0; i < tip_only.size(); ++i) {
    if (tip_only[i] && rec.layers[i].placeholder) return false;
  }
  return true;
}

// A partial tail a Match takes after the prompt's full blocks.
struct Tail {
  uint64_t tokens = 0;      // 0: none
  bool remote = false;      // the remote tier's: a Match fetches it
  bool restorable = false;  // a restore keeps it (tip-only layers: state real)
};

// Whether a restore ending at `payload` keeps it: a read that fails does
// not; with tip-only layers, its window/recurrent state must be real (the
// walk-back stops at the deepest such block).
bool EndsARestore(const StatusOr<SharedBytes>& payload, const std::vector<bool>& tip_only,
                  const DecodeLimits& limits) {
  if (!payload.ok()) return false;
  if (std::count(tip_only.begin(), tip_only.end(), true) == 0) return true;
  StatusOr<BlockRecord> rec = DecodeBlock(*payload, limits);
  return rec.ok() && TipStateIsReal(*rec, tip_only);
}

// The partial tail a Match takes after the prompt's full blocks (`parent`:
// the last of them, or the root; `rest`: the tokens after them), as it looks
// for one: the longest the local tiers hold, else, with `remote`, the
// longest the remote tier holds whose record a Match takes (looked up
// without counting).
Tail TailAfterChain(const BlockSource& source, const RemoteTier* remote,
                    const BlockKey& root, const BlockKey& parent,
                    std::span<const int32_t> rest, uint32_t block_tokens,
                    const std::vector<bool>& tip_only, const DecodeLimits& limits) {
  const size_t longest = std::min<size_t>(block_tokens - 1, rest.size());
  if (longest == 0) return {};
  const std::vector<BlockKey> keys = PrefixCache::TailKeys(parent, rest.first(longest));
  for (size_t n = longest; n > 0; --n) {
    if (source.Has(keys[n - 1]))
      return {n, false, EndsARestore(source.Peek(keys[n - 1]), tip_only, limits)};
  }
  if (remote == nullptr) return {};
  const std::vector<BlockKey> longest_first(keys.rbegin(), keys.rend());
  const std::vector<std::optional<SharedBytes>> got = remote->PeekMany(longest_first);
  for (size_t i = 0; i < got.size(); ++i) {
    const size_t n = longest - i;
    if (got[i].has_value() &&
        PrefixCache::CheckRemoteRecord(*got[i], longest_first[i], parent, root, n).ok()) {
      return {n, true, EndsARestore(*got[i], tip_only, limits)};
    }
  }
  return {};
}

std::string Block(int64_t index, const BlockKey& key) {
  return "block " + std::to_string(index) + " (" + key.ToHex() + ")";
}

}  // namespace

std::string_view MissKindName(MissKind kind) {
  // In MissKind's order.
  static constexpr std::string_view kNames[] = {
      "none",     "never-stored",    "not-stored",
      "evicted",  "removed",         "corrupt-dropped",
      "stripped", "other-namespace", "in-remote"};
  const size_t i = static_cast<size_t>(kind);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

namespace {

// Every namespace other than `root` that the engine knows: stored manifests,
// registered models, and SSD namespaces without a manifest.
std::vector<Candidate> OtherNamespaces(internal::EngineImpl& impl, const Engine& engine,
                                       const BlockKey& root) {
  std::vector<Candidate> out;
  auto known = [&](const BlockKey& r) {
    return r == root || r.IsZero() ||
           std::any_of(out.begin(), out.end(),
                       [&](const Candidate& c) { return c.root == r; });
  };
  {
    MutexLock lock(&impl.mu_);
    for (const auto& m : impl.models_) {
      StatusOr<NamespaceSpec> spec = impl.cache_->Spec(m->ns);
      if (known(m->ns.root) || !spec.ok()) continue;
      out.push_back({m->ns.root, *spec, {impl.stack_.get(), nullptr}});
    }
  }
  if (impl.ssd_ == nullptr) return out;
  StatusOr<std::vector<StoredManifest>> manifests = engine.Manifests();
  for (const StoredManifest& m :
       manifests.ok() ? *manifests : std::vector<StoredManifest>{}) {
    if (known(m.root) || !m.decoded.ok()) continue;
    out.push_back({m.root, m.decoded->spec, {nullptr, impl.ssd_.get()}});
  }
  for (const SsdNamespaceUsage& u : impl.ssd_->Namespaces()) {
    if (!known(u.namespace_id))
      out.push_back({u.namespace_id, std::nullopt, {nullptr, impl.ssd_.get()}});
  }
  return out;
}

// The namespace holding the most leading blocks of the prompt; false if none.
bool FindOtherNamespace(std::vector<Candidate> candidates, const NamespaceSpec& asked,
                        std::span<const int32_t> tokens, MissExplanation* out) {
  uint64_t best = 0;
  for (const Candidate& c : candidates) {
    const uint32_t block = c.spec ? c.spec->block_tokens : asked.block_tokens;
    const uint64_t n = c.source.LeadingBlocks(c.root, tokens, block);
    if (n <= best) continue;
    best = n;
    out->other_root = c.root;
    out->other_cached_blocks = n;
    out->other_has_manifest = c.spec.has_value();
    out->differences =
        c.spec ? DiffSpecs(*c.spec, asked) : std::vector<ManifestDifference>{};
  }
  if (best == 0) return false;
  out->kind = MissKind::kOtherNamespace;
  std::string why;
  for (const ManifestDifference& d : out->differences) {
    why += (why.empty() ? "" : "; ") + d.ToString();
  }
  if (!out->other_has_manifest) why = "it has no manifest (written before manifests)";
  out->reason = Block(0, out->first_missed_key) + " is not cached, but namespace " +
                out->other_root.ToHex() + " holds " + std::to_string(best) +
                " leading block(s) of this prompt: " + why;
  return true;
}

// How many of `got` (the remote values of keys[from] on) a Match would take
// in a row: present, and each record the block asked for, its checksum sound
// (PrefixCache::CheckRemoteRecord). Counting the values whose envelope
// checked out said the cluster held blocks a Match refuses.
uint64_t UsableRemoteRun(const std::vector<std::optional<SharedBytes>>& got,
                         const BlockKey& root, const std::vector<BlockKey>& keys,
                         uint64_t from, uint32_t block_tokens) {
  uint64_t held = 0;
  for (; held < got.size() && got[held].has_value(); ++held) {
    const uint64_t i = from + held;
    const BlockKey& parent = i == 0 ? root : keys[i - 1];
    if (!PrefixCache::CheckRemoteRecord(*got[held], keys[i], parent, root, block_tokens)
             .ok()) {
      break;
    }
  }
  return held;
}

// With a remote tier: the blocks it holds from keys[from] on, in a row (one
// batch of at most 256, not counted) as a Match would take them, with the
// partial tail after them when they reach the prompt's last full block
// (`tail_after_chain`), and the tokens a restore would give once a Match
// fetched them: up to the deepest fetched block whose tip-only state is
// real, else `restorable` blocks. True when the fetch would restore more
// than the local tiers.
bool FromRemote(const RemoteTier& remote, const BlockKey& root,
                const std::vector<BlockKey>& keys, uint64_t from, uint64_t restorable,
                const std::vector<bool>& tip_only, uint32_t block_tokens,
                const DecodeLimits& limits, const std::function<Tail()>& tail_after_chain,
                MissExplanation* out) {
  const size_t n = std::min<size_t>(keys.size() - from, 256);
  const std::vector<std::optional<SharedBytes>> got =
      remote.PeekMany(std::span<const BlockKey>(keys.data() + from, n));
  const uint64_t held = UsableRemoteRun(got, root, keys, from, block_tokens);
  const Tail tail = held > 0 && from + held == keys.size() ? tail_after_chain() : Tail{};
  uint64_t after = restorable * block_tokens;  // tokens
  for (uint64_t j = from + held; !tail.restorable && j > from; --j) {
    if (EndsARestore(*got[j - 1 - from], tip_only, limits)) {
      after = j * block_tokens;
      break;
    }
  }
  if (tail.restorable) after = keys.size() * block_tokens + tail.tokens;
  out->remote_blocks = held + (tail.remote ? 1 : 0);
  out->restorable_with_remote_tokens = after;
  if (after <= restorable * block_tokens) return false;
  out->kind = MissKind::kInRemote;
  out->reason = Block(out->first_missed_block, out->first_missed_key) +
                " is not in the local tiers, but the remote tier holds it and " +
                std::to_string(out->remote_blocks - 1) +
                " block(s) after it: a Match fetches them (" +
                std::to_string(out->restorable_with_remote_tokens) +
                " tokens restorable then)";
  return true;
}

// The cause of a missing block from the SSD tier's removal history.
void FromHistory(const SsdTier* ssd, MissExplanation* out) {
  const std::string block = Block(out->first_missed_block, out->first_missed_key);
  const uint32_t history_entries = ssd != nullptr ? ssd->removal_history_entries() : 0;
  if (history_entries == 0) {
    out->kind = MissKind::kNotStored;
    out->reason = block +
                  " is not stored (never stored or evicted: no SSD tier keeps a "
                  "removal history here)";
    return;
  }
  StatusOr<std::vector<SsdRemoval>> removals = ssd->Removals();
  const std::vector<SsdRemoval> none;
  const std::vector<SsdRemoval>& history = removals.ok() ? *removals : none;
  for (auto it = history.rbegin(); it != history.rend(); ++it) {
    if (it->key != out->first_missed_key) continue;
    out->kind = it->reason == SsdRemovalReason::kEvicted   ? MissKind::kEvicted
                : it->reason == SsdRemovalReason::kCorrupt ? MissKind::kCorruptDropped
                                                           : MissKind::kRemoved;
    out->reason = block + " was " +
                  (it->reason == SsdRemovalReason::kEvicted ? "evicted from the SSD tier"
                   : it->reason == SsdRemovalReason::kCorrupt
                       ? "dropped as corrupt (its bytes failed verification)"
                       : "removed (a purge or a repair)") +
                  " (removal " + std::to_string(it->sequence) + ")";
    return;
  }
  const bool full = !removals.ok() || history.size() >= history_entries;
  out->kind = full ? MissKind::kNotStored : MissKind::kNeverStored;
  out->reason = full ? block + " is not stored (never stored, or removed before the " +
                           std::to_string(history.size()) + " removals the history holds)"
                     : block +
                           " was never stored (no tier holds it and no removal of it is "
                           "recorded)";
}

}  // namespace

StatusOr<MissExplanation> Engine::ExplainMiss(const NamespaceSpec& spec,
                                              std::span<const int32_t> tokens) {
  PKV_RETURN_IF_ERROR(impl_->CheckOpen());
  PKV_ASSIGN_OR_RETURN(std::string fingerprint, spec.Fingerprint());
  MissExplanation out;
  // A namespace written before its shapes were keyed is found under its old root.
  PKV_ASSIGN_OR_RETURN(RootChoice choice, impl_->ChooseRoot(spec, fingerprint));
  out.prompt_tokens = tokens.size();
  BlockSource source{nullptr, impl_->ssd_.get()};
  // Whether a Match looks for partial tails: the registered model's option;
  // unregistered (a tool's look), any tail stored is looked for.
  bool tails = true;
  {
    MutexLock lock(&impl_->mu_);
    choice = impl_->UnlessHeldInThisRun(choice, fingerprint);
    out.root = choice.root;
    for (const auto& m : impl_->models_) {
      if (m->fingerprint != fingerprint) continue;
      source = {impl_->stack_.get(), nullptr};
      out.root = m->ns.root;
      tails = m->options.store_partial_tail;
    }
  }
  std::vector<bool> tip_only;
  for (const std::string& t : spec.layer_types) {
    tip_only.push_back(IsTipOnly(CacheTypeRegistry::Lookup(t).value()));
  }
  const bool any_tip_only = std::count(tip_only.begin(), tip_only.end(), true) > 0;
  const std::vector<BlockKey> keys = ChainKeys(out.root, tokens, spec.block_tokens);
  out.full_blocks = keys.size();
  uint64_t cached = 0;
  while (cached < keys.size() && source.Has(keys[cached])) ++cached;
  // The walk-back: the deepest cached block whose tip-only state is real. A
  // block that fails to read (dropped as corrupt) ends the cached run there.
  uint64_t restorable = any_tip_only ? 0 : cached;
  for (uint64_t j = cached; any_tip_only && j > 0; --j) {
    StatusOr<SharedBytes> payload = source.Peek(keys[j - 1]);
    StatusOr<BlockRecord> rec = payload.ok()
                                    ? DecodeBlock(*payload, impl_->options_.decode_limits)
                                    : StatusOr<BlockRecord>(payload.status());
    if (!rec.ok()) {
      cached = j - 1;
      continue;
    }
    if (TipStateIsReal(*rec, tip_only)) {
      restorable = j;
      break;
    }
  }
  out.cached_blocks = cached;
  out.restorable_tokens = restorable * spec.block_tokens;
  const RemoteTier* remote =
      choice.shapes_recorded_later ? nullptr : impl_->remote_.get();
  // The partial tail after the full blocks is the chain's last block to a
  // Match, and a restore gives it (with tip-only layers the walk-back stops
  // at it when its state is real: the interior blocks before it are
  // placeholders). Counting full blocks only, a conversation whose tip is
  // its tail was said stripped to 0 tokens, or in no tier.
  const uint64_t full_tokens = keys.size() * spec.block_tokens;
  auto tail_after_chain = [&] {
    return tails ? TailAfterChain(source, remote, out.root,
                                  keys.empty() ? out.root : keys.back(),
                                  tokens.subspan(full_tokens), spec.block_tokens,
                                  tip_only, impl_->options_.decode_limits)
                 : Tail{};
  };
  const Tail tail = cached == keys.size() ? tail_after_chain() : Tail{};
  const bool local_tail = tail.restorable && !tail.remote;
  if (local_tail) out.restorable_tokens = full_tokens + tail.tokens;
  if (tail.remote) {
    out.remote_blocks = 1;
    out.restorable_with_remote_tokens =
        tail.restorable ? full_tokens + tail.tokens : out.restorable_tokens;
  }
  const std::string remote_tail =
      "the remote tier holds a partial tail of " + std::to_string(tail.tokens) +
      " token(s) after them: a Match fetches it (" +
      std::to_string(out.restorable_with_remote_tokens) + " tokens restorable then)";
  if (restorable == keys.size() || local_tail) {
    out.reason =
        "no miss: every full block (" + std::to_string(keys.size()) + ") is cached";
    if (local_tail) {
      out.reason += " and a partial tail of " + std::to_string(tail.tokens) + " token(s)";
    }
    if (tokens.size() > out.restorable_tokens) {
      out.reason += "; the last " +
                    std::to_string(tokens.size() - out.restorable_tokens) +
                    " token(s) are not a full block";
    }
    if (tail.remote && tail.restorable) out.reason += "; " + remote_tail;
    return out;
  }
  out.first_missed_block =
      static_cast<int64_t>(restorable < cached ? restorable : cached);
  out.first_missed_key = keys[out.first_missed_block];
  if (tail.remote && tail.restorable) {
    out.kind = MissKind::kInRemote;
    out.reason = Block(out.first_missed_block, out.first_missed_key) + " to block " +
                 std::to_string(cached - 1) +
                 " are cached with a placeholder window/recurrent state, and " +
                 remote_tail;
    return out;
  }
  if (restorable < cached) {
    out.kind = MissKind::kStripped;
    out.reason =
        Block(out.first_missed_block, out.first_missed_key) + " to block " +
        std::to_string(cached - 1) +
        " are cached, but their window/recurrent state is a placeholder (interior "
        "blocks, or tips stripped by supersede-on-extend): a restore walks back to " +
        std::to_string(out.restorable_tokens) + " tokens";
    return out;
  }
  if (remote != nullptr &&
      FromRemote(*remote, out.root, keys, cached, restorable, tip_only, spec.block_tokens,
                 impl_->options_.decode_limits, tail_after_chain, &out)) {
    return out;
  }
  if (cached == 0 &&
      FindOtherNamespace(OtherNamespaces(*impl_, *this, out.root), spec, tokens, &out)) {
    return out;
  }
  FromHistory(impl_->ssd_.get(), &out);
  return out;
}

}  // namespace prefixkv
