// MemoryCharge: memory held outside the cache's blocks (a session manager's
// live KV caches) charged to the engine's one RAM budget, so that cached
// blocks and that memory share a single byte limit.
//
//   std::shared_ptr<MemoryCharge> sessions =
//   engine->OpenMemoryCharge("sessions").value(); SessionManagerOptions config{.memory =
//   sessions, ...};   // session.h
//
// A charge is an owner of the budget like a model (Engine::Stats lists it
// under its name, its bytes in `hot.bytes` and `hot.external_bytes`), but its
// bytes are never evicted: to make room for a charge the budget evicts
// unpinned cache blocks (dirty ones are written back to SSD first, so none is
// lost), and when even that is not enough the charge fails and the holder must
// free memory of its own (the session manager evicts its least recently used
// sessions). docs/hot_tier.md, "External charges".
#pragma once

#include <cstdint>
#include <string>

#include "prefixkv/status.h"

namespace prefixkv {

// Thread-safe: every method may be called concurrently.
class MemoryCharge {
 public:
  virtual ~MemoryCharge() = default;

  // Charges `bytes` more, evicting cache blocks to make room when needed.
  // OK once charged. NoSpace when even evicting every evictable block would
  // not make room: nothing changes, and `*shortfall_bytes` (if not null) is
  // set to the bytes still missing after such an eviction, that is how much
  // must be uncharged first; UINT64_MAX when `bytes` alone exceeds
  // limit_bytes(). May block while evicted blocks are handed to the SSD
  // tier's write-back queue (backpressure). REQUIRES: the caller holds no
  // lock that an engine store or an SSD write could need.
  virtual Status Charge(uint64_t bytes, uint64_t* shortfall_bytes) = 0;
  // Returns `bytes` of this handle's charges. Never blocks or evicts.
  // InvalidArgument, changing nothing, for more than charged_bytes().
  virtual Status Uncharge(uint64_t bytes) = 0;

  // What this handle holds now.
  virtual uint64_t charged_bytes() const = 0;
  // The most this owner may ever be charged: the budget's capacity, or its
  // quota when smaller. Blocks and other owners' charges may leave less.
  virtual uint64_t limit_bytes() const = 0;
  // The owner's name in the budget (EngineStats::owners).
  virtual const std::string& name() const = 0;
};

}  // namespace prefixkv
