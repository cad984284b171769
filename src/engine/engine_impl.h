// internal::EngineImpl: the tiers one Engine owns and how they are wired.
//
//   SharedHotBudget (one): an owner per model (+ "values"); one budget-wide
//     HotTier view (the stack's) and a read-only view per owner (stats,
//     EngineHotTier in engine_internals.h)
//   SsdTier (one, optional), RemoteTier (one, optional)
//   TierStack (one): the only road between the tiers and their only
//     eviction listener; each block names its owner
//   PrefixCache: one namespace per model, all on the one stack
//   MemoryCharge handles: budget owners without blocks (engine_memory.cc)
//
// Models are append-only (a registered model lives until Close), so the
// pointers handed out stay valid; `mu_` guards the table and the lazily
// created key-value space.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "event_log.h"
#include "prefixkv/advanced/capacity_advisor.h"
#include "prefixkv/advanced/engine_internals.h"
#include "prefixkv/advanced/hot_tier.h"
#include "prefixkv/advanced/kv_event_sink.h"
#include "prefixkv/advanced/mutex.h"
#include "prefixkv/advanced/prefix_cache.h"
#include "prefixkv/advanced/remote_tier.h"
#include "prefixkv/advanced/shared_hot_budget.h"
#include "prefixkv/advanced/ssd_tier.h"
#include "prefixkv/advanced/tier_stack.h"
#include "prefixkv/engine.h"
#include "prefixkv/prefix_token_fields.h"
#include "value_catalog.h"
#include "wear_meter.h"

namespace prefixkv {

// The key-value space's owner of the hot budget, registered with its first
// value: no model or memory charge may take the name before (its owner
// could not be registered then, and every value call failed).
inline constexpr std::string_view kValuesOwnerName = "values";

// One owner of the hot budget (its blocks live in the one stack).
struct EngineOwner {
  std::string name;
  OwnerId owner = 0;
  std::unique_ptr<HotTier> hot;  // its own view, to read; null without a hot tier
};

// PrefixTokenCounters: Add and Snapshot may run on many threads. One Add
// (a Match's query and hit tokens, a restore's tokens by tier) is copied by
// a Snapshot whole or not at all: they were atomics added and read one at a
// time, so a scrape between a Match's two additions showed its hit tokens
// without its query tokens, a hit ratio above 1
// (PrefixTokenRecorder.ACopyHoldsEachAdditionWholeOrNotAtAll).
class PrefixTokenRecorder {
 public:
  void Add(const PrefixTokenCounters& delta) EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    for (const PrefixTokenField& f : kPrefixTokenFields)
      counts_.*f.field += delta.*f.field;
  }
  PrefixTokenCounters Snapshot() const EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return counts_;
  }

 private:
  mutable Mutex mu_;
  PrefixTokenCounters counts_ GUARDED_BY(mu_);
};

// A registered model.
// Where a namespace's blocks live (EngineImpl::ChooseRoot).
struct RootChoice {
  BlockKey root;  // the chain root of the namespace's keys
  // Written before its layer shapes were keyed: `root` is the root of the
  // spec without shapes, and the namespace stays out of the remote tier
  // (whose keys other nodes' legacy namespaces of other shapes share).
  bool shapes_recorded_later = false;
  bool record_shapes = false;  // adopted now: the manifest must record the shapes
};

struct EngineModel {
  std::string fingerprint;
  ModelOptions options;
  Namespace ns;
  EngineOwner tiers;
  LatencyRecorder restore_latency;  // Engine::Restore's, this model's
  PrefixTokenRecorder prefix_tokens;
};

class internal::EngineImpl {
 public:
  EngineImpl(const EngineOptions& options, EngineHooks hooks)
      : options_(options), hooks_(std::move(hooks)) {}

  // Opens the budget, the SSD tier and the remote tier (Engine::Open).
  Status OpenTiers();
  Status OpenRemote();
  // The memory resource and its region callbacks (memory_).
  void OpenMemory();
  // The SSD tier's admission, wear meter and rated endurance.
  Status OpenWear();

