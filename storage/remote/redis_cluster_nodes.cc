// RedisClusterStore's node table: the slot map (CLUSTER SLOTS), each node's
// connection pool and down backoff, and OpenRedisClusterStore itself.
#include <hiredis/hiredis.h>

#include <atomic>
#include <set>
#include <utility>

#include "redis_cluster_store.h"

namespace prefixkv {

struct RedisClusterStore::Node {
  explicit Node(RedisAddress a) : address(std::move(a)), name(address.name()) {}
  const RedisAddress address;
  const std::string name;
  Mutex mu;
  std::vector<std::unique_ptr<RedisConnection>> idle GUARDED_BY(mu);
  uint64_t down_until_nanos GUARDED_BY(mu) = 0;  // clock_ time
  // Bytes of the last GET value read from this node (0: none yet): what a
  // read's window (kReadWindowBytes) is counted in.
  std::atomic<uint64_t> value_bytes{0};
};

RedisClusterStore::RedisClusterStore(RedisClusterOptions options,
                                     std::vector<RedisAddress> seeds, const Clock* clock)
    : options_(std::move(options)), clock_(clock) {
  MutexLock lock(&mu_);
  for (const RedisAddress& seed : seeds) {
    Node* node = NodeFor(seed);
    if (std::find(seeds_.begin(), seeds_.end(), node) == seeds_.end()) {
      seeds_.push_back(node);
      seeds_text_ += (seeds_text_.empty() ? "" : ",") + node->name;
    }
  }
}

RedisClusterStore::~RedisClusterStore() = default;

RedisClusterStore::Node* RedisClusterStore::NodeFor(const RedisAddress& address) {
  std::unique_ptr<Node>& node = nodes_[address.name()];
  if (node == nullptr) node = std::make_unique<Node>(address);
  return node.get();
}

Status RedisClusterStore::DownStatus(Node& node) const {
  uint64_t until;
  {
    MutexLock lock(&node.mu);
    until = node.down_until_nanos;
  }
  const uint64_t now = clock_->NowNanos();
  if (now >= until) return Status::OK();
  return Status::Unavailable("redis " + node.name +
                             ": down after a failure, retried in " +
                             std::to_string((until - now) / 1000000 + 1) + " ms");
}

size_t RedisClusterStore::Window(const Node& node, const KeyOp& op, size_t items) const {
  if (!op.windowed) return items;
  const uint64_t value = node.value_bytes.load(std::memory_order_relaxed);
  if (value == 0) return items;  // nothing read from this node yet: all at once
  // At least two, so the next GET is at the node before it finished the last.
  const uint64_t window = std::max<uint64_t>(2, kReadWindowBytes / value);
  return static_cast<size_t>(std::min<uint64_t>(items, window));
}

void RedisClusterStore::NoteValueBytes(Node& node, size_t bytes) {
  node.value_bytes.store(bytes, std::memory_order_relaxed);
}

StatusOr<std::unique_ptr<RedisConnection>> RedisClusterStore::Acquire(Node& node) {
  PKV_RETURN_IF_ERROR(DownStatus(node));
  while (true) {
    std::unique_ptr<RedisConnection> connection;
    {
      MutexLock lock(&node.mu);
      if (node.idle.empty()) break;
      connection = std::move(node.idle.back());
      node.idle.pop_back();
    }
    if (!connection->ClosedWhileIdle()) return connection;
    // The node closed it while it was pooled: restarted since (or its idle
    // timeout passed). Used, it failed its keys and marked the node down,
    // which answers again: a fresh connection is tried instead. The node
    // may have come back empty, so what callers saw stored may be gone.
    failure_epoch_.fetch_add(1, std::memory_order_acq_rel);
  }
  StatusOr<std::unique_ptr<RedisConnection>> connection =
      RedisConnection::Connect(node.address.host, node.address.port,
                               options_.connect_timeout_ms, options_.password);
  if (!connection.ok() && connection.status().IsUnavailable()) MarkDown(node);
  return connection;
}

void RedisClusterStore::Release(Node& node, std::unique_ptr<RedisConnection> connection) {
  if (connection == nullptr || connection->broken()) return;  // closed here
  MutexLock lock(&node.mu);
  if (node.idle.size() < options_.pool_per_node &&
      clock_->NowNanos() >= node.down_until_nanos) {
    node.idle.push_back(std::move(connection));
  }
}

void RedisClusterStore::MarkDown(Node& node) {
  // A node that failed may come back empty or be failed over to a replica
  // behind it: what callers saw stored before may be gone (FailureEpoch).
  failure_epoch_.fetch_add(1, std::memory_order_acq_rel);
  std::vector<std::unique_ptr<RedisConnection>> closing;
  {
    MutexLock lock(&node.mu);
    node.down_until_nanos =
        clock_->NowNanos() + uint64_t{options_.down_backoff_ms} * 1000000;
    closing.swap(node.idle);
  }
  MutexLock lock(&mu_);
  refresh_wanted_ = true;  // the cluster may have failed over
}

StatusOr<RedisClusterStore::Map> RedisClusterStore::FetchMap(Node& node) {
  PKV_ASSIGN_OR_RETURN(std::unique_ptr<RedisConnection> connection, Acquire(node));
  const uint64_t timeout_nanos = uint64_t{options_.request_timeout_ms} * 1000000;
  const uint64_t deadline = RedisNowNanos() + timeout_nanos;
  // A read's bound, whatever the connection's last use set: a pooled one a
  // write round used last would wait write_timeout_ms for a silent node, in
  // a call that may be a Match's read.
  connection->set_idle_timeout_nanos(timeout_nanos);
  StatusOr<RedisReplyPtr> reply = connection->Call({"CLUSTER", "SLOTS"}, deadline);
  if (!reply.ok()) {
    if (reply.status().IsUnavailable()) MarkDown(node);
    return reply.status();
  }
  Map map;
  if (IsClusterDisabledError(**reply)) {
    map.standalone = true;
    map.slots.assign(kRedisSlots, &node);
  } else {
    if ((*reply)->type == REDIS_REPLY_ERROR) return ErrorReplyStatus(**reply, node.name);
    PKV_ASSIGN_OR_RETURN(std::vector<RedisSlotRange> ranges,
                         ParseClusterSlots(**reply, node.address.host));
    if (ranges.empty()) return Status::Unavailable("redis " + node.name + ": no slots");
    map.slots.assign(kRedisSlots, nullptr);
    MutexLock lock(&mu_);
    for (const RedisSlotRange& range : ranges) {
      Node* master = NodeFor(range.master);
      for (int slot = range.first; slot <= range.last; ++slot) map.slots[slot] = master;
    }
  }
  Release(node, std::move(connection));
  return map;
}

void RedisClusterStore::MaybeRefreshMap() {
  std::vector<Node*> candidates;
  bool have_map;
  {
    MutexLock lock(&mu_);
    if (refreshing_ || !refresh_wanted_ || clock_->NowNanos() < next_refresh_nanos_)
      return;
    refreshing_ = true;
    have_map = !slots_.empty();
    for (Node* node : slots_) {  // the current masters first, then the seeds
      if (node != nullptr &&
          std::find(candidates.begin(), candidates.end(), node) == candidates.end()) {
        candidates.push_back(node);
      }
    }
    for (Node* seed : seeds_) {
      if (std::find(candidates.begin(), candidates.end(), seed) == candidates.end()) {
        candidates.push_back(seed);
      }
    }
  }
  // Bounded: one connect and one request time in all (the first candidate
  // is always tried).
  const uint64_t budget_end =
      RedisNowNanos() +
      uint64_t{options_.connect_timeout_ms + options_.request_timeout_ms} * 1000000;
  StatusOr<Map> map = Status::Unavailable("no node answered");
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (i > 0 && RedisNowNanos() >= budget_end) break;
    if (have_map && !DownStatus(*candidates[i]).ok()) continue;
    map = FetchMap(*candidates[i]);
    if (map.ok()) break;
  }
  MutexLock lock(&mu_);
  refreshing_ = false;
  if (map.ok()) {
    slots_ = std::move(map->slots);
    standalone_ = map->standalone;
    masters_ = std::set<Node*>(slots_.begin(), slots_.end()).size() -
               (std::find(slots_.begin(), slots_.end(), nullptr) != slots_.end() ? 1 : 0);
    refresh_wanted_ = false;
    ++map_fetches_;
  } else {
    next_refresh_nanos_ =
        clock_->NowNanos() + uint64_t{options_.down_backoff_ms} * 1000000;
  }
}

