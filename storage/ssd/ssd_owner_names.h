// OwnerNames: which owner id a block's metadata record and the counter
// records carry (the "stored" id) for each owner id of this run (the caller's:
// the Engine's SharedHotBudget hands them out per run, in registration order).
//
// The stored id of an owner stays with its stable name across runs: the
// metadata database keeps one record per name ('o' | name -> stored id,
// ssd_layout.h), so a restart that registers the owners in another order
// still counts each owner's blocks, bytes and events for it (docs/ssd.md
// "Owner names"). A tier nobody names owners of (SsdTier used on its own, the
// tools) stores every owner id as it is. Pure bookkeeping: the TierImpl loads
// and persists the records (ssd_owner_names.cc) and guards this with a lock.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "prefixkv/advanced/tier.h"
#include "prefixkv/status.h"

namespace prefixkv::ssd {

class OwnerNames {
 public:
  // A record read at Open: `name` is stored as `stored`.
  void Load(const std::string& name, OwnerId stored);
  // At Open, for every block whose stored id no name has: a directory
  // written before names were kept, or blocks a metadata rebuild restored.
  // An id whose blocks are all of one namespace can be adopted by the owner
  // of that namespace (Choose).
  void NoteUnnamedBlock(OwnerId stored, const BlockKey& namespace_id);
  bool IsNamed(OwnerId stored) const { return named_.count(stored) > 0; }
  // The name whose stored id is `stored`, or "" (an unnamed id).
  std::string NameOf(OwnerId stored) const;

  // The stored id for this run's `owner`, named `name`, that writes the
  // blocks of `namespace_id` (nullopt: none, a memory charge): the name's
  // id when it has one; else an unnamed id whose blocks are all of that
  // namespace (an earlier run's id of this owner); else a fresh id (`owner`
  // itself if free), never one of `in_use` (ids with blocks or counters).
  // `*is_new`: the name had no id (its record is to be written).
  // InvalidArgument when `owner`, or the name's id, is bound already.
  StatusOr<OwnerId> Choose(OwnerId owner, const std::string& name,
                           std::optional<BlockKey> namespace_id,
                           const std::set<OwnerId>& in_use, bool* is_new) const;
  // Binds `owner` to `stored` for this run (and `name` to it, if new). The
  // other unnamed ids whose blocks are all of `namespace_id` (a roll-forward
  // restores a namespace the old metadata held no block of under an id of
  // its own, also when its owner's name is recorded already) are read as
  // `owner` too, and counted for it (Adopted).
  void Bind(OwnerId owner, const std::string& name, OwnerId stored,
            std::optional<BlockKey> namespace_id);
  // The unnamed ids `owner` took over at Bind, besides its own.
  std::vector<OwnerId> Adopted(OwnerId owner) const;

  // What records carry for this run's `owner`: its bound id; an owner never
  // bound is stored as itself, unless that id is another owner's (then as
  // kEveryOwner: nobody's).
  OwnerId Stored(OwnerId owner) const;
  // This run's owner of a stored id: the owner bound to it; an id no name
  // has and no owner of this run is bound to reads as itself; any other
  // (an owner of another run, not registered in this one) as kEveryOwner.
  OwnerId Run(OwnerId stored) const;
  // Whether `owner`'s counters are those of a stored id (`*stored`): false
  // for an owner never bound whose own id is another owner's.
  bool CountsUnder(OwnerId owner, OwnerId* stored) const;

 private:
  std::map<std::string, OwnerId, std::less<>> by_name_;
  std::set<OwnerId> named_;
  std::map<OwnerId, OwnerId> stored_of_run_;
  std::map<OwnerId, OwnerId> run_of_stored_;
  std::map<OwnerId, std::vector<OwnerId>> adopted_;  // run owner -> unnamed ids
  // Unnamed stored ids at Open: the one namespace of their blocks, or
  // nullopt when they hold blocks of several.
  std::map<OwnerId, std::optional<BlockKey>> unnamed_namespace_;
};

// A name record's key and value ('o' | name -> version 1, stored id u32 LE).
std::string OwnerNameKey(std::string_view name);
std::string EncodeOwnerName(OwnerId stored);
// False for a record of another version or length (skipped).
bool DecodeOwnerName(std::string_view key, std::string_view value, std::string* name,
                     OwnerId* stored);

}  // namespace prefixkv::ssd
