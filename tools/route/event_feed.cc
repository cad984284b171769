// EventFeed (event_feed.h): XREAD replies parsed into KvEvents, applied to
// the router; reconnection and resnapshot.
#include "tools/route/event_feed.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <utility>

namespace prefixkv::route {
namespace {

using Type = RespValue::Type;

Status Bad(const std::string& what) {
  return Status::InvalidArgument("stream entry: " + what);
}

StatusOr<TierLevel> ParseTier(const std::string& name) {
  for (TierLevel t :
       {TierLevel::kNone, TierLevel::kHot, TierLevel::kSsd, TierLevel::kRemote}) {
    if (name == TierLevelName(t)) return t;
  }
  return Bad("unknown tier '" + name + "'");
}

StatusOr<KvEventKind> ParseKind(const std::string& name) {
  for (KvEventKind k : {KvEventKind::kStored, KvEventKind::kRemoved, KvEventKind::kMoved,
                        KvEventKind::kCleared}) {
    if (name == KvEventKindName(k)) return k;
  }
  return Bad("unknown kind '" + name + "'");
}

// "<seq>-<n>": the sequence number.
StatusOr<uint64_t> ParseIdSeq(const std::string& id) {
  const size_t dash = id.find('-');
  const std::string head = id.substr(0, dash);
  char* end = nullptr;
  const uint64_t seq = std::strtoull(head.c_str(), &end, 10);
  if (head.empty() || end != head.c_str() + head.size() || head[0] == '-')
    return Bad("id '" + id + "' is not <seq>-<n>");
  return seq;
}

// A stream id's two numbers, "<seq>" alone meaning "<seq>-0"; nullopt when
// it is not a stream id.
std::optional<std::pair<uint64_t, uint64_t>> IdNumbers(const std::string& id) {
  StatusOr<uint64_t> seq = ParseIdSeq(id);
  if (!seq.ok()) return std::nullopt;
  const size_t dash = id.find('-');
  if (dash == std::string::npos) return std::make_pair(*seq, uint64_t{0});
  const std::string tail = id.substr(dash + 1);
  char* end = nullptr;
  const uint64_t n = std::strtoull(tail.c_str(), &end, 10);
  if (tail.empty() || tail[0] == '-' || end != tail.c_str() + tail.size())
    return std::nullopt;
  return std::make_pair(*seq, n);
}

// The later of two stream ids (`b` when `a` is not one).
std::string LaterId(const std::string& a, const std::string& b) {
  const auto x = IdNumbers(a), y = IdNumbers(b);
  return x && y && *x > *y ? a : b;
}

// Whether the node answers on a new connection (any reply, an error too). A
// connect alone proves nothing: a node that is stopped or hung accepts
// connections all the same (the kernel completes them from its listen
// backlog), and was marked available at every reconnect until its XREAD
// timed out.
bool Answers(RespClient& client) { return client.Command({"PING"}).ok(); }

// Whether an error reply says the server has no such command (Redis and its
// kin: "ERR unknown command ..."; "NOPERM ...": its ACL will not run it).
// Any other error is the server's trouble of a moment (a prefixkv node whose
// event log cannot reserve sequence numbers answers Unavailable).
bool LacksTheCommand(const RespValue& reply) {
  std::string text = reply.str;
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text.find("unknown command") != std::string::npos || text.starts_with("noperm");
}

// Whether an error reply to `PKV.SNAPSHOT <cursor> COUNT n` says the server
// takes no such arguments: a prefixkv node from before the pages (its
// PKV.SNAPSHOT took none) answers "wrong number of arguments".
bool RefusesTheArguments(const RespValue& reply) {
  return reply.str.find("wrong number of arguments") != std::string::npos ||
         reply.str.find("syntax error") != std::string::npos;
}

}  // namespace

StatusOr<KvEvent> ParseStreamEntry(const RespValue& entry) {
  if (entry.type != Type::kArray || entry.elements.size() != 2 ||
      entry.elements[0].type != Type::kString || entry.elements[1].type != Type::kArray)
    return Bad("not [id, [field, value, ...]]");
  KvEvent e;
  PKV_ASSIGN_OR_RETURN(e.seq, ParseIdSeq(entry.elements[0].str));
  const std::vector<RespValue>& f = entry.elements[1].elements;
  if (f.size() % 2 != 0) return Bad("an odd number of field values");
  bool has_kind = false, has_tier = false, has_from = false, has_key = false;
  for (size_t i = 0; i + 1 < f.size(); i += 2) {
    const std::string& name = f[i].str;
    const std::string& value = f[i + 1].str;
    if (name == "kind") {
      PKV_ASSIGN_OR_RETURN(e.kind, ParseKind(value));
      has_kind = true;
    } else if (name == "tier") {
      PKV_ASSIGN_OR_RETURN(e.tier, ParseTier(value));
      has_tier = true;
    } else if (name == "from") {
      PKV_ASSIGN_OR_RETURN(e.from, ParseTier(value));
      has_from = true;
    } else if (name == "key") {
      StatusOr<BlockKey> key = BlockKey::FromHex(value);
      if (!key.ok()) return Bad("key '" + value + "' is not 32 hex digits");
      e.key = *key;
      has_key = true;
    }
  }
  if (!has_kind || !has_tier) return Bad("no kind or no tier field");
  // Read with its default, a missing key named the zero key (a block no
  // prompt has) instead of the block, and a move's missing `from` left the
  // block in the tier it left.
  if (e.kind != KvEventKind::kCleared && !has_key) return Bad("no key field");
  if (e.kind == KvEventKind::kMoved && !has_from)
    return Bad("a move without a from field");
  return e;
}

Status ParseXreadReply(const RespValue& reply, std::vector<KvEvent>* events,
                       std::string* last_id, std::string* bad_id) {
  if (reply.type == Type::kNil) return Status::OK();
  if (reply.type != Type::kArray)
    return Status::InvalidArgument("XREAD reply is not an array");
  for (const RespValue& stream : reply.elements) {
    if (stream.type != Type::kArray || stream.elements.size() != 2 ||
        stream.elements[1].type != Type::kArray)
      return Status::InvalidArgument("XREAD reply: not [stream, [entries]]");
    for (const RespValue& entry : stream.elements[1].elements) {
      StatusOr<KvEvent> e = ParseStreamEntry(entry);
      if (!e.ok()) {
        if (bad_id != nullptr && entry.type == Type::kArray && !entry.elements.empty() &&
            IdNumbers(entry.elements[0].str))
          *bad_id = entry.elements[0].str;
        return e.status();
      }
      events->push_back(*e);
      *last_id = entry.elements[0].str;
    }
  }
  return Status::OK();
}

Status ParseSnapshotReply(const RespValue& reply, std::vector<KvEvent>* blocks,
                          std::string* id, std::string* next_cursor) {
  // Unpaged: [id, <id>, hot, [...], ssd, [...]]; a page: [id, <id>, cursor,
  // <next>, hot, [...], ssd, [...]].
  const bool paged = reply.elements.size() == 8;
  if (reply.type != Type::kArray || (reply.elements.size() != 6 && !paged) ||
      reply.elements[1].type != Type::kString ||
      (paged &&
       (reply.elements[2].str != "cursor" || reply.elements[3].type != Type::kString)))
    return Status::InvalidArgument(
        "PKV.SNAPSHOT reply is not [id, <id>, (cursor, <next>,) hot, [...], ssd, [...]]");
  PKV_RETURN_IF_ERROR(ParseIdSeq(reply.elements[1].str).status());
  const size_t first_tier = paged ? 4 : 2;
  for (size_t t = first_tier; t < first_tier + 4; t += 2) {
    PKV_ASSIGN_OR_RETURN(TierLevel tier, ParseTier(reply.elements[t].str));
    if (reply.elements[t + 1].type != Type::kArray)
      return Status::InvalidArgument(
          "PKV.SNAPSHOT reply: a tier's blocks are not an array");
    for (const RespValue& b : reply.elements[t + 1].elements) {
      if (b.type != Type::kArray || b.elements.empty())
        return Status::InvalidArgument("PKV.SNAPSHOT reply: a block is not an array");
      StatusOr<BlockKey> key = BlockKey::FromHex(b.elements[0].str);
      if (!key.ok()) return Bad("key '" + b.elements[0].str + "' is not 32 hex digits");
      blocks->push_back({.kind = KvEventKind::kStored, .tier = tier, .key = *key});
    }
  }
  *id = reply.elements[1].str;
  if (next_cursor != nullptr) *next_cursor = paged ? reply.elements[3].str : "0";
  return Status::OK();
}

std::string LastGeneratedId(const RespValue& xinfo) {
  if (xinfo.type != Type::kArray) return "";
  const std::vector<RespValue>& f = xinfo.elements;
  for (size_t i = 0; i + 1 < f.size(); i += 2) {
    if (f[i].str == "last-generated-id" && f[i + 1].type == Type::kString &&
        ParseIdSeq(f[i + 1].str).ok())
      return f[i + 1].str;
  }
  return "";
}

EventFeed::EventFeed(EventFeedOptions options, PrefixRouter* router)
    : options_(std::move(options)), router_(router) {
  // Not chosen before its feed has connected: the router cannot tell a node
  // that is up yet from one that is down.
  router_->SetNodeAvailable(options_.node, false);
  thread_ = std::thread([this] { Run(); });
}

EventFeed::~EventFeed() { Stop(); }

void EventFeed::Stop() {
  RequestStop();
  if (thread_.joinable()) thread_.join();
}

void EventFeed::Run() {
  while (!stop_) {
    StatusOr<std::unique_ptr<RespClient>> client =
        RespClient::Connect(options_.host, options_.port, options_.timeout_ms);
    if (client.ok() && Answers(**client) &&
        (*client)->SetTimeout(options_.block_ms + options_.timeout_ms).ok()) {
      SetConnected(true);
      Tail(**client);
      SetConnected(false);
    }
    if (stop_) break;
    ++reconnects_;
    Pause(RetryWait());
  }
}

uint32_t EventFeed::RetryWait() const {
  // A failed bootstrap made the router forget the node (a walk of its whole
  // index under its lock, 158 ms at 2M blocks): asked again every retry_ms,
  // a node whose bootstraps kept failing held ROUTE up half the time.
  const uint64_t wait = uint64_t{options_.retry_ms} << std::min(failed_bootstraps_, 20u);
  return static_cast<uint32_t>(std::max<uint64_t>(
      options_.retry_ms, std::min<uint64_t>(wait, options_.max_retry_ms)));
}

uint32_t EventFeed::TailErrorWait() const {
  // A node whose XREAD fails after every good snapshot (its ACL refuses
  // XREAD, its stream key holds another type) was resnapshotted at once,
  // for ever: the router forgot the node and walked its index under its
  // lock, then applied every page, as fast as the node answered.
  if (failed_tails_ == 0) return 0;
  const uint64_t wait = uint64_t{options_.retry_ms} << std::min(failed_tails_ - 1, 20u);
  return static_cast<uint32_t>(std::max<uint64_t>(
      options_.retry_ms, std::min<uint64_t>(wait, options_.max_retry_ms)));
}

void EventFeed::Pause(uint32_t ms) {
  // In steps, so that a stop does not wait for a long backoff.
  constexpr uint32_t kStepMs = 100;
  for (uint32_t waited = 0; waited < ms && !stop_; waited += kStepMs) {
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::min(kStepMs, ms - waited)));
  }
}

