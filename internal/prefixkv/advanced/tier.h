// The narrow interface every storage tier implements (hot RAM, SSD on RocksDB,
// the simple in-memory tier used by tests and replay), so that one typed test
// suite runs against all of them and the prefix cache can stack them.
//
// A tier stores opaque payloads (normally encoded block records, see codec.h)
// under 128-bit keys, with a little metadata: the parent key (so eviction can
// take chain leaves before their ancestors), the namespace (the SSD key prefix)
// and the owner charged for the bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "prefixkv/block.h"
#include "prefixkv/bytes.h"
#include "prefixkv/status.h"
#include "prefixkv/tier_types.h"

namespace prefixkv {

struct BlockMeta {
  BlockKey key;
  BlockKey parent;        // the previous block of the chain; zero when none
  BlockKey namespace_id;  // chain root; zero for raw blobs (server GET/SET)
  OwnerId owner = 0;
};

// Not an owner: a lookup of any owner's block (HotTier::OpenShared's view).
inline constexpr OwnerId kEveryOwner = ~OwnerId{0};

// Whose read the tier calls on this thread are, for counting a miss (a key
// alone does not say whose it would have been). The one TierStack sets it
// from its read options; a tier without a scope counts misses unattributed.
class ReadOwnerScope {
 public:
  explicit ReadOwnerScope(OwnerId owner);
  ~ReadOwnerScope();
  ReadOwnerScope(const ReadOwnerScope&) = delete;
  ReadOwnerScope& operator=(const ReadOwnerScope&) = delete;

 private:
  OwnerId previous_;
};

// The owner of the innermost ReadOwnerScope on this thread; kEveryOwner
// without one.
OwnerId CurrentReadOwner();

// Receives blocks a tier evicts for capacity. `dirty` is true when the block is
// not yet stored in any lower tier: the listener must keep it (write-back) or
// the block is lost. Called without the tier's locks held; may block
// (backpressure) but must not call back into the evicting tier.
class EvictionListener {
 public:
  virtual ~EvictionListener() = default;
  virtual void OnEvict(const BlockMeta& meta, const SharedBytes& payload, bool dirty) = 0;
};

// What BlockTier::ReadAhead did.
enum class ReadAheadResult : uint8_t { kNone, kStarted, kFull };

// Thread-safe: every method may be called concurrently.
class BlockTier {
 public:
  virtual ~BlockTier() = default;

  // "hot", "ssd", "mem", "remote".
  virtual std::string_view name() const = 0;

  // Stores or replaces a block. `dirty`: not yet stored in a lower tier (the
  // eviction listener then receives it). NoSpace when it cannot fit even after
  // evicting everything evictable; nothing changes then.
  virtual Status Put(const BlockMeta& meta, SharedBytes payload, bool dirty) = 0;

  // The payload, or NotFound (a miss). A tier that verifies checksums returns
  // NotFound with a "corrupt" reason for a damaged block, after removing it and
  // counting it; it never returns wrong bytes.
  virtual StatusOr<SharedBytes> Get(const BlockKey& key) = 0;
  // Get of each key, in order; nullopt for a miss. A tier that can batch the
  // lookups (the remote tier pipelines them in one round trip) overrides it.
  virtual std::vector<std::optional<SharedBytes>> GetMany(
      std::span<const BlockKey> keys) {
    std::vector<std::optional<SharedBytes>> out(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      StatusOr<SharedBytes> got = Get(keys[i]);
      if (got.ok()) out[i] = std::move(got).value();
    }
    return out;
  }

  // A block this tier returned (Get, GetMany) that its reader refused past
  // the tier's own checks: a remote value whose envelope checked out around
  // a record that does not, or that is not the block asked for. A tier that
  // counts its reads counts it as a corruption and a miss instead of a hit,
  // and drops it. The default (a tier whose reads need no second look):
  // nothing. `bytes`: the payload's size; `why`: for the tier's log.
  virtual void ReportDamaged(const BlockKey& /*key*/, uint64_t /*bytes*/,
                             std::string_view /*why*/) {}

