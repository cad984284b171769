// Owner names (ssd_owner_names.h, docs/ssd.md "Owner names"): the stored
// owner id of each name, kept in the metadata database so that an owner's
// blocks and counters stay its own whatever order a later run registers the
// owners in; and the TierImpl's side: loading the records at Open, binding
// an owner of this run (writing its record when the name is new) and the
// translation between this run's ids and the stored ones.
#include "ssd_owner_names.h"

#include <rocksdb/write_batch.h>

#include "ssd_layout.h"
#include "ssd_tag_range.h"
#include "ssd_tier_impl.h"

namespace prefixkv {
namespace ssd {

inline constexpr uint8_t kOwnerNameVersion = 1;

std::string OwnerNameKey(std::string_view name) {
  std::string k(1, kOwnerNameTag);
  k.append(name);
  return k;
}

std::string EncodeOwnerName(OwnerId stored) {
  std::string v(5, '\0');
  v[0] = static_cast<char>(kOwnerNameVersion);
  for (int i = 0; i < 4; ++i) v[1 + i] = static_cast<char>(stored >> (8 * i));
  return v;
}

bool DecodeOwnerName(std::string_view key, std::string_view value, std::string* name,
                     OwnerId* stored) {
  if (key.size() < 2 || key[0] != kOwnerNameTag) return false;
  if (value.size() != 5 || static_cast<uint8_t>(value[0]) != kOwnerNameVersion) {
    return false;
  }
  *name = std::string(key.substr(1));
  *stored = 0;
  for (int i = 3; i >= 0; --i)
    *stored = (*stored << 8) | static_cast<uint8_t>(value[1 + i]);
  return true;
}

void OwnerNames::Load(const std::string& name, OwnerId stored) {
  by_name_[name] = stored;
  named_.insert(stored);
}

std::string OwnerNames::NameOf(OwnerId stored) const {
  if (named_.count(stored) == 0) return "";
  for (const auto& [name, id] : by_name_) {
    if (id == stored) return name;
  }
  return "";
}

void OwnerNames::NoteUnnamedBlock(OwnerId stored, const BlockKey& namespace_id) {
  auto [it, inserted] = unnamed_namespace_.try_emplace(stored, namespace_id);
  if (!inserted && it->second != namespace_id) it->second = std::nullopt;  // several
}

StatusOr<OwnerId> OwnerNames::Choose(OwnerId owner, const std::string& name,
                                     std::optional<BlockKey> namespace_id,
                                     const std::set<OwnerId>& in_use,
                                     bool* is_new) const {
  *is_new = false;
  const auto bound = stored_of_run_.find(owner);
  const auto known = by_name_.find(name);
  if (bound != stored_of_run_.end()) {
    if (known != by_name_.end() && known->second == bound->second) return bound->second;
    return Status::InvalidArgument("ssd tier: owner " + std::to_string(owner) +
                                   " is named already");
  }
  if (known != by_name_.end()) {
    if (run_of_stored_.count(known->second) > 0) {
      return Status::InvalidArgument("ssd tier: owner name " + name +
                                     " is bound to another owner");
    }
    return known->second;
  }
  *is_new = true;
  const auto free = [&](OwnerId id) {
    return id != kEveryOwner && named_.count(id) == 0 && run_of_stored_.count(id) == 0;
  };
  // An earlier run's id of this owner: its blocks are all of its namespace.
  if (namespace_id.has_value()) {
    std::optional<OwnerId> adopt;
    for (const auto& [id, ns] : unnamed_namespace_) {
      if (!free(id) || ns != namespace_id) continue;
      if (!adopt.has_value() || id == owner) adopt = id;
    }
    if (adopt.has_value()) return *adopt;
  }
  // A fresh id: none that records carry yet (another owner's blocks or
  // counters, or an earlier run's nobody has adopted).
  if (free(owner) && in_use.count(owner) == 0) return owner;
  for (OwnerId id = 0;; ++id) {
    if (free(id) && in_use.count(id) == 0) return id;
  }
}

void OwnerNames::Bind(OwnerId owner, const std::string& name, OwnerId stored,
                      std::optional<BlockKey> namespace_id) {
  Load(name, stored);
  stored_of_run_[owner] = stored;
  run_of_stored_[stored] = owner;
  unnamed_namespace_.erase(stored);
  if (!namespace_id.has_value()) return;
  // Its namespace's blocks under ids of their own: a name recorded already
  // keeps its id (Choose), and they counted for nobody until evicted.
  for (auto it = unnamed_namespace_.begin(); it != unnamed_namespace_.end();) {
    const OwnerId id = it->first;
    if (it->second != namespace_id || named_.count(id) > 0 ||
        run_of_stored_.count(id) > 0) {
      ++it;
      continue;
    }
    run_of_stored_[id] = owner;
    adopted_[owner].push_back(id);
    it = unnamed_namespace_.erase(it);
  }
}

std::vector<OwnerId> OwnerNames::Adopted(OwnerId owner) const {
  const auto it = adopted_.find(owner);
  return it == adopted_.end() ? std::vector<OwnerId>{} : it->second;
}

OwnerId OwnerNames::Stored(OwnerId owner) const {
  OwnerId stored = kEveryOwner;
  return CountsUnder(owner, &stored) ? stored : kEveryOwner;
}

bool OwnerNames::CountsUnder(OwnerId owner, OwnerId* stored) const {
  if (const auto it = stored_of_run_.find(owner); it != stored_of_run_.end()) {
    *stored = it->second;
    return true;
  }
  *stored = owner;
  return named_.count(owner) == 0 && run_of_stored_.count(owner) == 0;
}

OwnerId OwnerNames::Run(OwnerId stored) const {
  if (const auto it = run_of_stored_.find(stored); it != run_of_stored_.end()) {
    return it->second;
  }
  if (named_.count(stored) > 0 || stored_of_run_.count(stored) > 0) return kEveryOwner;
  return stored;
}

}  // namespace ssd

Status ssd::TierImpl::LoadOwnerNames() {
  ssd::OwnerNames names;
  uint64_t skipped = 0;
  ssd::TagRange range(db_.get(), ssd::kOwnerNameTag);
  for (; range.Valid(); range.Next()) {
    std::string name;
    OwnerId stored = 0;
    if (ssd::DecodeOwnerName(range.key(), range.value(), &name, &stored)) {
      names.Load(name, stored);
    } else {
      ++skipped;  // attribution only: the owner gets a fresh id
    }
  }
  PKV_RETURN_IF_ERROR(range.status("read owner names"));
  if (skipped > 0) Log(std::to_string(skipped) + " owner name records skipped");
  {
    MutexLock lock(&mu_);
    for (const auto& [key, e] : index_.entries()) {
      if (!names.IsNamed(e.owner)) names.NoteUnnamedBlock(e.owner, e.namespace_id);
    }
  }
  MutexLock lock(&names_mu_);
  names_ = std::move(names);
  return Status::OK();
}

Status ssd::TierImpl::BindOwner(OwnerId owner, const std::string& name,
                                std::optional<BlockKey> namespace_id) {
  std::set<OwnerId> in_use;
  {
    MutexLock lock(&mu_);
    for (const auto& [id, c] : index_.owners()) in_use.insert(id);
  }
  bool is_new = false;
  OwnerId stored = 0;
  {
    MutexLock lock(&names_mu_);
    PKV_ASSIGN_OR_RETURN(stored,
                         names_.Choose(owner, name, namespace_id, in_use, &is_new));
    names_.Bind(owner, name, stored, namespace_id);
  }
  if (!is_new) return Status::OK();
  // Bound for this run either way; a record that did not reach the database
  // is chosen again by the next run from the blocks' namespace.
  rocksdb::WriteBatch batch;
  batch.Put(ssd::OwnerNameKey(name), ssd::EncodeOwnerName(stored));
  return Commit(&batch, {}, stored);
}

OwnerId ssd::TierImpl::StoredOwner(OwnerId owner) const {
  MutexLock lock(&names_mu_);
  return names_.Stored(owner);
}

OwnerId ssd::TierImpl::RunOwner(OwnerId stored) const {
  MutexLock lock(&names_mu_);
  return names_.Run(stored);
}

void ssd::TierImpl::EmitEvent(KvEvent event) const {
  event.owner = RunOwner(event.owner);
  options_.events->Emit(event);
}

BlockMeta ssd::TierImpl::Stored(BlockMeta meta) const {
  meta.owner = StoredOwner(meta.owner);
  return meta;
}

BlockMeta ssd::TierImpl::Run(BlockMeta meta) const {
  meta.owner = RunOwner(meta.owner);
  return meta;
}

}  // namespace prefixkv