std::string RedisClusterStore::Describe() const {
  MutexLock lock(&mu_);
  if (slots_.empty()) return "redis cluster " + seeds_text_ + " (unavailable)";
  if (standalone_) return "redis " + seeds_text_ + " (one node, cluster mode off)";
  return "redis cluster " + seeds_text_ + " (" + std::to_string(masters_) +
         (masters_ == 1 ? " master)" : " masters)");
}

std::string RedisClusterStore::NodeOfSlot(uint16_t slot) const {
  MutexLock lock(&mu_);
  if (slots_.empty() || slot >= kRedisSlots || slots_[slot] == nullptr) return "";
  return slots_[slot]->name;
}

uint64_t RedisClusterStore::map_fetches() const {
  MutexLock lock(&mu_);
  return map_fetches_;
}

bool RedisClusterStore::IsNodeDown(const std::string& node) const {
  Node* found = nullptr;
  {
    MutexLock lock(&mu_);
    auto it = nodes_.find(node);
    if (it == nodes_.end()) return false;
    found = it->second.get();
  }
  return !DownStatus(*found).ok();
}

StatusOr<std::unique_ptr<RedisClusterStore>> OpenRedisClusterStoreWithClock(
    const RedisClusterOptions& options, const Clock* clock) {
  if (options.seeds.empty()) {
    return Status::InvalidArgument("redis cluster: no seed node given");
  }
  if (options.request_timeout_ms == 0 || options.connect_timeout_ms == 0 ||
      options.write_timeout_ms == 0) {
    return Status::InvalidArgument("redis cluster: timeouts must be > 0 ms");
  }
  std::vector<RedisAddress> seeds;
  for (const std::string& seed : options.seeds) {
    PKV_RETURN_IF_ERROR(ParseRedisSeeds(seed).status());
    PKV_ASSIGN_OR_RETURN(RedisAddress address, SplitRedisAddress(seed));
    seeds.push_back(std::move(address));
  }
  auto store = std::make_unique<RedisClusterStore>(options, std::move(seeds), clock);
  store->MaybeRefreshMap();  // without an answer the store opens unavailable
  return store;
}

StatusOr<std::unique_ptr<RemoteStore>> OpenRedisClusterStore(
    const RedisClusterOptions& options) {
  PKV_ASSIGN_OR_RETURN(std::unique_ptr<RedisClusterStore> store,
                       OpenRedisClusterStoreWithClock(options, Clock::System()));
  return std::unique_ptr<RemoteStore>(std::move(store));
}

}  // namespace prefixkv