  // The one stack over the tiers (OpenTiers, once they are open).
  Status OpenStack();
  // An owner of the budget with its own view (RegisterModel, the key-value
  // space). REQUIRES: mu_ held.
  // `advisor_block_tokens`: the tokens of one of the owner's blocks, for the
  // capacity advisor (0: the advisor does not see this owner's blocks).
  // `namespace_id`: the namespace whose blocks it writes (a model's root;
  // zero for the key-value space), by which the SSD tier names it
  // (NameOnSsd).
  StatusOr<EngineOwner> NewOwner(const std::string& name,
                                 std::optional<uint64_t> quota_bytes,
                                 uint32_t advisor_block_tokens,
                                 const BlockKey& namespace_id) REQUIRES(mu_);
  // Names budget owner `owner` on the SSD tier (SsdTier::BindOwner) by what
  // stays the same across runs, so its SSD blocks and counters stay its own
  // whatever id a run gives it: a model by its namespace root (its display
  // name depends on the registration order), the key-value space and a
  // memory charge by name. `namespace_id`: the namespace of its blocks (none
  // for a charge). A failed write of the name is logged: the owner is named
  // for this run all the same.
  void NameOnSsd(OwnerId owner, const std::string& ssd_name,
                 std::optional<BlockKey> namespace_id) REQUIRES(mu_);
  // engine_manifest.cc: where the blocks of `spec` (whose fingerprint is
  // `fingerprint`) live in this data directory (docs/format.md §5 "Shapes
  // recorded later"). Reads the SSD tier's manifests; changes nothing.
  StatusOr<RootChoice> ChooseRoot(const NamespaceSpec& spec,
                                  const std::string& fingerprint) const;
  // `choice`, unless it adopts a root that a model registered in this run
  // already holds for another spec (the spec without shapes, whose handle stores any
  // shapes there unchecked, with a tip lineage of its own): then the spec's own root
  // (`fingerprint`'s), a cold start, as the spec without shapes is refused
  // once the shaped one adopted the root. REQUIRES: mu_ held.
  RootChoice UnlessHeldInThisRun(const RootChoice& choice,
                                 const std::string& fingerprint) const REQUIRES(mu_);
  // With an SSD tier, stores the manifest of `spec` at `choice.root` unless
  // one is stored (records the shapes of an adopted namespace); Corruption
  // when the stored one has another fingerprint. REQUIRES: mu_ held
  // (registration).
  Status StoreManifest(const NamespaceSpec& spec, const std::string& fingerprint,
                       const RootChoice& choice) REQUIRES(mu_);
  // Keeps every namespace the SSD tier's manifests record as adopted out of
  // the remote tier (TierStack::KeepLocal) from the open on, before its model
  // is registered again (OpenStack).
  Status KeepAdoptedNamespacesLocal();
  // The model of a namespace handle, or null.
  EngineModel* Find(Namespace ns) const EXCLUDES(mu_);
  // The stack, once the key-value space's owner is registered (on first use,
  // under mu_; later calls read it without a lock).
  StatusOr<TierStack*> Values() EXCLUDES(mu_);
  // A read of the key-value space: its owner's, never the remote tier's (it
  // holds no raw value). REQUIRES: Values() succeeded.
  TierRead ValueRead(bool promote = true) const {
    return TierRead{.owner = values_owner_.load(std::memory_order_acquire),
                    .promote = promote,
                    .remote = false};
  }
  // The key-value space's keys in RAM, once the SSD write-back queue is empty
  // (so every other one is stored on SSD).
  StatusOr<std::vector<BlockKey>> ValueKeysInRam() EXCLUDES(mu_);
  // Drops every older-scheme value copy a sound value record on SSD shadows
  // (Engine::Open, engine_values.cc).
  void DropShadowedLegacyValues();

  // Opens the event log (after the tiers), emits the hot tier's kCleared and
  // reconciles the SSD key set (engine_events.cc).
  Status OpenEvents(FileSystem* fs);
  void ReconcileSsdEvents();
  // Before a change is acknowledged, with write_through or kSync: the events
  // so far are written (they survive a kill -9), with kSync also synced.
  void SyncEvents();
  // Checkpoints and closes the log's files (Engine::Close, after the SSD tier).
  void CloseEvents();

  Status CheckOpen() const {
    return closed_.load(std::memory_order_acquire)
               ? Status::InvalidArgument("engine is closed")
               : Status::OK();
  }

  const EngineOptions options_;
  const EngineHooks hooks_;  // in-tree tools' and tests' adjustments
  Clock* const clock_ = options_.clock != nullptr ? options_.clock : Clock::System();

