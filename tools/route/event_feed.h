// The router's view of one node: a thread that tails the node's KV event
// stream over RESP in the Redis Streams dialect and applies every event to
// the router (docs/router.md).
//
//   XREAD COUNT n BLOCK ms STREAMS prefixkv:events <last id>
//
// from id 0 (every event the node retains), then from the last id read. An
// entry's id is "<seq>-<n>"; its fields name the event (`kind`, `tier`,
// `from`, `key` as 32 hex digits; others are ignored). When the connection
// drops the feed reconnects and resumes from the last id; when the node
// answers XREAD with an error (RESNAPSHOT: it no longer holds the events
// after that id) the router forgets the node and the feed bootstraps from
// the node's PKV.SNAPSHOT in pages (`PKV.SNAPSHOT <cursor> COUNT n`, then
// XREAD from the first page's id; the unpaged form from a server without
// pages); from a server without PKV.SNAPSHOT it reads the node's whole log
// again from id 0, and when that is refused too (retention dropped the
// log's start) it goes on from the stream's head (XINFO STREAM's
// last-generated-id), the router knowing only the changes from then on.
// The node is available to the router's choice (SetNodeAvailable) only while
// the feed is connected and the node has answered on that connection.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "prefixkv/kv_events.h"
#include "prefixkv/router.h"
#include "tools/route/resp_client.h"

namespace prefixkv::route {

// One stream entry ([id, [field, value, ...]]) as a KvEvent whose seq is the
// id's first number. InvalidArgument naming what is wrong (a field its kind
// needs missing too: the key, but for kCleared; a move's `from`).
StatusOr<KvEvent> ParseStreamEntry(const RespValue& entry);
// The entries of an XREAD reply for one stream (nil: none); `last_id` is set
// to the last entry's id. On an entry it cannot read, `bad_id` (when given)
// is set to that entry's id if the id itself is a stream id, else left empty.
Status ParseXreadReply(const RespValue& reply, std::vector<KvEvent>* events,
                       std::string* last_id, std::string* bad_id = nullptr);

// PKV.SNAPSHOT's reply (docs/protocol.md), unpaged or one page: one kStored
// event per block of its hot and SSD key sets, the stream id they are
// consistent with, and the next page's cursor ("0" after the last page and
// for the unpaged form; `next_cursor` may be null). InvalidArgument for
// anything else (an error reply: a server without it).
Status ParseSnapshotReply(const RespValue& reply, std::vector<KvEvent>* blocks,
                          std::string* id, std::string* next_cursor = nullptr);

// XINFO STREAM's "last-generated-id" (the stream's head); empty when the
// reply holds none.
std::string LastGeneratedId(const RespValue& xinfo);

struct EventFeedOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  size_t node = 0;  // the node's index in the router
  std::string stream = "prefixkv:events";
  uint32_t block_ms = 500;     // XREAD BLOCK: also how soon Stop() returns
  uint32_t count = 1024;       // XREAD COUNT
  uint32_t timeout_ms = 1000;  // connect, and a reply beyond BLOCK
  uint32_t retry_ms = 200;     // between reconnection attempts
  // While bootstraps fail (each makes the router forget the node, a walk of
  // its whole index), the wait doubles from retry_ms up to this.
  uint32_t max_retry_ms = 10000;
};

// Thread-safe: the feed's thread applies events; the counters are atomic.
class EventFeed {
 public:
  // Marks the node unavailable in the router until the feed connects, and
  // starts the thread. REQUIRES: `router` outlives the feed.
  EventFeed(EventFeedOptions options, PrefixRouter* router);
  ~EventFeed();  // Stop()
  // Tells the thread to end after its call under way, without waiting: a
  // router stops all its feeds at once (their waits overlap), then Stop()s
  // each.
  void RequestStop() { stop_ = true; }
  // RequestStop(), then waits for the thread.
  void Stop();

  uint64_t applied() const { return applied_.load(); }
  uint64_t reconnects() const { return reconnects_.load(); }
  uint64_t resnapshots() const { return resnapshots_.load(); }
  // PKV.SNAPSHOT replies applied (pages, or unpaged answers).
  uint64_t snapshot_pages() const { return snapshot_pages_.load(); }
  // XREAD replies the feed could not read (each makes the router forget the
  // node). One holding an entry it cannot read (a node of a newer event
  // format) is logged and skipped: the feed resnapshots and goes on after
  // that entry. Any other reconnects and asks again.
  uint64_t bad_replies() const { return bad_replies_.load(); }
  bool connected() const { return connected_.load(); }
  const EventFeedOptions& options() const { return options_; }

 private:
  void Run();
  // Before the next connection: retry_ms, doubled for each bootstrap that
  // failed in a row, up to max_retry_ms (at least retry_ms).
  uint32_t RetryWait() const;
  // Before resnapshotting for an XREAD error: none for the first (the node
  // trimmed what follows last_id_), then retry_ms doubled for each further
  // error with no good XREAD between, up to max_retry_ms.
  uint32_t TailErrorWait() const;
  // Sleeps `ms`, or less once Stop() is asked.
  void Pause(uint32_t ms);
  // connected_ and the node's availability in the router.
  void SetConnected(bool connected);
  // Reads until Stop() or a connection failure.
  void Tail(RespClient& client);
  // Forgets the node and bootstraps it again (Bootstrap; else from id 0 or
  // the stream's head), going on after skip_past_ at least when it is set.
  // False when the connection failed: the next connection starts it over
  // (resnapshot_pending_), as the XREAD from the old id would resume
  // without the node's blocks the router has just forgotten.
  bool Resnapshot(RespClient& client);
  // Applies the node's PKV.SNAPSHOT, page by page: the id to go on after
  // (the first page's), empty when the node has no usable PKV.SNAPSHOT (the
  // router then knows nothing of it); an error when the connection fails,
  // a page after the first is answered an error, the unpaged form an error
  // other than "unknown command" (a node's trouble of a moment, not a server
  // without PKV.SNAPSHOT), or Stop() was asked (between two pages).
  StatusOr<std::string> Bootstrap(RespClient& client);

  const EventFeedOptions options_;
  PrefixRouter* const router_;
  std::string last_id_ = "0";        // the feed thread's
  bool resnapshot_pending_ = false;  // the feed thread's
  uint32_t failed_bootstraps_ = 0;   // the feed thread's: in a row
  uint32_t failed_tails_ = 0;        // the feed thread's: XREAD errors in a row
  std::string skip_past_;            // the feed thread's: an unreadable entry's id
  std::atomic<bool> stop_{false};
  std::atomic<bool> connected_{false};
  std::atomic<uint64_t> applied_{0}, reconnects_{0}, resnapshots_{0}, bad_replies_{0},
      snapshot_pages_{0};
  std::thread thread_;
};

}  // namespace prefixkv::route
