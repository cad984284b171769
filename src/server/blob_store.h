// BlobStore: the server's facade over a hot tier and an optional SSD tier.
//
//   Get:    hot, then SSD; an SSD hit is promoted into the hot tier (clean).
//   Put:    into the hot tier as dirty, so the hot tier's eviction listener (the
//           SSD tier) writes it back when it is evicted; straight to SSD when
//           there is no hot tier or the block does not fit in it. Write-through:
//           to SSD first, then a clean copy into the hot tier.
//   Remove: from every tier.
//
// Raw Redis keys become BlockKeys by RawKey() (XXH3-128 of "raw|" + key) with a
// zero namespace, so they never collide with prefix-cache blocks, whose keys
// are chain hashes of a namespace root.
//
// Per-key operations are serialized by a striped lock, so an SSD hit being
// promoted can never overwrite a newer value stored concurrently.
#pragma once

#include <array>
#include <mutex>
#include <string_view>
#include <vector>

#include "prefixkv/advanced/tier.h"
#include "prefixkv/block.h"
#include "prefixkv/bytes.h"
#include "prefixkv/status.h"

namespace prefixkv::server {

// Thread-safe: every method may be called concurrently.
class BlobStore {
 public:
  // At least one of `hot` and `ssd` must be non-null; both outlive the store.
  BlobStore(BlockTier* hot, BlockTier* ssd, bool write_through = false)
      : hot_(hot), ssd_(ssd), write_through_(write_through && ssd != nullptr) {}

  // The BlockKey a raw Redis key is stored under.
  static BlockKey RawKey(std::string_view key);

  // The payload, or NotFound. Other errors come from a failing tier.
  StatusOr<SharedBytes> Get(const BlockKey& key);
  // Stores or replaces. NoSpace when no tier can take it.
  Status Put(const BlockMeta& meta, SharedBytes payload);
  // True when the key was present in any tier.
  StatusOr<bool> Remove(const BlockKey& key);
  bool Contains(const BlockKey& key) const;

  // The tiers, hot first (for INFO, PKV.STATS and PKV.AUDIT).
  std::vector<BlockTier*> tiers() const;

 private:
  std::mutex& StripeFor(const BlockKey& key) {
    return stripes_[key.lo % stripes_.size()];
  }
  StatusOr<SharedBytes> GetFromSsd(const BlockKey& key);

  BlockTier* const hot_;
  BlockTier* const ssd_;
  const bool write_through_;
  std::array<std::mutex, 64> stripes_;
};

}  // namespace prefixkv::server
