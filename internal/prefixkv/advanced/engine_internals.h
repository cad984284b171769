// The Engine's insides, for in-tree tools and tests only (not installed; no
// public header includes this one): the pieces the engine wires, and the
// hooks that adjust them at open. An embedder uses engine.h alone; what it
// needs of the tiers is in Stats(), Audit() and the events.
//
// The accessors are valid until the engine's Close(). They hand out objects
// the engine keeps using: a caller changing them (e.g. removing an SSD block)
// is a test or an operator tool that knows it does so.
#pragma once

#include <functional>
#include <memory>

#include "prefixkv/engine.h"

namespace prefixkv {

class PrefixCache;
class SharedHotBudget;
class SsdTier;
class TierStack;
class HotTier;
class RemoteStore;
class RemoteTier;
struct SsdTierOptions;
struct RemoteTierOptions;

// What Engine::Open cannot say in EngineOptions because it names internal
// types. Each is applied at open, after EngineOptions.
struct EngineHooks {
  // Adjusts the SSD tier's options (writer threads, segment size, write
  // buffer, direct I/O; ssd_tier.h).
  std::function<void(SsdTierOptions& options)> configure_ssd;
  // Adjusts the remote tier's options (queue bounds, writers, key prefix;
  // remote_tier.h).
  std::function<void(RemoteTierOptions& options)> configure_remote;
  // The store under the remote tier instead of a Redis Cluster client (then
  // EngineOptions::remote is only its name in Stats).
  std::function<std::unique_ptr<RemoteStore>()> remote_store_factory;
  // Called by Engine::RestorePinned after its restore read the blocks and
  // before it pins them (tests: a concurrent store's window).
  std::function<void()> before_restore_pins;
  // Called by Engine::CountValues after its walk of the SSD tier, before it
  // counts the keys its RAM walk found (tests: an eviction's window).
  std::function<void()> after_count_values_ssd_walk;
};

// Engine::Open(options) with `hooks` applied.
StatusOr<std::unique_ptr<Engine>> OpenEngine(const EngineOptions& options,
                                             EngineHooks hooks);

PrefixCache& EnginePrefixCache(Engine& engine);
SharedHotBudget* EngineHotBudget(Engine& engine);  // null without a hot tier
SsdTier* EngineSsdTier(Engine& engine);            // null without data_dir
RemoteTier* EngineRemoteTier(Engine& engine);      // null without a remote tier
// The engine's one tier stack; null for a namespace it does not know.
TierStack* EngineTiers(Engine& engine, Namespace ns);
// The model's view of the hot budget (charged to its owner); null as above
// or without a hot tier.
HotTier* EngineHotTier(Engine& engine, Namespace ns);

}  // namespace prefixkv
