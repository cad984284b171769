// RedisClusterStore: the RemoteStore on a Redis Cluster (or on one Redis node
// with cluster mode off), behind OpenRedisClusterStore (remote_store.h).
//
// Routing: a slot map (16384 slots -> master) from CLUSTER SLOTS. A call
// groups its keys by master, pipelines one command per key to each master
// (all masters written first, then all read, against ONE deadline of
// request_timeout_ms; a read of large values keeps only kReadWindowBytes of
// replies in flight per master and sends the next GET as each reply
// arrives), and follows -MOVED (the slot is re-pointed at once and
// the whole map fetched again at the start of the next call) and -ASK (ASKING
// then the command on the target, map unchanged), at most kMaxRedirects times
// per key.
//
// Failures: a node that cannot be connected, times out or closes the
// connection in a call is marked down for down_backoff_ms (one that closed a
// pooled connection while it sat idle is not: a fresh one is used); its keys
// fail at once with Unavailable during that time (no connect attempt), and
// the map is fetched again. Without a map (no seed answered) every call is Unavailable at once
// and the map is tried again every down_backoff_ms. A failure costs only the
// keys it touched (MultiSetEach reports each write's): an error reply fails
// its key, a failed node its unanswered keys.
//
// Locking: mu_ guards the map and the node table; each node's mutex guards
// its idle connections and its down deadline. No lock is held during network
// I/O, and mu_ and a node's mutex are never held together.
//
// Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "prefixkv/advanced/mutex.h"
#include "prefixkv/advanced/remote_store.h"
#include "prefixkv/clock.h"
#include "redis_cluster_protocol.h"
#include "redis_connection.h"

namespace prefixkv {

class RedisClusterStore final : public RemoteStore {
 public:
  // Redirections followed per key before the key fails with IOError.
  static constexpr int kMaxRedirects = 3;
  // Replies of a read (GET) kept in flight per node, in bytes: once a node's
  // value size is known (its last GET reply), a batch sends it at most
  // max(2, kReadWindowBytes / value size) GETs ahead of the replies read,
  // and one more as each reply arrives, so the node never waits for the
  // next. A master then builds two 256 KiB replies at a time, in the buffers
  // (warm in its caches) of the replies it just sent, where a whole batch
  // would make it allocate, and page-fault, megabytes of reply buffers
  // first (docs/remote.md, "Reads"). Small values all go at once.
  static constexpr uint64_t kReadWindowBytes = 512 << 10;

  // `clock` times the down backoff and the map retry (socket deadlines are
  // real time). REQUIRES: options checked by OpenRedisClusterStore.
  RedisClusterStore(RedisClusterOptions options, std::vector<RedisAddress> seeds,
                    const Clock* clock);
  ~RedisClusterStore() override;

  Status MultiGet(std::span<const std::string> keys,
                  std::vector<std::optional<SharedBytes>>* values) override;
  // Each value is handed to `arrived` as its reply is read, while the other
  // masters' replies are still streaming in. A key fails only when its own
  // master failed it (down, silent, an error reply).
  Status MultiGetEach(std::span<const std::string> keys,
                      std::vector<std::optional<SharedBytes>>* values,
                      const ValueArrived& arrived, std::vector<bool>* failed) override;
  Status MultiSet(std::span<const RemoteWrite> writes) override;
  // A write fails only when its own master failed it (down, silent, -OOM).
  // A write sent whose reply never came (timeout, connection closed) is
  // maybe_stored: the master may have run it.
  Status MultiSetEach(std::span<const RemoteWrite> writes,
                      std::vector<RemoteWriteResult>* results) override;
  Status Delete(std::span<const std::string> keys) override;
  StatusOr<int64_t> IncrBy(std::string_view key, int64_t delta,
                           uint32_t ttl_seconds) override;
  // INCRBY, then in one more round EXPIRE NX, PEXPIRE LT and PTTL.
  StatusOr<CounterWindow> IncrByWindow(std::string_view key, int64_t delta,
                                       uint32_t ttl_seconds,
                                       uint64_t expire_within_ms) override;
  std::string Describe() const override;
  // Moves on each time a node is marked down (MarkDown), each time a pooled
  // connection is found closed by its node (restarted since: Acquire) and
  // at each -MOVED (a slot served by another master: failed over, or
  // migrated).
  uint64_t FailureEpoch() const override {
    return failure_epoch_.load(std::memory_order_acquire);
  }

  // Fetches the slot map when it is missing or stale and the retry time has
  // come (every call does this first).
  void MaybeRefreshMap() EXCLUDES(mu_);

  // For tests: the master the map routes `slot` to ("" without a map), how
  // many maps were fetched, whether `node` ("host:port") is marked down.
  std::string NodeOfSlot(uint16_t slot) const EXCLUDES(mu_);
  uint64_t map_fetches() const EXCLUDES(mu_);
  bool IsNodeDown(const std::string& node) const EXCLUDES(mu_);
  // For tests: the most commands one batch had sent and not yet seen
  // answered (with ASKING, an item's pair counts once), over this store's life.
  uint64_t max_in_flight() const {
    return max_in_flight_.load(std::memory_order_relaxed);
  }

