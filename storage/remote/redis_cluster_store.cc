// RedisClusterStore's calls: every batch is routed by slot, pipelined per
// master under one deadline, and redirected (redis_cluster_store.h). The slot
// map, the node table and the connection pools are in redis_cluster_nodes.cc.
#include "redis_cluster_store.h"

#include <hiredis/hiredis.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <ctime>
#include <utility>

namespace prefixkv {

struct RedisClusterStore::Item {
  size_t index = 0;  // into the call's keys
  std::string_view key;
  int slot = 0;
  Node* ask = nullptr;  // set after -ASK: this command goes there, after ASKING
  int redirects = 0;
};

// The items of one round that go to one node (with or without ASKING).
struct RedisClusterStore::Batch {
  Node* node = nullptr;
  bool asking = false;
  std::vector<Item> items;
  std::unique_ptr<RedisConnection> connection;
  size_t sent = 0;  // items whose command is queued (a prefix of items)
};

// A call's outcome: its first failure, and each key's own when the caller
// asked for them. Only the keys that failed are failed: a master down or out
// of memory costs its own keys, never the others of the call. A key whose
// command was sent and whose reply never came is `maybe_done`: the master
// may have run it (a SET stored), which its caller must not take for undone.
struct RedisClusterStore::Outcome {
  Status first;
  std::vector<RemoteWriteResult>* each = nullptr;  // one per key of the call, or null

