// Namespace manifests at the engine: RegisterModel stores a namespace's
// manifest in the SSD tier the first time (and refuses a root whose stored
// manifest has another fingerprint), and Manifests() reads them back for
// `prefixkv inspect` and ExplainMiss (docs/format.md §5).
#include "engine_impl.h"

namespace prefixkv {

Status internal::EngineImpl::StoreManifest(const NamespaceSpec& spec,
                                           const std::string& fingerprint,
                                           const BlockKey& root) {
  if (ssd_ == nullptr) return Status::OK();
  PKV_ASSIGN_OR_RETURN(auto stored, ssd_->Manifests());
  for (const auto& [ns, text] : stored) {
    if (ns != root) continue;
    StatusOr<NamespaceManifest> m = DecodeManifest(text);
    if (m.ok() && m->fingerprint != fingerprint) {
      return Status::Corruption("namespace " + root.ToHex() +
                                " has a stored manifest of " + m->fingerprint + ", not " +
                                fingerprint + ": refusing to reuse its blocks");
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