 private:
  struct Node;
  struct Item;
  struct Batch;
  struct Outcome;
  // One command per key: queue it on a connection; take a (non-redirect) reply.
  struct KeyOp {
    std::function<void(RedisConnection&, size_t index)> append;
    std::function<Status(size_t index, redisReply& reply)> accept;  // may take its bytes
    // How long a node may stay silent: request_timeout_ms for reads (the
    // request path), write_timeout_ms for writes (background writers).
    bool write = false;
    // Replies are values (GET): sent within kReadWindowBytes per node.
    bool windowed = false;
    // -WRONGTYPE goes to `accept` as a reply, not as an error Status: a key
    // of another type is a value that is not ours (GET), not a failure.
    bool accepts_wrong_type = false;
  };

  // Runs `op` on every key; the first failure, and each key's own in
  // `results` (keys.size() entries) unless it is null.
  Status Execute(const std::vector<std::string_view>& keys, const KeyOp& op,
                 std::vector<RemoteWriteResult>* results) EXCLUDES(mu_);
  // Sends one round of `items` (grouped by node), collects the redirected
  // ones into `next` and fails the others that failed in `outcome`.
  void RunRound(const std::vector<Item>& items, const KeyOp& op, std::vector<Item>* next,
                Outcome* outcome) EXCLUDES(mu_);
  // Reads every batch's replies; a batch whose node fails or stays silent
  // past its deadline ends there (its unanswered keys fail, those sent
  // maybe done).
  void ReadReplies(std::vector<Batch>& batches, uint64_t deadline, const KeyOp& op,
                   std::vector<Item>* next, Outcome* outcome) EXCLUDES(mu_);
  // How many of a batch's `items` to `node` to send before reading: all of
  // them, or the read window's worth of the node's values.
  size_t Window(const Node& node, const KeyOp& op, size_t items) const;
  // Remembers the size of a GET value `node` sent (what Window counts in).
  static void NoteValueBytes(Node& node, size_t bytes);
  // Queues the commands of `batch`'s next `count` unsent items (fewer at its
  // end) and records the batch's commands in flight.
  void QueueNext(Batch& batch, const KeyOp& op, size_t count, size_t answered);
  // INCRBY `key`, then (one more round) its expiry when ttl_seconds > 0, it
  // brought down to expire_within_ms when > 0, and its PTTL when read_ttl.
  StatusOr<CounterWindow> AddToCounter(std::string_view key, int64_t delta,
                                       uint32_t ttl_seconds, uint64_t expire_within_ms,
                                       bool read_ttl);
  // SET of every write (MultiSet, MultiSetEach).
  Status Set(std::span<const RemoteWrite> writes,
             std::vector<RemoteWriteResult>* results);
  // One item's reply: follows a redirect, or hands it to `op`.
  Status Accept(redisReply& reply, const Item& item, const RedisConnection& connection,
                const KeyOp& op, std::vector<Item>* next) EXCLUDES(mu_);
  void FollowRedirect(const RedisRedirect& redirect, Item item, std::vector<Item>* next)
      EXCLUDES(mu_);

  StatusOr<std::unique_ptr<RedisConnection>> Acquire(Node& node) EXCLUDES(mu_);
  void Release(Node& node, std::unique_ptr<RedisConnection> connection);
  void MarkDown(Node& node) EXCLUDES(mu_);
  // Unavailable while `node` is marked down, else OK.
  Status DownStatus(Node& node) const;

  // One CLUSTER SLOTS round trip to `node`; the slot map it describes.
  struct Map {
    std::vector<Node*> slots;  // kRedisSlots entries, nullptr: no master
    bool standalone = false;
  };
  StatusOr<Map> FetchMap(Node& node) EXCLUDES(mu_);
  Node* NodeFor(const RedisAddress& address) REQUIRES(mu_);

  const RedisClusterOptions options_;
  const Clock* const clock_;
  std::string seeds_text_;  // "h:p,h:p" for Describe()

  mutable Mutex mu_;
  std::map<std::string, std::unique_ptr<Node>> nodes_ GUARDED_BY(mu_);  // never erased
  std::vector<Node*> seeds_ GUARDED_BY(mu_);
  std::vector<Node*> slots_ GUARDED_BY(mu_);  // kRedisSlots entries, or empty: no map
  bool refresh_wanted_ GUARDED_BY(mu_) = true;
  bool refreshing_ GUARDED_BY(mu_) = false;
  uint64_t next_refresh_nanos_ GUARDED_BY(mu_) = 0;  // clock_ time
  uint64_t map_fetches_ GUARDED_BY(mu_) = 0;
  size_t masters_ GUARDED_BY(mu_) = 0;
  bool standalone_ GUARDED_BY(mu_) = false;  // a node with cluster mode off
  std::atomic<uint64_t> max_in_flight_{0};
  std::atomic<uint64_t> failure_epoch_{0};  // nodes marked down so far
};

// OpenRedisClusterStore with the clock that times down backoffs.
StatusOr<std::unique_ptr<RedisClusterStore>> OpenRedisClusterStoreWithClock(
    const RedisClusterOptions& options, const Clock* clock);

}  // namespace prefixkv