  void Fail(size_t index, const Status& status, bool maybe_done = false) {
    if (first.ok()) first = status;
    if (each != nullptr) (*each)[index] = RemoteWriteResult{status, maybe_done};
  }
  void FailAll(std::span<const Item> items, const Status& status,
               bool maybe_done = false) {
    for (const Item& item : items) Fail(item.index, status, maybe_done);
  }
};

namespace {

bool IsWrongType(const redisReply& reply) {
  return reply.type == REDIS_REPLY_ERROR && reply.str != nullptr &&
         std::string_view(reply.str, reply.len).starts_with("WRONGTYPE");
}

Status ExpectInteger(const redisReply& reply, std::string_view command) {
  if (reply.type == REDIS_REPLY_INTEGER) return Status::OK();
  return Status::IOError("redis: unexpected reply to " + std::string(command));
}

}  // namespace

Status RedisClusterStore::Execute(const std::vector<std::string_view>& keys,
                                  const KeyOp& op,
                                  std::vector<RemoteWriteResult>* results) {
  MaybeRefreshMap();
  if (results != nullptr) results->assign(keys.size(), RemoteWriteResult{});
  Outcome outcome{Status::OK(), results};
  std::vector<Item> items(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    items[i].index = i;
    items[i].key = keys[i];
    items[i].slot = RedisKeySlot(keys[i]);
  }
  while (!items.empty()) {
    std::vector<Item> next;
    RunRound(items, op, &next, &outcome);
    items.clear();
    for (Item& item : next) {
      if (item.redirects > kMaxRedirects) {
        outcome.Fail(item.index,
                     Status::IOError("redis: key redirected more than " +
                                     std::to_string(kMaxRedirects) + " times"));
      } else {
        items.push_back(std::move(item));
      }
    }
  }
  return outcome.first;
}

void RedisClusterStore::RunRound(const std::vector<Item>& items, const KeyOp& op,
                                 std::vector<Item>* next, Outcome* outcome) {
  std::vector<Batch> batches;
  std::vector<Item> unrouted;
  {
    MutexLock lock(&mu_);
    for (const Item& item : items) {
      Node* node = item.ask != nullptr ? item.ask
                   : slots_.empty()    ? nullptr
                                       : slots_[item.slot];
      if (node == nullptr) {
        unrouted.push_back(item);
        continue;
      }
      const bool asking = item.ask != nullptr;
      auto it = std::find_if(batches.begin(), batches.end(), [&](const Batch& b) {
        return b.node == node && b.asking == asking;
      });
      if (it == batches.end()) it = batches.insert(batches.end(), Batch{node, asking});
      it->items.push_back(item);
    }
  }
  if (!unrouted.empty()) {
    outcome->FailAll(unrouted,
                     Status::Unavailable("redis cluster " + seeds_text_ + ": " +
                                         std::to_string(unrouted.size()) +
                                         " key(s) without a master (no slot map)"));
  }
  for (Batch& batch : batches) {
    StatusOr<std::unique_ptr<RedisConnection>> connection = Acquire(*batch.node);
    if (connection.ok()) {
      batch.connection = std::move(connection).value();
    } else {
      outcome->FailAll(batch.items, connection.status());
    }
  }
  // Everything is sent before anything is read, so the masters work in
  // parallel and one deadline bounds the whole round.
  const uint64_t timeout_nanos =
      uint64_t{op.write ? options_.write_timeout_ms : options_.request_timeout_ms} *
      1000000;
  const uint64_t deadline = RedisNowNanos() + timeout_nanos;
  for (Batch& batch : batches) {
    if (batch.connection == nullptr) continue;
    batch.connection->set_idle_timeout_nanos(timeout_nanos);
    QueueNext(batch, op, Window(*batch.node, op, batch.items.size()), 0);
    const uint64_t sent_before = batch.connection->bytes_sent();
    Status sent = batch.connection->Flush(deadline);
    if (!sent.ok()) {  // the connection is broken: no reply is read from it
      if (sent.IsUnavailable()) MarkDown(*batch.node);
      // Once some bytes went, the master may have run the commands they hold.
      outcome->FailAll(std::span<const Item>(batch.items).first(batch.sent), sent,
                       batch.connection->bytes_sent() != sent_before);
      outcome->FailAll(std::span<const Item>(batch.items).subspan(batch.sent), sent);
    }
  }
  ReadReplies(batches, deadline, op, next, outcome);
  for (Batch& batch : batches) {
    if (batch.connection != nullptr) Release(*batch.node, std::move(batch.connection));
  }
}

void RedisClusterStore::QueueNext(Batch& batch, const KeyOp& op, size_t count,
                                  size_t answered) {
  const size_t end = std::min(batch.items.size(), batch.sent + count);
  for (; batch.sent < end; ++batch.sent) {
    if (batch.asking) batch.connection->Append({"ASKING"});
    op.append(*batch.connection, batch.items[batch.sent].index);
  }
  const uint64_t in_flight = batch.sent - answered;
  uint64_t max = max_in_flight_.load(std::memory_order_relaxed);
  while (in_flight > max && !max_in_flight_.compare_exchange_weak(max, in_flight)) {
  }
}

void RedisClusterStore::ReadReplies(std::vector<Batch>& batches, uint64_t deadline,
                                    const KeyOp& op, std::vector<Item>* next,
                                    Outcome* outcome) {
  // The replies are read from whichever node has bytes, so every master keeps
  // streaming: read one after the other, the others would stall on full
  // socket buffers, each woken again only when its turn came.
  struct Reading {
    Batch* batch;
    size_t replies = 0;  // taken so far; with ASKING, two per item
  };
  std::vector<Reading> reading;
  for (Batch& batch : batches) {
    if (batch.connection == nullptr || batch.connection->broken()) continue;
    batch.connection->Progress();  // each node's silence is counted from now
    reading.push_back(Reading{&batch});
  }
  const auto fail = [&](Reading& r, const Status& status) {
    if (status.IsUnavailable()) MarkDown(*r.batch->node);
    // The keys without a reply fail; those answered keep their outcome. Those
    // sent may have been done (a reply lost, not a command): a SET stored.
    const size_t answered = r.replies / (r.batch->asking ? 2 : 1);
    const std::span<const Item> items(r.batch->items);
    outcome->FailAll(items.subspan(answered, r.batch->sent - answered), status,
                     /*maybe_done=*/true);
    outcome->FailAll(items.subspan(r.batch->sent), status);
    r.batch = nullptr;
  };
  std::vector<pollfd> polled;
  while (true) {
    for (Reading& r : reading) {
      if (r.batch == nullptr) continue;  // failed while waiting
      const size_t per_item = r.batch->asking ? 2 : 1;
      while (r.batch != nullptr && r.replies < r.batch->items.size() * per_item) {
        StatusOr<RedisReplyPtr> reply = r.batch->connection->TakeBuffered();
        if (!reply.ok()) {
          fail(r, reply.status());
          break;
        }
        if (*reply == nullptr) break;  // the rest has not arrived yet
        ++r.replies;
        if (per_item == 2 && r.replies % 2 == 1) continue;  // ASKING's +OK
        const size_t answered = r.replies / per_item;
        if (op.windowed && (*reply)->type == REDIS_REPLY_STRING) {
          NoteValueBytes(*r.batch->node, (*reply)->len);
        }
        Status sent;
        if (r.batch->sent < r.batch->items.size()) {
          // The window moves on before this value is handed over (and
          // checked), so the node is busy meanwhile.
          QueueNext(*r.batch, op, 1, answered);
          sent = r.batch->connection->Flush(deadline);
        }
        const Item& item = r.batch->items[answered - 1];
        const Status accepted = Accept(**reply, item, *r.batch->connection, op, next);
        if (!accepted.ok()) outcome->Fail(item.index, accepted);  // -OOM: this key
        if (!sent.ok()) fail(r, sent);  // the keys after this one
      }
    }
    std::erase_if(reading, [](const Reading& r) {
      return r.batch == nullptr ||
             r.replies == r.batch->items.size() * (r.batch->asking ? 2 : 1);
    });
    if (reading.empty()) return;
    // Wait for any of them, until the earliest deadline among them.
    const uint64_t now = RedisNowNanos();
    uint64_t until = UINT64_MAX;
    polled.clear();
    for (const Reading& r : reading) {
      until = std::min(until, r.batch->connection->WaitDeadline(deadline));
      polled.push_back(pollfd{r.batch->connection->fd(), POLLIN, 0});
    }
    const uint64_t left = until > now ? until - now : 0;
    timespec wait{static_cast<time_t>(left / 1000000000),
                  static_cast<long>(left % 1000000000)};
    int n;
    do {
      n = ppoll(polled.data(), polled.size(), &wait, nullptr);
    } while (n < 0 && errno == EINTR);
    const uint64_t after = RedisNowNanos();
    for (size_t i = 0; i < reading.size(); ++i) {
      Reading& r = reading[i];
      RedisConnection& connection = *r.batch->connection;
      if (n > 0 && polled[i].revents != 0) {
        // Bytes, or the peer closed (the recv says which).
        if (Status got = connection.Receive(); !got.ok()) fail(r, got);
      } else if (after >= connection.WaitDeadline(deadline)) {
        fail(r, connection.TimedOut("reply"));  // silent past its deadline
      }
    }
  }
}

Status RedisClusterStore::Accept(redisReply& reply, const Item& item,
                                 const RedisConnection& connection, const KeyOp& op,
                                 std::vector<Item>* next) {
  if (std::optional<RedisRedirect> redirect = ParseRedirect(reply, connection.host())) {
    FollowRedirect(*redirect, item, next);
    return Status::OK();
  }
  if (reply.type == REDIS_REPLY_ERROR && !(op.accepts_wrong_type && IsWrongType(reply))) {
    return ErrorReplyStatus(reply, connection.name());
  }
  return op.accept(item.index, reply);
}

void RedisClusterStore::FollowRedirect(const RedisRedirect& redirect, Item item,
                                       std::vector<Item>* next) {
  MutexLock lock(&mu_);
  Node* target = NodeFor(redirect.target);
  ++item.redirects;
  if (redirect.ask) {
    item.ask = target;  // this command only; the slot still belongs to the old master
  } else {
    item.ask = nullptr;
    if (!slots_.empty()) slots_[redirect.slot] = target;
    refresh_wanted_ = true;  // other slots may have moved too
    // Another master serves the slot: a failover (a replica promoted behind
    // its master, the old one demoted and emptied) as well as a migration,
    // so what callers saw stored there may be gone (FailureEpoch).
    failure_epoch_.fetch_add(1, std::memory_order_acq_rel);
  }
  next->push_back(item);
}

Status RedisClusterStore::MultiGet(std::span<const std::string> keys,
                                   std::vector<std::optional<SharedBytes>>* values) {
  return MultiGetEach(keys, values, nullptr, nullptr);
}

Status RedisClusterStore::MultiGetEach(std::span<const std::string> keys,
                                       std::vector<std::optional<SharedBytes>>* values,
                                       const ValueArrived& arrived,
                                       std::vector<bool>* failed) {
  values->assign(keys.size(), std::nullopt);
  KeyOp op;
  op.windowed = true;
  op.accepts_wrong_type = true;
  op.append = [&](RedisConnection& c, size_t i) { c.Append({"GET", keys[i]}); };
  op.accept = [&](size_t i, redisReply& reply) {
    if (reply.type == REDIS_REPLY_NIL) return Status::OK();
    if (IsWrongType(reply)) {
      // Another client's list, hash... under the key: a value, empty, which
      // the caller's check refuses (and deletes), not a failed call.
      (*values)[i] = SharedBytes();
      if (arrived) arrived(i, *(*values)[i]);
      return Status::OK();
    }
    if (reply.type != REDIS_REPLY_STRING) {
      return Status::IOError("redis: unexpected reply to GET");
    }
    (*values)[i] = TakeStringReply(reply);  // no copy
    if (arrived) arrived(i, *(*values)[i]);
    return Status::OK();
  };
  std::vector<RemoteWriteResult> each;  // each key's own outcome
  const Status s = Execute(std::vector<std::string_view>(keys.begin(), keys.end()), op,
                           failed != nullptr ? &each : nullptr);
  if (failed != nullptr) {
    failed->assign(keys.size(), false);
    for (size_t i = 0; i < each.size(); ++i) (*failed)[i] = !each[i].status.ok();
  }
  return s;
}

Status RedisClusterStore::MultiSet(std::span<const RemoteWrite> writes) {
  return Set(writes, nullptr);
}

Status RedisClusterStore::MultiSetEach(std::span<const RemoteWrite> writes,
                                       std::vector<RemoteWriteResult>* results) {
  return Set(writes, results);
}

Status RedisClusterStore::Set(std::span<const RemoteWrite> writes,
                              std::vector<RemoteWriteResult>* results) {
  std::vector<std::string_view> keys;
  std::vector<std::string> ttls;
  for (const RemoteWrite& w : writes) {
    keys.push_back(w.key);
    ttls.push_back(std::to_string(w.ttl_seconds));
  }
  KeyOp op;
  op.write = true;
  op.append = [&](RedisConnection& c, size_t i) {
    if (writes[i].ttl_seconds == 0) {
      c.Append({"SET", writes[i].key, writes[i].value});
    } else {
      c.Append({"SET", writes[i].key, writes[i].value, "EX", ttls[i]});
    }
  };
  op.accept = [](size_t, redisReply& reply) {
    if (reply.type == REDIS_REPLY_STATUS) return Status::OK();
    return Status::IOError("redis: unexpected reply to SET");
  };
  return Execute(keys, op, results);
}

Status RedisClusterStore::Delete(std::span<const std::string> keys) {
  // One DEL per key: a DEL of keys in different slots is refused by a cluster.
  KeyOp op;
  op.write = true;
  op.append = [&](RedisConnection& c, size_t i) { c.Append({"DEL", keys[i]}); };
  op.accept = [](size_t, redisReply& reply) { return ExpectInteger(reply, "DEL"); };
  return Execute(std::vector<std::string_view>(keys.begin(), keys.end()), op, nullptr);
}

StatusOr<int64_t> RedisClusterStore::IncrBy(std::string_view key, int64_t delta,
                                            uint32_t ttl_seconds) {
  StatusOr<CounterWindow> window = AddToCounter(key, delta, ttl_seconds, 0, false);
  if (!window.ok()) return window.status();
  return window->total;
}

StatusOr<CounterWindow> RedisClusterStore::IncrByWindow(std::string_view key,
                                                        int64_t delta,
                                                        uint32_t ttl_seconds,
                                                        uint64_t expire_within_ms) {
  return AddToCounter(key, delta, ttl_seconds, expire_within_ms, true);
}

StatusOr<CounterWindow> RedisClusterStore::AddToCounter(std::string_view key,
                                                        int64_t delta,
                                                        uint32_t ttl_seconds,
                                                        uint64_t expire_within_ms,
                                                        bool read_ttl) {
  const std::vector<std::string_view> keys = {key};
  const std::string delta_text = std::to_string(delta);
  CounterWindow window;
  // Every command is a write from the remote tier's background writers (PTTL
  // rides with them): they wait write_timeout_ms like a SET (a master busy
  // ingesting may pause longer than a read should wait, and a counter cut
  // off there is charged but never given its expiry).
  KeyOp incr;
  incr.write = true;
  incr.append = [&](RedisConnection& c, size_t) {
    c.Append({"INCRBY", key, delta_text});
  };
  incr.accept = [&](size_t, redisReply& reply) {
    window.total = reply.integer;
    return ExpectInteger(reply, "INCRBY");
  };
  PKV_RETURN_IF_ERROR(Execute(keys, incr, nullptr));
  // Then, pipelined in one round, the same key each time:
  // - EXPIRE NX when ttl_seconds > 0: its expiry, unless it has one (NX,
  //   Redis >= 7.0), set by the creator, so the window is not pushed back.
  //   Sent on every call, not only when this one created the key: a creator
  //   whose EXPIRE never ran (a lost reply, a process killed between the
  //   two) left a counter that would otherwise never expire, and its
  //   namespace over the limit for good.
  // - PEXPIRE LT when expire_within_ms > 0 (no expiry counts as later).
  // - PTTL when read_ttl: the window's end, after the two above.
  enum class Step { kExpire, kShorten, kTtl };
  std::vector<Step> steps;
  if (ttl_seconds > 0) steps.push_back(Step::kExpire);
  if (expire_within_ms > 0) steps.push_back(Step::kShorten);
  if (read_ttl) steps.push_back(Step::kTtl);
  if (steps.empty()) return window;
  const std::string ttl_text = std::to_string(ttl_seconds);
  const std::string within_text = std::to_string(expire_within_ms);
  int64_t ttl_ms = -1;
  KeyOp after;
  after.write = true;
  after.append = [&](RedisConnection& c, size_t i) {
    switch (steps[i]) {
      case Step::kExpire:
        c.Append({"EXPIRE", key, ttl_text, "NX"});
        break;
      case Step::kShorten:
        c.Append({"PEXPIRE", key, within_text, "LT"});
        break;
      case Step::kTtl:
        c.Append({"PTTL", key});
        break;
    }
  };
  after.accept = [&](size_t i, redisReply& reply) {
    if (steps[i] == Step::kTtl) ttl_ms = reply.integer;
    return ExpectInteger(reply, steps[i] == Step::kTtl ? "PTTL" : "EXPIRE");
  };
  // The INCRBY ran: its total is the answer even when the rest fails (a
  // master silent or refusing between the two), and the next call gives the
  // counter its expiry. Failed, the call hid a charge that was made: the
  // remote tier took the counter for not updated, failed the batch and left
  // its bytes charged with nothing written.
  std::vector<RemoteWriteResult> results;
  (void)Execute(std::vector<std::string_view>(steps.size(), key), after, &results);
  if (read_ttl && results.back().status.ok() && ttl_ms >= 0) window.ttl_ms = ttl_ms;
  return window;
}

}  // namespace prefixkv
