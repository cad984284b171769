// RemoteTier: a tier shared by every prefixkv node, below the SSD tier, on a
// RemoteStore (a Redis Cluster in production, remote_store.h).
//
// Blocks are stored under their chain keys, so the same prefix has the same
// remote key on every node; a block is immutable by key, so the nodes need no
// coherence protocol (docs/remote.md). Each value is an envelope around the
// block's payload (the encoded record): magic, format version, key, parent,
// namespace, payload length and an XXH3 checksum over all of it. A value that
// does not check out is a miss (counted as a corruption, and deleted from the
// store), never wrong bytes.
//
// Which blocks reach it (RemoteWriteMode: the lowest local tier's victims or
// every Put) is the wiring's choice: TierStackOptions and the Engine.
// Writes are asynchronous: Put and OnEvict queue the block for background
// writers and return at once. The queue is bounded (blocks and bytes); when
// it is full the block is dropped and counted (backpressure never blocks a
// Store). A write the cluster fails (a master down or out of memory) costs
// that block only, counted in RemoteCounters::write_failures. Reads are synchronous and
// bounded by the store's request timeout: a down or slow store degrades to misses,
// counted and logged once per outage.
//
// Only chain blocks (non-zero namespace) are stored; the key-value space's
// raw values are mutable and stay local. Remove() removes nothing remotely:
// another node may still use the block (it expires by TTL or by the
// cluster's own eviction).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "prefixkv/advanced/remote_store.h"
#include "prefixkv/advanced/tier.h"
#include "prefixkv/clock.h"

namespace prefixkv {
namespace internal {
class RemoteTierImpl;
}

struct RemoteTierOptions {
  // Limits of namespaces without their own (SetNamespaceLimits).
  RemoteNamespaceLimits default_limits;
  // Prefix of every key; nodes sharing a cache must use the same one.
  std::string key_prefix = "prefixkv:b:";
  // Write queue bounds; a block that does not fit is dropped (counted).
  uint32_t queue_blocks = 4096;
  uint64_t queue_bytes = 256ull << 20;
  // Blocks per pipelined write batch, and background writers.
  uint32_t write_batch_blocks = 64;
  uint32_t writer_threads = 1;
  // A local victim (OnEvict) that this node read back intact or wrote within
  // known_present_seconds (at most half its namespace's TTL), and has not
  // read back absent or damaged since, and while no master has failed a call
  // nor a slot moved since (RemoteStore::FailureEpoch), is not written again
  // (RemoteCounters::rewrites_skipped): the cluster holds it. Up to
  // known_keys such keys are remembered (24 bytes each; 0: write every victim).
  uint32_t known_present_seconds = 300;
  uint32_t known_keys = 65536;
  Clock* clock = Clock::System();
  // One line per event worth an operator's attention (outage start and end,
  // first corruption); null: silent.
  std::function<void(std::string_view)> log;
};

// Thread-safe: every method may be called concurrently.
class RemoteTier final : public BlockTier, public EvictionListener {
 public:
  // Over `store` (owned). Never fails because the store is down.
  static std::unique_ptr<RemoteTier> Open(std::unique_ptr<RemoteStore> store,
                                          RemoteTierOptions options = {});
  ~RemoteTier() override;  // stops the writers (queued blocks are dropped)
  RemoteTier(const RemoteTier&) = delete;
  RemoteTier& operator=(const RemoteTier&) = delete;

  const RemoteTierOptions& options() const;
  // "remote: redis cluster 127.0.0.1:7000,... (3 masters)".
  std::string Describe() const;
  void SetNamespaceLimits(const BlockKey& namespace_id, RemoteNamespaceLimits limits);

  // Payloads of `keys` in one pipelined batch, in order; nullopt for a miss.
  std::vector<std::optional<SharedBytes>> GetMany(
      std::span<const BlockKey> keys) override;
  // GetMany without counting hits, misses or corruptions (Engine::ExplainMiss
  // looks, nothing is served).
  std::vector<std::optional<SharedBytes>> PeekMany(std::span<const BlockKey> keys) const;
  // Waits until every block queued before the call is written or dropped,
  // and the damaged values reads found before it are deleted (the writers
  // delete them, not the read: a DEL waits as long as a write may). Work
  // queued meanwhile is not waited for: stores that go on faster than the
  // cluster takes them never let the queue empty.
  void Flush();
  RemoteCounters Counters() const;
  // The store's key of `key`.
  std::string StoreKey(const BlockKey& key) const;

  // BlockTier. Put queues the block (OK; dropped blocks are counted, not
  // errors; a raw value is ignored); Get reads one block; Peek/Contains read
  // the block too (a network round trip); Remove removes nothing (above).
  // Totals/OwnerCounters: hits, misses, inserts (= writes), corruptions,
  // io_errors (= errors); entries and bytes are not known here and stay 0.
  // Audit: nothing to recompute locally (OK, no findings). ForEach: nothing.
  std::string_view name() const override { return "remote"; }
  Status Put(const BlockMeta& meta, SharedBytes payload, bool dirty) override;
  StatusOr<SharedBytes> Get(const BlockKey& key) override;
  StatusOr<BlockMeta> Peek(const BlockKey& key) const override;
  bool Contains(const BlockKey& key) const override;
  Status Remove(const BlockKey& key) override;
  TierCounters Totals() const override;
  TierCounters OwnerCounters(OwnerId owner) const override;
  Status Audit(std::vector<AuditFinding>* findings) override;
  void ForEach(
      const std::function<void(const BlockMeta&, uint64_t bytes)>& fn) const override;
  void SetEvictionListener(EvictionListener* listener) override;
  // A block GetMany counted as a hit whose record the reader refused: a
  // corruption and a miss (not a hit), logged once with the other
  // corruptions, no longer taken as present (a local copy evicted later is
  // written over it) and deleted by the writers.
  void ReportDamaged(const BlockKey& key, uint64_t bytes, std::string_view why) override;

  // EvictionListener: the lowest local tier's victims (write mode on_spill).
  void OnEvict(const BlockMeta& meta, const SharedBytes& payload, bool dirty) override;

  // The envelope (exposed for tests and tools): Encode wraps a payload;
  // Decode checks a value read under `key` and returns its metadata and
  // payload, or Corruption.
  static std::string EncodeEnvelope(const BlockMeta& meta, std::string_view payload);
  struct Decoded {
    BlockMeta meta;
    SharedBytes payload;
  };
  static StatusOr<Decoded> DecodeEnvelope(const BlockKey& key, std::string_view value);
  // The same for a value read from the store: when it is 64-byte aligned the
  // payload is a slice of it (no copy; aligned, as the header is 128 bytes).
  static StatusOr<Decoded> DecodeEnvelope(const BlockKey& key, const SharedBytes& value);

 private:
  // The checks of DecodeEnvelope; the payload is left empty.
  static StatusOr<Decoded> CheckEnvelope(const BlockKey& key, std::string_view value);
  explicit RemoteTier(std::unique_ptr<internal::RemoteTierImpl> impl);
  std::unique_ptr<internal::RemoteTierImpl> impl_;
};

}  // namespace prefixkv