void EventFeed::SetConnected(bool connected) {
  // A node whose stream cannot be read is likely down (it died or left): no
  // request goes there until the feed is back. What the router knows of it
  // stays: a node back after a blip holds it still, a restarted one's
  // kCleared empties its RAM bits.
  router_->SetNodeAvailable(options_.node, connected);
  connected_ = connected;
}

StatusOr<std::string> EventFeed::Bootstrap(RespClient& client) {
  // Pages: each block is in one page, with its state at that page's id; the
  // events after the FIRST page's id replay the changes between the pages
  // and end in the same states (docs/events.md, "Paged snapshot").
  std::string cursor = "0";
  std::string first;
  for (;;) {
    // A node of millions of blocks takes thousands of pages (one whose
    // cursor never comes back to 0, for ever): a stop must not wait for them.
    if (stop_) return Status::Aborted("stopping");
    PKV_ASSIGN_OR_RETURN(RespValue snap,
                         client.Command({"PKV.SNAPSHOT", cursor, "COUNT",
                                         std::to_string(options_.count)}));
    std::vector<KvEvent> blocks;
    std::string id, next;
    if (!ParseSnapshotReply(snap, &blocks, &id, &next).ok()) {
      if (!first.empty() && snap.type == Type::kError) {
        // The node pages (it answered the first): an error now is its own
        // trouble for a moment (its event log cannot reserve numbers), not
        // a node without PKV.SNAPSHOT, whose fallback goes on from the
        // stream's head without its blocks. Made again at the next connection.
        return Status::Unavailable("PKV.SNAPSHOT page: " + snap.str);
      }
      if (!first.empty()) {
        // A page the router cannot read: trust none of the pages.
        router_->ForgetNode(options_.node);
        ++bad_replies_;
        return std::string();
      }
      if (snap.type == Type::kError && !RefusesTheArguments(snap)) {
        // Only a server without PKV.SNAPSHOT goes on without the node's
        // blocks (from its log's start or its head). An error of a moment
        // (Unavailable) taken for that left the router without them for
        // good: made again at the next connection, without the unpaged form
        // (every block of the node in one reply).
        if (LacksTheCommand(snap)) return std::string();
        return Status::Unavailable("PKV.SNAPSHOT: " + snap.str);
      }
      break;  // a server without pages: the unpaged form
    }
    for (const KvEvent& e : blocks) router_->Apply(options_.node, e);
    applied_ += blocks.size();
    ++snapshot_pages_;
    if (first.empty()) first = id;
    if (next == "0") return first;
    cursor = next;
  }
  PKV_ASSIGN_OR_RETURN(RespValue snap, client.Command({"PKV.SNAPSHOT"}));
  std::vector<KvEvent> blocks;
  std::string id;
  if (!ParseSnapshotReply(snap, &blocks, &id).ok()) {
    // As the first page's (above).
    if (snap.type == Type::kError && !LacksTheCommand(snap))
      return Status::Unavailable("PKV.SNAPSHOT: " + snap.str);
    return std::string();
  }
  for (const KvEvent& e : blocks) router_->Apply(options_.node, e);
  applied_ += blocks.size();
  ++snapshot_pages_;
  return id;
}