  // Read-ahead: a hint that Get(key) follows soon. A tier that reads slowly
  // (SSD) may start reading it in the background (kStarted); the read counts
  // nothing and Get serves it only if it is still current. kFull: not now,
  // the tier's read-ahead bound is taken (ask again after a Get); kNone (the
  // default): nothing to read ahead. CancelReadAhead forgets a started read
  // no Get will take.
  virtual ReadAheadResult ReadAhead(const BlockKey& /*key*/) {
    return ReadAheadResult::kNone;
  }
  virtual void CancelReadAhead(const BlockKey& /*key*/) {}

  // Metadata without counting a hit or touching recency; NotFound when absent.
  virtual StatusOr<BlockMeta> Peek(const BlockKey& key) const = 0;
  virtual bool Contains(const BlockKey& key) const = 0;

  // Removes a block; NotFound when absent.
  virtual Status Remove(const BlockKey& key) = 0;

  // A hint from the embedder that the block is unlikely to be read again
  // (docs/eviction.md, "Reuse hints"). A tier that orders its blocks for
  // eviction lets it leave before every block without the hint until it is
  // read again, and returns true; false when the block is absent or the tier
  // ignores hints (the default). Counts nothing; never an error.
  virtual bool HintUnlikelyReuse(const BlockKey& /*key*/) { return false; }

  // Maintenance access, used by TierStack::Flush on the tier above another:
  // like a read and a clean re-put, but counting no hit or insert and leaving
  // the block's place in the eviction order (and its reuse facts) alone, so a
  // flush or an audit changes no counter a user audits and no eviction
  // decision. HotTier and MemTier implement both that way; the defaults (Get,
  // and a clean Put, which do count) serve tiers never stacked above another.
  // The payload as stored; NotFound when absent.
  virtual StatusOr<SharedBytes> PeekPayload(const BlockKey& key) { return Get(key); }
  // The block is now stored in a lower tier: clears its dirty flag when its
  // payload is still `payload` (the same buffer), so evicting it writes
  // nothing more. Whether it did.
  virtual bool MarkStoredBelow(const BlockMeta& meta, const SharedBytes& payload) {
    return Put(meta, payload, /*dirty=*/false).ok();
  }

  // Whether a block whose parent is `key` is stored (or being stored) here,
  // so that leaving `key` out of this tier would orphan it. The default,
  // true, is the safe answer for a tier that cannot tell (SSD admission
  // then never skips a block above it).
  virtual bool HasStoredChildren(const BlockKey& /*key*/) const { return true; }
  // Whether a Put of `bytes` for `meta` would fail with NoSpace however much
  // this tier evicted (larger than its capacity, or its owner's quota). A
  // write-back stack then writes such a block below before it drops any
  // older copy. The default, false: a tier that cannot tell.
  virtual bool NeverHolds(const BlockMeta& /*meta*/, uint64_t /*bytes*/) const {
    return false;
  }

  virtual TierCounters Totals() const = 0;
  virtual TierCounters OwnerCounters(OwnerId owner) const = 0;

  // Recomputes counters from contents (and, where the tier can, verifies
  // checksums and chain links); appends every disagreement to `findings`.
  // OK when it could run (even with findings), an error when it could not.
  virtual Status Audit(std::vector<AuditFinding>* findings) = 0;

  // Visits every resident block's metadata and charged bytes. The callback must
  // not call back into the tier.
  virtual void ForEach(
      const std::function<void(const BlockMeta&, uint64_t bytes)>& fn) const = 0;

  // Where evicted blocks go (nullptr: dropped, counted as evictions only).
  virtual void SetEvictionListener(EvictionListener* listener) = 0;

  // For a tier that stores blocks evicted dirty from the tier above
  // (write-back): OK, or why such blocks cannot be stored right now (a
  // waiting block's last attempt failed). TierStack then
  // refuses new write-back Puts with this error instead of acknowledging
  // bytes it cannot persist. Other tiers: OK.
  virtual Status WriteBackStatus() const { return Status::OK(); }
};

}  // namespace prefixkv
