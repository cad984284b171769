// TipLineage: the recorded tips of one namespace and the tip each extended.
//
// Supersede-on-extend (docs/prefix_cache.md, "Supersede-on-extend lineage") needs, for a
// store's previous tip P, the tip recorded before P (the grandparent G), which is
// stripped. The lineage maps every recorded real tip to the tip it extended. A stripped
// or overwritten tip leaves the map, so the map holds only tips that are real.
//
// It persists as one block record under a reserved key of the namespace
// (RecordKey): token_count 0, no tokens, one layer of type kLineageLayerType
// whose single uint8 tensor holds the entries:
//   u32 magic "PKVL" | u32 version (1) | u64 count |
//   count x (tip key 16 B | previous tip key 16 B | tip's parent key 16 B |
//            sequence u64 | tip token count u32 | flags u32 (1: partial)),
//   all little-endian.
// Using the block codec means the record is checksummed like any block and
// every tool that walks a tier can decode it.
//
// Not thread-safe: the owning namespace serialises access (its store mutex).
#pragma once

#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "prefixkv/block.h"
#include "prefixkv/bytes.h"
#include "prefixkv/status.h"

namespace prefixkv {

inline constexpr const char* kLineageLayerType = "prefixkv.TipLineage";

// Where a tip sits in its chain: a partial tail tip is not on the key chain of
// a longer store, so finding it needs its parent and length.
struct TipPlace {
  BlockKey parent;           // the block before the tip (the root for the first)
  uint32_t token_count = 0;  // tokens the tip block covers
  bool partial = false;      // a marked partial tail block
};

class TipLineage {
 public:
  // The reserved key of a namespace's lineage record: ChainKey(root, no
  // tokens, extra key "prefixkv/tip-lineage/v1"). No block key can equal it:
  // block keys always hash at least one token.
  static BlockKey RecordKey(const BlockKey& root);

  bool empty() const { return tips_.empty(); }
  size_t size() const { return tips_.size(); }
  bool IsTip(const BlockKey& key) const { return tips_.count(key) > 0; }
  // The tip `tip` extended; zero when none or `tip` is not recorded.
  BlockKey PreviousOf(const BlockKey& tip) const;
  // Records `tip` (newest) as extending `previous` (zero: none).
  void Record(const BlockKey& tip, const BlockKey& previous, const TipPlace& place);
  // Calls fn(tip, place) for every recorded tip.
  template <typename Fn>
  void ForEachTip(Fn fn) const {
    for (const auto& [tip, e] : tips_) fn(tip, e.place);
  }
  // Forgets a tip (stripped, overwritten by a placeholder, or evicted).
  void Forget(const BlockKey& tip);
  // Drops every tip for which `present` is false.
  template <typename Pred>
  void RetainIf(Pred present) {
    for (auto it = tips_.begin(); it != tips_.end();) {
      it = present(it->first) ? std::next(it) : tips_.erase(it);
    }
  }
  // (tip, previous) oldest first.
  std::vector<std::pair<BlockKey, BlockKey>> Entries() const;

  // The block record described above.
  BlockRecord ToRecord(const BlockKey& root) const;
  // Corruption when the record is not a lineage record of `root`.
  static StatusOr<TipLineage> FromRecord(const BlockRecord& record, const BlockKey& root);

 private:
  struct Entry {
    BlockKey previous;
    TipPlace place;
    uint64_t seq = 0;  // recording order, for Entries()
  };
  std::unordered_map<BlockKey, Entry, BlockKeyHash> tips_;
  uint64_t next_seq_ = 0;
};

}  // namespace prefixkv