bool EventFeed::Resnapshot(RespClient& client) {
  resnapshot_pending_ = true;
  router_->ForgetNode(options_.node);
  ++resnapshots_;
  StatusOr<std::string> id = Bootstrap(client);
  if (!id.ok()) {
    ++failed_bootstraps_;
    return false;
  }
  failed_bootstraps_ = 0;
  resnapshot_pending_ = false;
  const std::string skip = std::exchange(skip_past_, std::string());
  if (!id->empty()) {
    // Past an unreadable entry even if the snapshot were older than it: from
    // before it the feed would meet it again.
    last_id_ = skip.empty() ? *id : LaterId(*id, skip);
    return true;
  }
  if (!skip.empty()) {
    // No snapshot, and the log from id 0 holds the unreadable entry: the
    // router knows the node's changes after it only.
    last_id_ = skip;
    return true;
  }
  // Else read its whole log again; when even that is refused (retention
  // dropped its start), go on from its head, knowing only the changes from
  // then on.
  std::string head;
  if (last_id_ == "0") {
    StatusOr<RespValue> info = client.Command({"XINFO", "STREAM", options_.stream});
    if (!info.ok()) return false;
    head = LastGeneratedId(*info);
  }
  last_id_ = head.empty() ? std::string(1, '0') : head;
  std::this_thread::sleep_for(std::chrono::milliseconds(options_.retry_ms));
  return true;
}

