// Namespace manifests at the engine: RegisterModel stores a namespace's
// manifest in the SSD tier the first time (and refuses a root whose stored
// manifest has another fingerprint), and Manifests() reads them back for
// `prefixkv inspect` and ExplainMiss (docs/format.md §5).
#include <algorithm>
#include <optional>

#include "engine_impl.h"

namespace prefixkv {

namespace {

// Whether the blocks stored under `ns` were written with `spec`'s layer
// shapes: up to 8 of them (chain ends first: only they hold the state of
// rotating and recurrent layers) decode and fit (CheckLayerShapes). False when
// none can be read: then there is nothing to keep.
bool StoredBlocksFit(SsdTier& ssd, const BlockKey& ns, const NamespaceSpec& spec,
                     const DecodeLimits& limits) {
  std::vector<BlockKey> keys;
  ssd.ForEach([&](const BlockMeta& m, uint64_t) {
    if (m.namespace_id == ns && keys.size() < 64) keys.push_back(m.key);
  });
  std::stable_partition(keys.begin(), keys.end(),
                        [&](const BlockKey& k) { return !ssd.HasStoredChildren(k); });
  size_t fit = 0;
  for (const BlockKey& key : keys) {
    if (fit == 8) break;
    StatusOr<SharedBytes> payload = ssd.PeekPayload(key);
    if (!payload.ok()) continue;
    StatusOr<BlockRecord> rec = DecodeBlock(*payload, limits);
    if (!rec.ok()) continue;
    // Not a block of this layout (the namespace's tip lineage record).
    if (rec->layers.size() != spec.layer_shapes.size()) continue;
    if (!CheckLayerShapes(*rec, spec.layer_shapes).ok()) return false;
    ++fit;
  }
  return fit > 0;
}

}  // namespace

StatusOr<RootChoice> internal::EngineImpl::ChooseRoot(
    const NamespaceSpec& spec, const std::string& fingerprint) const {
  RootChoice own{NamespaceRootFromFingerprint(fingerprint)};
  if (ssd_ == nullptr || spec.layer_shapes.empty()) return own;
  PKV_ASSIGN_OR_RETURN(std::string legacy_fp, WithoutLayerShapes(spec).Fingerprint());
  const BlockKey legacy = NamespaceRootFromFingerprint(legacy_fp);
  PKV_ASSIGN_OR_RETURN(auto stored, ssd_->Manifests());
  std::optional<std::string> legacy_text;
  for (const auto& [ns, text] : stored) {
    if (ns == own.root) return own;  // registered with its shapes before
    if (ns == legacy) legacy_text = text;
  }
  RootChoice adopted{legacy, /*shapes_recorded_later=*/true, /*record_shapes=*/false};
  if (legacy_text.has_value()) {
    StatusOr<NamespaceManifest> m = DecodeManifest(*legacy_text);
    if (!m.ok() || m->fingerprint != legacy_fp) return own;  // refused at its root
    if (m->shapes_recorded_later) {
      // Adopted before: by exactly this spec only.
      StatusOr<std::string> adopted_by = m->spec.Fingerprint();
      return adopted_by.ok() && *adopted_by == fingerprint ? adopted : own;
    }
  }
  // The legacy form (or blocks from before manifests): adopted when its
  // blocks fit these shapes.
  if (!StoredBlocksFit(*ssd_, legacy, spec, options_.decode_limits)) return own;
  adopted.record_shapes = true;
  return adopted;
}

RootChoice internal::EngineImpl::UnlessHeldInThisRun(
    const RootChoice& choice, const std::string& fingerprint) const {
  if (!choice.shapes_recorded_later) return choice;
  for (const auto& m : models_) {
    // (Not the spec itself: ExplainMiss of the model that adopted the root.)
    if (m->ns.root == choice.root && m->fingerprint != fingerprint)
      return RootChoice{NamespaceRootFromFingerprint(fingerprint)};
  }
  return choice;
}

Status internal::EngineImpl::KeepAdoptedNamespacesLocal() {
  PKV_ASSIGN_OR_RETURN(auto stored, ssd_->Manifests());
  for (const auto& [ns, text] : stored) {
    StatusOr<NamespaceManifest> m = DecodeManifest(text);
    if (m.ok() && m->shapes_recorded_later) stack_->KeepLocal(ns);
  }
  return Status::OK();
}

Status internal::EngineImpl::StoreManifest(const NamespaceSpec& spec,
                                           const std::string& fingerprint,
                                           const RootChoice& choice) {
  if (ssd_ == nullptr) return Status::OK();
  if (choice.shapes_recorded_later) {
    if (!choice.record_shapes) return Status::OK();
    PKV_ASSIGN_OR_RETURN(std::string text,
                         EncodeManifest(spec, /*shapes_recorded_later=*/true));
    return ssd_->PutManifest(choice.root, text);
  }
  const BlockKey& root = choice.root;
  PKV_ASSIGN_OR_RETURN(auto stored, ssd_->Manifests());
  for (const auto& [ns, text] : stored) {
    if (ns != root) continue;
    StatusOr<NamespaceManifest> m = DecodeManifest(text);
    if (m.ok() && m->fingerprint != fingerprint) {
      return Status::Corruption("namespace " + root.ToHex() +
                                " has a stored manifest of " + m->fingerprint + ", not " +
                                fingerprint + ": refusing to reuse its blocks");
    }
    // Adopted by a spec with layer shapes (docs/format.md §5.1): a spec
    // without them could store blocks of other shapes there.
    if (m.ok() && m->shapes_recorded_later) {
      std::string shapes;
      for (const LayerShape& l : m->spec.layer_shapes)
        shapes += (shapes.empty() ? "" : ",") + l.ToString();
      return Status::InvalidArgument(
          "namespace " + root.ToHex() + " of model " + spec.model +
          " serves layer shapes " + shapes +
          " (kept from before shapes were keyed): register the spec with them");
    }
    // The same fingerprint (a manifest of a newer version or a damaged one
    // is rewritten: the root is the hash of the fingerprint it describes).
    if (m.ok()) return Status::OK();
  }
  PKV_ASSIGN_OR_RETURN(std::string text, EncodeManifest(spec));
  return ssd_->PutManifest(root, text);
}

StatusOr<std::vector<StoredManifest>> Engine::Manifests() const {
  PKV_RETURN_IF_ERROR(impl_->CheckOpen());
  std::vector<StoredManifest> out;
  if (impl_->ssd_ == nullptr) return out;
  PKV_ASSIGN_OR_RETURN(auto stored, impl_->ssd_->Manifests());
  for (auto& [root, text] : stored) {
    StoredManifest m{root, std::move(text)};
    m.decoded = DecodeManifest(m.text);
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace prefixkv
