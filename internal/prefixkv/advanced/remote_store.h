// RemoteStore: the key-value service under the remote tier (remote_tier.h),
// seen as batched GET / SET / DEL of opaque byte strings. The production
// implementation is a Redis Cluster client (OpenRedisClusterStore, below, on
// Debian's hiredis); tests substitute an in-memory store with injected faults.
//
// Every call is bounded in time: a node that does not answer within the
// request timeout fails that call (or that node's share of a batch) with
// Unavailable / IOError, and the caller treats it as a miss. No call throws.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "prefixkv/bytes.h"
#include "prefixkv/status.h"

namespace prefixkv {

struct RemoteWrite {
  std::string key;
  std::string value;
  uint32_t ttl_seconds = 0;  // 0: no expiry
};

// One write's outcome (RemoteStore::MultiSetEach).
struct RemoteWriteResult {
  Status status;  // OK: stored
  // Failed after the write was sent, its reply lost: the store may hold it
  // (a caller must not take it for absent, e.g. give back its quota). False
  // for a write never sent or refused by an error reply: the key is as it was.
  bool maybe_stored = false;
};

// A counter after an add (RemoteStore::IncrByWindow).
struct CounterWindow {
  int64_t total = 0;
  // Milliseconds left before the counter expires, read after the add (so
  // the end of the window it counts); -1: it has no expiry, or the store
  // could not tell.
  int64_t ttl_ms = -1;
};

// Thread-safe: every method may be called concurrently.
class RemoteStore {
 public:
  virtual ~RemoteStore() = default;