  // The one sink of every tier's KV events (engine_events.cc): stamps them,
  // numbers them in the event log and hands them to options_.on_kv_event.
  // Quick; runs under a tier's lock; never calls into the tiers. Declared
  // before the tiers: it outlives them.
  class EventSink final : public KvEventSink {
   public:
    explicit EventSink(EngineImpl* impl) : impl_(impl) {}
    void Emit(KvEvent& event) override { impl_->EmitKvEvent(event); }

   private:
    EngineImpl* const impl_;
  };
  void EmitKvEvent(KvEvent& event);
  // The sink the tiers report to; null when nobody consumes events (no log,
  // no callback).
  KvEventSink* kv_events() {
    return options_.on_kv_event || options_.event_log ? &kv_event_sink_ : nullptr;
  }
  EventSink kv_event_sink_{this};
  // Sees the models' stacks (declared before them: it outlives them); made
  // by OpenTiers, null when options_.advisor_max_keys is 0.
  std::unique_ptr<CapacityAdvisor> advisor_;
  // The memory of hot blocks, encoded records and restore plans
  // (EngineOptions::memory_resource, or the default arena); never null once
  // open.
  std::shared_ptr<MemoryResource> memory_;
  std::shared_ptr<SharedHotBudget> budget_;  // null without a hot tier
  // Declared before ssd_ so it is destroyed after it: it is the SSD tier's
  // eviction listener (write mode on_spill).
  std::unique_ptr<RemoteTier> remote_;  // null without options_.remote
  std::unique_ptr<SsdTier> ssd_;        // null without data_dir
  // With an SSD tier: every stack's admission, and the write-rate meter.
  std::unique_ptr<SsdAdmission> admission_;
  std::unique_ptr<internal::WearMeter> wear_;
  uint64_t endurance_bytes_ = 0;
  // The budget-wide view the stack writes through (null without a hot
  // tier), and the one stack; declared after the tiers, destroyed first.
  std::unique_ptr<HotTier> hot_;
  std::unique_ptr<TierStack> stack_;
  std::unique_ptr<PrefixCache> cache_;
  std::atomic<bool> closed_{false};
  // The event log (null with options_.event_log off); EmitKvEvent uses it
  // once events_ready_ is set.
  std::unique_ptr<internal::EventLog> events_;
  std::atomic<bool> events_ready_{false};

  // Guards the tables below. Taken before the prefix cache's and the
  // budget's locks (RegisterModel calls into both while holding it).
  mutable Mutex mu_;
  std::vector<std::unique_ptr<EngineModel>> models_ GUARDED_BY(mu_);
  std::unique_ptr<EngineOwner> values_ GUARDED_BY(mu_);
  // stack_ once the key-value space's owner (values_owner_) is registered;
  // what every GET/SET reads, without mu_.
  std::atomic<TierStack*> values_stack_{nullptr};
  std::atomic<OwnerId> values_owner_{0};
  // The key-value space's names and expiries (engine_values.cc), and the
  // striped locks that make a read-modify-write of one key (SET NX, EXPIRE,
  // removing an expired value) atomic against the other writers of that key.
  internal::ValueCatalog value_catalog_;
  std::array<Mutex, 64> value_locks_;
  // Whether the open drops shadowed older-scheme values (OpenTiers: not in
  // the tools' read-only or report-only opens).
  bool drop_shadowed_legacy_ = false;
  // Whether a tier may hold older-scheme value bytes (LegacyValueKey): set by
  // the open (DropShadowedLegacyValues) when the SSD tier holds a value its
  // sweep did not read as a record. Nothing writes that scheme any more, and
  // only that tier's copies reach RAM, so a run opened without one never has
  // one: GET and a plain SET then skip the look for them.
  std::atomic<bool> legacy_values_possible_{false};
  // Memory charges' owners by name (OpenMemoryCharge).
  std::vector<std::pair<std::string, OwnerId>> charges_ GUARDED_BY(mu_);
};

namespace internal {
// Records one restore of `ns` that began at `start_nanos` in its model's
// latency and, when it succeeded (`result` not null), its restored tokens.
void RecordRestore(EngineImpl& impl, Namespace ns, uint64_t start_nanos,
                   const RestoreResult* result);
}  // namespace internal

}  // namespace prefixkv