void EventFeed::Tail(RespClient& client) {
  // A resnapshot the last connection broke off: the router has forgotten the
  // node (and may hold some of its pages), so XREAD from the old id would go
  // on without the rest of its blocks.
  if (resnapshot_pending_ && !Resnapshot(client)) return;
  std::vector<KvEvent> events;
  while (!stop_) {
    StatusOr<RespValue> reply = client.Command(
        {"XREAD", "COUNT", std::to_string(options_.count), "BLOCK",
         std::to_string(options_.block_ms), "STREAMS", options_.stream, last_id_});
    if (!reply.ok()) return;  // reconnect
    if (reply->type == Type::kError) {
      // The node no longer holds what follows last_id_ (RESNAPSHOT): what the
      // router knows of it may be stale. A prefixkv node answers PKV.SNAPSHOT:
      // its key sets and the id to go on after.
      Pause(TailErrorWait());
      if (stop_) return;
      ++failed_tails_;
      if (!Resnapshot(client)) return;  // reconnect
      continue;
    }
    failed_tails_ = 0;
    events.clear();
    std::string last = last_id_, bad_id;
    if (Status s = ParseXreadReply(*reply, &events, &last, &bad_id); !s.ok()) {
      // A reply the router cannot read: trust nothing it said of the node.
      ++bad_replies_;
      if (bad_id.empty()) {
        router_->ForgetNode(options_.node);
        return;  // reconnect
      }
      // An entry it cannot read (a node of a newer event format): read again
      // from last_id_, it stalled the feed for good, the node forgotten at
      // every attempt. Skip it: resnapshot (which forgets the node once),
      // then go on after it.
      std::fprintf(stderr,
                   "prefixkv route: node %zu (%s:%d): skipping stream entry %s it "
                   "cannot read (%s); resnapshotting\n",
                   options_.node, options_.host.c_str(), options_.port, bad_id.c_str(),
                   s.ToString().c_str());
      skip_past_ = bad_id;
      if (!Resnapshot(client)) return;  // reconnect
      continue;
    }
    for (const KvEvent& e : events) router_->Apply(options_.node, e);
    applied_ += events.size();
    last_id_ = last;
  }
}

}  // namespace prefixkv::route