  // Values of `keys`, in order, pipelined (one round trip per node that owns
  // some of the keys). `values` is resized to keys.size(); an absent key is
  // nullopt. When some node failed, its keys are nullopt and the first error
  // is returned (the other keys' values are still filled in). Values are
  // 64-byte aligned buffers (the remote tier hands blocks on without a copy).
  // A key that holds another type than a string (another client's list) is
  // an empty value: not one a caller wrote, as its check finds, and no error.
  virtual Status MultiGet(std::span<const std::string> keys,
                          std::vector<std::optional<SharedBytes>>* values) = 0;
  // MultiGet, calling `arrived(i, value)` for each value found, on the
  // calling thread, as soon as it is in: the caller's work on one value (a
  // checksum pass) then overlaps the transfer of the next. By default, after
  // MultiGet returns. `failed` (may be null) is resized to keys.size(): true
  // for a key whose read failed (its node down or silent, an error reply),
  // whose value is not known; false for a key read, found or absent. A caller
  // then knows an absent key from a failed one when another node failed the
  // call. By default every key has the call's outcome (a store that cannot
  // tell them apart).
  using ValueArrived = std::function<void(size_t index, const SharedBytes& value)>;
  virtual Status MultiGetEach(std::span<const std::string> keys,
                              std::vector<std::optional<SharedBytes>>* values,
                              const ValueArrived& arrived, std::vector<bool>* failed) {
    Status s = MultiGet(keys, values);
    for (size_t i = 0; i < values->size(); ++i) {
      if ((*values)[i].has_value()) arrived(i, *(*values)[i]);
    }
    if (failed != nullptr) failed->assign(keys.size(), !s.ok());
    return s;
  }
  // Stores every write, pipelined. The first error, if any (the other writes
  // are still attempted).
  virtual Status MultiSet(std::span<const RemoteWrite> writes) = 0;
  // MultiSet, with each write's own outcome in `results` (resized to
  // writes.size()): a master down or out of memory fails its writes only, and
  // the caller counts exactly those. A failed write leaves the key as it was,
  // unless its result says maybe_stored: sent, and its reply lost (no reply
  // by the timeout, the connection closed first), the SET may have run and
  // the key hold the whole value. By default every write gets MultiSet's
  // status, maybe stored when it failed (a store that cannot tell them apart).
  virtual Status MultiSetEach(std::span<const RemoteWrite> writes,
                              std::vector<RemoteWriteResult>* results) {
    Status s = MultiSet(writes);
    results->assign(writes.size(), RemoteWriteResult{s, !s.ok()});
    return s;
  }
  // Deletes the keys (absent keys are not an error).
  virtual Status Delete(std::span<const std::string> keys) = 0;
  // Adds `delta` to the integer at `key` (created at 0) and returns the new
  // value; when ttl_seconds > 0 and the key has no expiry (created by this
  // call, or by one that failed before giving it one), it expires after
  // ttl_seconds. An existing expiry is left as it is. Once the add ran, its
  // value is returned even if the expiry could not be set then: the next
  // call with a TTL sets it (an error would hide an add that was made).
  virtual StatusOr<int64_t> IncrBy(std::string_view key, int64_t delta,
                                   uint32_t ttl_seconds) = 0;
  // IncrBy, and the time the counter has left after it. When
  // expire_within_ms > 0, its expiry is first brought down to at most that
  // far away (one further off, or none, is shortened; a nearer one is kept).
  // The remote tier finds so a quota counter the cluster lost (evicted,
  // flushed, a master restarted empty) inside a window it saw, and puts it
  // back with that window's end. By default: IncrBy, the time left not
  // known (-1), no expiry brought down.
  virtual StatusOr<CounterWindow> IncrByWindow(std::string_view key, int64_t delta,
                                               uint32_t ttl_seconds,
                                               uint64_t expire_within_ms) {
    (void)expire_within_ms;
    StatusOr<int64_t> total = IncrBy(key, delta, ttl_seconds);
    if (!total.ok()) return total.status();
    return CounterWindow{*total, -1};
  }
  // One line for logs and INFO, e.g. "redis cluster 127.0.0.1:7000 (3 masters)".
  virtual std::string Describe() const = 0;
  // Changes whenever a node may have lost values it held: a node that
  // failed a call (down, silent, its connection closed) or closed a pooled
  // connection (restarted between two calls) may come back empty
  // (restarted without persistence) or be replaced by a replica behind it,
  // and a slot found served by another node (-MOVED) may have been failed
  // over so. What a caller saw stored under an older value may be gone. 0
  // by default (a store that loses values only by expiry or eviction).
  virtual uint64_t FailureEpoch() const { return 0; }
};

struct RedisClusterOptions {
  // Seed nodes ("host:port"); any one reachable master or replica is enough
  // to learn the slot map (CLUSTER SLOTS). A single node with cluster mode
  // off is also accepted and then owns every slot.
  std::vector<std::string> seeds;
  // How long a node may stay silent within a request batch: sending and
  // reading fail when no byte moves for this long (each byte that moves
  // extends the wait), so a dead or hung node costs this much, while a batch
  // of megabytes of blocks is not cut off while it flows.
  uint32_t request_timeout_ms = 5;
  // The same for writes (SET, DEL, INCRBY), which the remote tier sends from
  // background writers: a node ingesting megabytes of values may pause
  // longer than a read may wait, and nothing waits for a write.
  uint32_t write_timeout_ms = 1000;
  // Bound of a connection attempt.
  uint32_t connect_timeout_ms = 50;
  // Idle connections kept per node (more are opened under concurrency and
  // closed when returned beyond this number).
  uint32_t pool_per_node = 4;
  // After a node failed, it is not contacted again for this long (its keys
  // are misses at once) so a dead node costs one timeout, not one per call.
  uint32_t down_backoff_ms = 1000;
  // AUTH password, empty for none.
  std::string password;
};

// Parses "redis://host:port[,host:port...]" (the scheme is optional) into
// seeds. InvalidArgument names the bad part.
StatusOr<std::vector<std::string>> ParseRedisSeeds(std::string_view uri);

// The Redis Cluster key slot of `key`: CRC16 (XMODEM) of the key, or of its
// {hash tag} when it has a non-empty one, modulo 16384.
uint16_t RedisKeySlot(std::string_view key);

// A Redis Cluster client: slot map from CLUSTER SLOTS (refreshed on MOVED and
// after a node failure), MOVED/ASK redirects followed, a connection pool per
// node, pipelined batches. Opening does not need the cluster to be up: when
// no seed answers, the store starts without a slot map, every call fails
// fast with Unavailable, and the map is fetched again after down_backoff_ms.
StatusOr<std::unique_ptr<RemoteStore>> OpenRedisClusterStore(
    const RedisClusterOptions& options);

}  // namespace prefixkv
