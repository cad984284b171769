// RemoteTier (remote_tier.h): the envelope, the bounded asynchronous write
// queue and its writers, batched reads, and the counters.
#include "prefixkv/advanced/remote_tier.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <deque>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "prefixkv/advanced/hash.h"
#include "prefixkv/advanced/mutex.h"
#include "quota_windows.h"

namespace prefixkv {

namespace {

// Envelope: magic, version, 3 zero bytes, key, parent, namespace (16 bytes
// each, BlockKey::EncodeTo), payload length (u64 LE), XXH3-64 checksum (u64
// LE) of the 64 bytes before it and the payload, 56 zero bytes; then the
// payload, at offset 128: in a 64-byte aligned value it is aligned too, so it
// is handed on as a slice (no copy) with aligned tensors.
constexpr char kMagic[4] = {'P', 'K', 'V', 'R'};
constexpr uint8_t kVersion = 1;
constexpr size_t kHashedHeader = 64;
constexpr size_t kChecksumEnd = kHashedHeader + 8;
constexpr size_t kHeader = 128;

void PutU64(uint8_t* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t GetU64(const uint8_t* in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(in[i]) << (8 * i);
  return v;
}

uint64_t EnvelopeChecksum(const uint8_t* header, std::string_view payload) {
  HashStream h(HashStream::Width::k64);
  h.Update(header, kHashedHeader);
  h.Update(payload.data(), payload.size());
  return h.Digest64();
}

}  // namespace

std::string RemoteTier::EncodeEnvelope(const BlockMeta& meta, std::string_view payload) {
  std::string out(kHeader + payload.size(), '\0');
  auto* p = reinterpret_cast<uint8_t*>(out.data());
  std::memcpy(p, kMagic, 4);
  p[4] = kVersion;
  meta.key.EncodeTo(p + 8);
  meta.parent.EncodeTo(p + 24);
  meta.namespace_id.EncodeTo(p + 40);
  PutU64(p + 56, payload.size());
  PutU64(p + kHashedHeader, EnvelopeChecksum(p, payload));
  std::memcpy(p + kHeader, payload.data(), payload.size());
  return out;
}

StatusOr<RemoteTier::Decoded> RemoteTier::DecodeEnvelope(const BlockKey& key,
                                                         const SharedBytes& value) {
  PKV_ASSIGN_OR_RETURN(Decoded d, CheckEnvelope(key, value.view()));
  if (reinterpret_cast<uintptr_t>(value.data()) % 64 == 0) {
    d.payload = value.Slice(kHeader, value.size() - kHeader);  // aligned: no copy
  } else {
    d.payload = SharedBytes::Copy(value.view().substr(kHeader));
  }
  return d;
}

StatusOr<RemoteTier::Decoded> RemoteTier::DecodeEnvelope(const BlockKey& key,
                                                         std::string_view value) {
  PKV_ASSIGN_OR_RETURN(Decoded d, CheckEnvelope(key, value));
  d.payload = SharedBytes::Copy(value.substr(kHeader));  // 64-byte aligned
  return d;
}

StatusOr<RemoteTier::Decoded> RemoteTier::CheckEnvelope(const BlockKey& key,
                                                        std::string_view value) {
  if (value.size() < kHeader) return Status::Corruption("remote value too short");
  const auto* p = reinterpret_cast<const uint8_t*>(value.data());
  if (std::memcmp(p, kMagic, 4) != 0 || p[4] != kVersion || p[5] != 0 || p[6] != 0 ||
      p[7] != 0) {
    return Status::Corruption("remote value has no prefixkv envelope");
  }
  for (size_t i = kChecksumEnd; i < kHeader; ++i) {
    if (p[i] != 0) return Status::Corruption("remote value has non-zero header padding");
  }
  const uint64_t length = GetU64(p + 56);
  if (length != value.size() - kHeader) {
    return Status::Corruption("remote value length " + std::to_string(value.size()) +
                              " disagrees with its header");
  }
  const std::string_view payload = value.substr(kHeader);
  if (GetU64(p + kHashedHeader) != EnvelopeChecksum(p, payload)) {
    return Status::Corruption("remote value checksum mismatch");
  }
  Decoded out;
  out.meta.key = BlockKey::DecodeFrom(p + 8);
  out.meta.parent = BlockKey::DecodeFrom(p + 24);
  out.meta.namespace_id = BlockKey::DecodeFrom(p + 40);
  if (out.meta.key != key) {
    return Status::Corruption("remote value stored under " + key.ToHex() + " is block " +
                              out.meta.key.ToHex());
  }
  return out;  // the payload is for the caller to take
}

namespace internal {

class RemoteTierImpl {
 public:
  RemoteTierImpl(std::unique_ptr<RemoteStore> store, RemoteTierOptions options)
      : store_(std::move(store)), options_(std::move(options)) {
    if (options_.clock == nullptr) options_.clock = Clock::System();
    if (options_.write_batch_blocks == 0) options_.write_batch_blocks = 1;
    if (options_.known_keys > 0) {
      MutexLock lock(&mu_);
      known_.resize(std::bit_ceil(size_t{options_.known_keys}));
    }
    const uint32_t writers = options_.writer_threads == 0 ? 1 : options_.writer_threads;
    for (uint32_t i = 0; i < writers; ++i) writers_.emplace_back([this] { RunWriter(); });
  }

  ~RemoteTierImpl() {
    {
      MutexLock lock(&mu_);
      stopping_ = true;
      work_cv_.NotifyAll();
    }
    for (std::thread& t : writers_) t.join();
  }

  const RemoteTierOptions& options() const { return options_; }
  std::string Describe() const { return "remote: " + store_->Describe(); }

  std::string StoreKey(const BlockKey& key) const {
    return options_.key_prefix + key.ToHex();
  }

  void SetLimits(const BlockKey& ns, RemoteNamespaceLimits limits) {
    MutexLock lock(&mu_);
    limits_[ns] = limits;
  }

  // Queues one block, or drops it (queue full; counted) or ignores it. A
  // victim (`evicted`) the cluster is known to hold is not written again.
  void Enqueue(const BlockMeta& meta, const SharedBytes& payload, bool evicted) {
    if (meta.namespace_id.IsZero()) return;  // raw values stay local
    MutexLock lock(&mu_);
    if (stopping_ || queued_keys_.count(meta.key) > 0) return;
    if (evicted && IsKnownPresent(meta)) {
      ++rewrites_skipped_;
      return;
    }
    if (queue_.size() >= options_.queue_blocks ||
        queued_bytes_ + payload.size() > options_.queue_bytes) {
      ++dropped_;
      return;
    }
    queued_bytes_ += payload.size();
    queued_keys_.insert(meta.key);
    queue_.push_back(Item{meta, payload, Pending()});
    work_cv_.NotifyOne();
  }

  // Waits for the work queued before the call only: stores that go on
  // meanwhile (faster than the cluster takes them) keep the queue from ever
  // emptying, and must not hold a Flush.
  void Flush() {
    MutexLock lock(&mu_);
    const uint64_t upto = next_seq_;
    idle_cv_.Wait(lock, [&]() REQUIRES(mu_) {
      return pending_.empty() || *pending_.begin() > upto;
    });
  }

  std::vector<std::optional<SharedBytes>> Fetch(std::span<const BlockKey> keys,
                                                std::vector<BlockMeta>* metas,
                                                bool count) {
    std::vector<std::optional<SharedBytes>> out(keys.size());
    if (metas != nullptr) metas->assign(keys.size(), BlockMeta{});
    if (keys.empty()) return out;
    std::vector<std::string> store_keys;
    store_keys.reserve(keys.size());
    for (const BlockKey& k : keys) store_keys.push_back(StoreKey(k));
    // Each value is checked as it arrives, while the next ones are in flight.
    std::vector<std::optional<StatusOr<RemoteTier::Decoded>>> decoded(keys.size());
    std::vector<std::optional<SharedBytes>> values;
    std::vector<bool> failed;  // each key's own: its master failed the read
    const uint64_t epoch = store_->FailureEpoch();  // what the read saw is of it
    const Status s = store_->MultiGetEach(
        store_keys, &values,
        [&](size_t i, const SharedBytes& value) {
          if (i < keys.size()) decoded[i] = RemoteTier::DecodeEnvelope(keys[i], value);
        },
        &failed);
    NoteCall(s);
    values.resize(keys.size());
    failed.resize(keys.size(), !s.ok());
    std::vector<std::string> damaged;
    std::vector<BlockMeta> present;
    std::vector<BlockKey> gone;  // read back absent or damaged
    uint64_t hits = 0, bytes = 0, corruptions = 0;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!values[i].has_value()) {
        // Absent, its master answered: not known present any more, though
        // another master failed the call (kept then, the local copy was
        // skipped when evicted for the rest of the window).
        if (!failed[i]) gone.push_back(keys[i]);
        continue;
      }
      if (!decoded[i].has_value()) {  // a store that did not report it
        decoded[i] = RemoteTier::DecodeEnvelope(keys[i], *values[i]);
      }
      StatusOr<RemoteTier::Decoded>& d = *decoded[i];
      if (!d.ok()) {
        gone.push_back(keys[i]);
        // A look that counts nothing (PeekMany: ExplainMiss) leaves the value
        // to the next counted read, which counts it once, as the miss each
        // corruption is, and deletes it; counted here, it was a corruption
        // no miss accounted for, and the diagnostic deleted it.
        if (!count) continue;
        ++corruptions;
        if (!logged_corruption_.exchange(true)) {
          Log("remote tier: " + d.status().ToString() + " for block " + keys[i].ToHex() +
              " (a miss; the value is deleted; logged once)");
        }
        damaged.push_back(store_keys[i]);
        continue;
      }
      ++hits;
      bytes += d->payload.size();
      present.push_back(d->meta);
      if (metas != nullptr) (*metas)[i] = d->meta;
      out[i] = std::move(d->payload);
    }
    if (count || !present.empty() || !gone.empty()) {
      MutexLock lock(&mu_);
      // The read's counts at once, under the lock Counters() copies them
      // under: one scrape sees all of them or none (no corruption without
      // its miss, no hit without its bytes).
      if (count) {
        reads_.hits += hits;
        reads_.misses += keys.size() - hits;
        reads_.corruptions += corruptions;
        reads_.bytes_read += bytes;
      }
      for (const BlockMeta& m : present) NoteKnownPresent(m, epoch);
      for (const BlockKey& k : gone) ForgetKnownPresent(k);
    }
    if (!damaged.empty()) QueueDeletes(std::move(damaged));
    return out;
  }

  void ReportDamaged(const BlockKey& key, uint64_t bytes, std::string_view why) {
    {
      MutexLock lock(&mu_);  // as Fetch counts, all at once
      --reads_.hits;         // counted by the read
      ++reads_.misses;
      reads_.bytes_read -= bytes;
      ++reads_.corruptions;
      ForgetKnownPresent(key);
    }
    if (!logged_corruption_.exchange(true)) {
      Log("remote tier: block " + key.ToHex() + " refused by its reader: " +
          std::string(why) + " (a miss; the value is deleted; logged once)");
    }
    QueueDeletes({StoreKey(key)});
  }

  RemoteCounters Counters() const {
    RemoteCounters c;
    c.errors = errors_.load(std::memory_order_relaxed);
    c.available = available_.load(std::memory_order_relaxed);
    MutexLock lock(&mu_);
    c.hits = reads_.hits;
    c.misses = reads_.misses;
    c.corruptions = reads_.corruptions;
    c.bytes_read = reads_.bytes_read;
    c.bytes_written = bytes_written_;
    c.writes = writes_;
    c.dropped = dropped_;
    c.write_failures = write_failures_;
    c.over_quota = over_quota_;
    c.rewrites_skipped = rewrites_skipped_;
    c.queued_blocks = queue_.size() + in_flight_;
    c.queued_bytes = queued_bytes_;
    return c;
  }

  // The first call's result decides availability before any traffic.
  void Probe() {
    std::vector<std::optional<SharedBytes>> values;
    const std::string probe = options_.key_prefix + "probe";
    const Status s = store_->MultiGet(std::span<const std::string>(&probe, 1), &values);
    if (s.ok()) return NoteCall(s);
    errors_.fetch_add(1, std::memory_order_relaxed);
    outage_logged_.store(true);
    Log("remote tier unavailable at open (" + s.ToString() + "; " + Describe() +
        "); its blocks are misses until it answers");
  }

 private:
  struct Item {
    BlockMeta meta;
    SharedBytes payload;
    uint64_t seq = 0;  // in pending_ until written or dropped
  };

  void Log(const std::string& line) const {
    if (options_.log) options_.log(line);
  }

  // Availability: an outage is logged when it starts and when it ends.
  void NoteCall(const Status& s) {
    if (s.ok()) {
      if (!available_.exchange(true) && outage_logged_.exchange(false)) {
        Log("remote tier available again: " + Describe());
      }
      return;
    }
    errors_.fetch_add(1, std::memory_order_relaxed);
    available_.store(false);
    if (!outage_logged_.exchange(true)) {
      Log("remote tier unavailable (" + s.ToString() +
          "); its blocks are misses until it answers again");
    }
  }

  // A write call where some masters failed their keys (down, or -OOM at
  // maxmemory) while the others wrote theirs: the cluster answers, so it is
  // no outage; the failed call is counted and its first cause logged once.
  void NotePartialWrite(const Status& s) {
    errors_.fetch_add(1, std::memory_order_relaxed);
    if (!logged_write_failure_.exchange(true)) {
      Log("remote tier: some writes failed (" + s.ToString() +
          "); only those blocks are lost, counted in write_failures (logged once)");
    }
  }

  RemoteNamespaceLimits LimitsFor(const BlockKey& ns) const REQUIRES(mu_) {
    auto it = limits_.find(ns);
    return it == limits_.end() ? options_.default_limits : it->second;
  }

  // A new piece of work (a block, or a batch of deletes) for Flush to wait
  // for: its sequence number, pending until Done.
  uint64_t Pending() REQUIRES(mu_) {
    pending_.insert(++next_seq_);
    return next_seq_;
  }
  void Done(uint64_t seq) REQUIRES(mu_) { pending_.erase(seq); }

  // Damaged values found by a read are deleted by the writers, not by the
  // read: a DEL is a write (write_timeout_ms), and a master that holds its
  // writes while it answers reads would hold the Match for it. At most
  // queue_blocks keys wait; one left out is found and queued again.
  void QueueDeletes(std::vector<std::string> keys) {
    MutexLock lock(&mu_);
    if (stopping_ || doomed_.size() >= options_.queue_blocks) return;
    for (std::string& key : keys) {
      if (doomed_.size() >= options_.queue_blocks) break;
      doomed_.push_back(std::move(key));
    }
    doomed_seqs_.push_back(Pending());
    work_cv_.NotifyOne();
  }

  void DropQueued() REQUIRES(mu_) {
    dropped_ += queue_.size();
    for (const Item& i : queue_) {
      queued_keys_.erase(i.meta.key);
      queued_bytes_ -= i.payload.size();
      Done(i.seq);
    }
    queue_.clear();
    doomed_.clear();
    for (uint64_t seq : doomed_seqs_) Done(seq);
    doomed_seqs_.clear();
    idle_cv_.NotifyAll();
  }

  void RunWriter() {
    MutexLock lock(&mu_);
    while (true) {
      work_cv_.Wait(lock, [&]() REQUIRES(mu_) {
        return stopping_ || !queue_.empty() || !doomed_.empty();
      });
      if (stopping_) {
        DropQueued();
        return;
      }
      if (!doomed_.empty()) {  // before the blocks: a rewrite then lands after it
        std::vector<std::string> keys;
        std::vector<uint64_t> seqs;
        keys.swap(doomed_);
        seqs.swap(doomed_seqs_);
        lock.Unlock();
        NoteCall(store_->Delete(keys));
        lock.Lock();
        for (uint64_t seq : seqs) Done(seq);
        idle_cv_.NotifyAll();
        continue;
      }
      std::vector<Item> batch;
      while (!queue_.empty() && batch.size() < options_.write_batch_blocks) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      in_flight_ += batch.size();
      std::unordered_map<BlockKey, RemoteNamespaceLimits, BlockKeyHash> limits;
      for (const Item& i : batch)
        limits.emplace(i.meta.namespace_id, LimitsFor(i.meta.namespace_id));
      lock.Unlock();
      const WriteResult r = WriteBatch(batch, limits);
      lock.Lock();
      for (const Item& i : batch) {
        queued_keys_.erase(i.meta.key);
        queued_bytes_ -= i.payload.size();
        Done(i.seq);
      }
      in_flight_ -= batch.size();
      // A failed write costs its block only (counted); the queue goes on.
      // An outage does not hold it up: the store fails a down master's keys
      // at once for down_backoff_ms, so Flush never waits one out.
      writes_ += r.written;
      bytes_written_ += r.bytes;
      write_failures_ += r.failed;
      over_quota_ += r.over_quota;
      for (const Item* i : r.written_items) NoteKnownPresent(i->meta, r.epoch);
      idle_cv_.NotifyAll();
    }
  }

  struct WriteResult {
    uint64_t written = 0, bytes = 0, failed = 0, over_quota = 0;
    uint64_t epoch = 0;                      // the store's FailureEpoch before the writes
    std::vector<const Item*> written_items;  // not those that failed
  };

  // Blocks the cluster was recently seen to hold (read back intact, or
  // written): a direct-mapped table of keys and times. A local victim found
  // here within the window is not written again: every node that restored a
  // chain would otherwise write it back when evicting it. A slot holds the
  // newest of the keys that map to it, so a forgotten key is only written
  // once more. The window is known_present_seconds, and at most half the
  // namespace's TTL when it has one (a GET does not extend an expiry). A
  // mark holds while the store's FailureEpoch is the one before its read or
  // write: a master that failed since may have come back empty (restarted
  // without persistence) or been replaced by a replica behind it, and its
  // blocks, kept marked, were skipped when evicted and missed by every node.
  struct Known {
    BlockKey key;
    uint64_t nanos = 0;
    uint64_t epoch = 0;
  };

  Known* KnownSlot(const BlockKey& key) REQUIRES(mu_) {
    if (known_.empty()) return nullptr;
    return &known_[BlockKeyHash()(key) & (known_.size() - 1)];
  }

  void NoteKnownPresent(const BlockMeta& meta, uint64_t epoch) REQUIRES(mu_) {
    if (Known* slot = KnownSlot(meta.key))
      *slot = Known{meta.key, options_.clock->NowNanos(), epoch};
  }

  // Seen without the block (absent, or damaged and deleted): it is not
  // known present, whatever this node wrote or read before, so a local copy
  // evicted later is written again. Left marked, the copy was skipped for the
  // rest of the window, and every node missed the block meanwhile.
  void ForgetKnownPresent(const BlockKey& key) REQUIRES(mu_) {
    if (Known* slot = KnownSlot(key); slot != nullptr && slot->key == key) {
      slot->nanos = 0;
    }
  }

  bool IsKnownPresent(const BlockMeta& meta) REQUIRES(mu_) {
    const Known* slot = KnownSlot(meta.key);
    if (slot == nullptr || slot->key != meta.key || slot->nanos == 0) return false;
    if (slot->epoch != store_->FailureEpoch()) return false;  // a master failed since
    uint64_t window = uint64_t{options_.known_present_seconds};
    const uint32_t ttl = LimitsFor(meta.namespace_id).ttl_seconds;
    if (ttl > 0) window = std::min<uint64_t>(window, ttl / 2);
    return options_.clock->NowNanos() - slot->nanos < window * 1000000000;
  }

  WriteResult WriteBatch(
      const std::vector<Item>& batch,
      const std::unordered_map<BlockKey, RemoteNamespaceLimits, BlockKeyHash>& limits) {
    WriteResult r;
    MakeOwedResets();  // first: a counter left below zero is room past the limit
    // Quotas: one counter per namespace and TTL window, charged per batch.
    // A namespace whose counter the cluster did not update (down, silent) is
    // not written either, but its blocks are failed writes, not over quota.
    // A batch over the limit writes the namespace's blocks that fit in the
    // room left, in queue order, and gives the rest of its charge back (with
    // the blocks the cluster fails below): left charged, one batch that did
    // not fit kept the counter past the limit, and every later block of the
    // namespace, on every node, was refused for the rest of the window even
    // where it fit; refused whole, a namespace whose batches each held more
    // than its limit (a chain of large blocks) never wrote anything.
    std::unordered_set<BlockKey, BlockKeyHash> unchecked;
    std::unordered_map<BlockKey, uint64_t, BlockKeyHash> room;  // limited ones
    std::unordered_map<BlockKey, uint64_t, BlockKeyHash> unwritten_per_ns;
    std::unordered_map<BlockKey, uint64_t, BlockKeyHash> bytes_per_ns;
    for (const Item& i : batch) bytes_per_ns[i.meta.namespace_id] += i.payload.size();
    for (const auto& [ns, bytes] : bytes_per_ns) {
      const RemoteNamespaceLimits& l = limits.at(ns);
      if (l.max_bytes == 0) continue;
      StatusOr<int64_t> total = Charge(ns, bytes, l.ttl_seconds);
      if (!total.ok()) {
        unchecked.insert(ns);
      } else {
        room[ns] = RoomBefore(*total, bytes, l.max_bytes);
      }
    }
    std::vector<RemoteWrite> writes;
    std::vector<const Item*> sent;  // the item of each write
    for (const Item& i : batch) {
      if (unchecked.count(i.meta.namespace_id) > 0) {
        ++r.failed;
        continue;
      }
      if (auto it = room.find(i.meta.namespace_id); it != room.end()) {
        if (i.payload.size() > it->second) {  // this one and the namespace's after it
          it->second = 0;
          ++r.over_quota;
          unwritten_per_ns[i.meta.namespace_id] += i.payload.size();
          continue;
        }
        it->second -= i.payload.size();
      }
      writes.push_back(RemoteWrite{StoreKey(i.meta.key),
                                   RemoteTier::EncodeEnvelope(i.meta, i.payload.view()),
                                   limits.at(i.meta.namespace_id).ttl_seconds});
      sent.push_back(&i);
    }
    if (writes.empty()) {
      RefundQuota(unwritten_per_ns, limits);
      return r;
    }
    std::vector<RemoteWriteResult> results;
    r.epoch = store_->FailureEpoch();
    const Status s = store_->MultiSetEach(writes, &results);
    // A store that left some out: they have the call's status, maybe stored.
    results.resize(writes.size(), RemoteWriteResult{s, !s.ok()});
    for (size_t k = 0; k < writes.size(); ++k) {
      if (!results[k].status.ok()) {
        ++r.failed;
        // A write whose reply was lost may be stored: its bytes stay charged
        // (given back, the namespace could hold more than its limit), and it
        // is not taken for present either.
        if (!results[k].maybe_stored) {
          unwritten_per_ns[sent[k]->meta.namespace_id] += sent[k]->payload.size();
        }
        continue;
      }
      ++r.written;
      r.bytes += sent[k]->payload.size();
      r.written_items.push_back(sent[k]);
    }
    if (s.ok() || r.written == 0) {
      NoteCall(s);
    } else {
      NotePartialWrite(s);
    }
    RefundQuota(unwritten_per_ns, limits);
    return r;
  }

  // Charges `bytes` to the quota counter of `ns`: its total after the charge.
  // A counter the cluster lost inside the window this node saw (evicted,
  // flushed, a master restarted empty: QuotaWindows) is given back the total
  // seen and that window's end, and the total is then the one it answers:
  // taken as it came, a new counter at zero let the namespace write its limit
  // again within the window it had used up. A put-back the cluster fails
  // counts the total seen here, and is tried again at the next charge.
  StatusOr<int64_t> Charge(const BlockKey& ns, uint64_t bytes, uint32_t ttl_seconds) {
    const std::string key = options_.key_prefix + "quota:" + ns.ToHex();
    StatusOr<QuotaWindows::Answer> charged = AddToQuota(key, bytes, ttl_seconds, 0);
    if (!charged.ok()) return charged.status();
    std::optional<QuotaWindows::Seen> lost;
    {
      MutexLock lock(&mu_);
      lost = quota_windows_.Lost(ns, *charged);
      if (!lost) quota_windows_.Saw(ns, *charged);
    }
    if (!lost) return charged->total;
    if (!logged_lost_quota_.exchange(true)) {
      Log("remote tier: the quota counter " + key +
          " was lost inside its window (evicted or flushed); its bytes are put back "
          "(logged once; docs/remote.md, Sizing)");
    }
    const uint64_t within_ms =
        std::max<uint64_t>(1, (lost->earliest_end - charged->end_nanos) / 1000000);
    StatusOr<QuotaWindows::Answer> back = AddToQuota(key, lost->total, 0, within_ms);
    if (!back.ok()) return charged->total + lost->total;
    MutexLock lock(&mu_);
    quota_windows_.Saw(ns, *back);
    return back->total;
  }

  // IncrByWindow on the quota counter `key`, timed by the tier's clock.
  StatusOr<QuotaWindows::Answer> AddToQuota(const std::string& key, uint64_t bytes,
                                            uint32_t ttl_seconds, uint64_t within_ms) {
    QuotaWindows::Answer a;
    a.start_nanos = options_.clock->NowNanos();
    StatusOr<CounterWindow> w =
        store_->IncrByWindow(key, static_cast<int64_t>(bytes), ttl_seconds, within_ms);
    NoteCall(w.status());
    if (!w.ok()) return w.status();
    a.end_nanos = options_.clock->NowNanos();
    a.total = w->total;
    a.ttl_ms = w->ttl_ms;
    return a;
  }

  // The room a namespace had under `max_bytes` before a charge of `charged`
  // bytes brought its quota counter to `total`. Signed: a counter below zero
  // (a refund that found it expired, before its fix-up back to zero) is an
  // empty window, all of `max_bytes` (read as unsigned it was huge, and the
  // batch that fit was refused); never more, so no batch writes past the
  // limit in one window.
  static uint64_t RoomBefore(int64_t total, uint64_t charged, uint64_t max_bytes) {
    int64_t before;
    if (__builtin_sub_overflow(total, static_cast<int64_t>(charged), &before) ||
        before <= 0) {
      return max_bytes;
    }
    const uint64_t used = static_cast<uint64_t>(before);
    return used >= max_bytes ? 0 : max_bytes - used;
  }

  // Gives back to each namespace's quota counter the bytes charged for blocks
  // not written (over the limit, or failed by the cluster): they take no room
  // there, and left charged, a master at maxmemory or down for a while used a
  // namespace's whole window up with nothing written (its later blocks over
  // quota). A
  // refund landing after the counter expired would start the next window
  // below zero (more than the limit written in it): that counter is set
  // back to zero. A refund the cluster refuses is lost (the quota errs
  // low, as before). The refund is a bare INCRBY (no TTL): with one, the
  // store's EXPIRE after it could fail once the INCRBY had created the
  // counter below zero, and the failed call hid the total, so the reset was
  // skipped and the next window had room past the limit. The reset gives
  // the counter its expiry; one that exists kept the expiry of the charge.
  void RefundQuota(
      const std::unordered_map<BlockKey, uint64_t, BlockKeyHash>& unwritten_per_ns,
      const std::unordered_map<BlockKey, RemoteNamespaceLimits, BlockKeyHash>& limits) {
    for (const auto& [ns, bytes] : unwritten_per_ns) {
      const RemoteNamespaceLimits& l = limits.at(ns);
      if (l.max_bytes == 0) continue;  // charged nothing
      const std::string key = options_.key_prefix + "quota:" + ns.ToHex();
      StatusOr<int64_t> total =
          store_->IncrBy(key, -static_cast<int64_t>(bytes), /*ttl_seconds=*/0);
      NoteCall(total.status());
      if (!total.ok()) continue;
      {
        MutexLock lock(&mu_);
        quota_windows_.Refunded(ns, *total, bytes);
      }
      if (*total < 0) ResetQuotaCounter(ns, -*total, l.ttl_seconds);
    }
  }

  // Sets a quota counter a refund left `below` zero back to zero, with its
  // expiry. A reset the cluster fails is owed, and made before the next
  // batch's charges (MakeOwedResets): dropped, the counter stayed below
  // zero and the namespace's next window let it write past its limit by
  // that much. (A reset whose reply was lost may so be made twice, or one
  // made after the counter expired again lands in the next window: the
  // quota then errs low, never past the limit.)
  void ResetQuotaCounter(const BlockKey& ns, int64_t below, uint32_t ttl_seconds) {
    const std::string key = options_.key_prefix + "quota:" + ns.ToHex();
    if (store_->IncrBy(key, below, ttl_seconds).ok()) return;
    MutexLock lock(&mu_);
    OwedReset& owed = owed_resets_[ns];
    owed.bytes += below;
    owed.ttl_seconds = ttl_seconds;
  }

  void MakeOwedResets() {
    std::unordered_map<BlockKey, OwedReset, BlockKeyHash> owed;
    {
      MutexLock lock(&mu_);
      owed.swap(owed_resets_);
    }
    for (const auto& [ns, reset] : owed)
      ResetQuotaCounter(ns, reset.bytes, reset.ttl_seconds);
  }

  const std::unique_ptr<RemoteStore> store_;
  RemoteTierOptions options_;
  std::vector<std::thread> writers_;

  std::atomic<uint64_t> errors_{0};
  std::atomic<bool> available_{false};
  std::atomic<bool> outage_logged_{false};
  std::atomic<bool> logged_corruption_{false};
  std::atomic<bool> logged_write_failure_{false};
  std::atomic<bool> logged_lost_quota_{false};

  mutable Mutex mu_;
  CondVar work_cv_;
  CondVar idle_cv_;
  bool stopping_ GUARDED_BY(mu_) = false;
  std::deque<Item> queue_ GUARDED_BY(mu_);
  std::unordered_set<BlockKey, BlockKeyHash> queued_keys_ GUARDED_BY(mu_);
  uint64_t queued_bytes_ GUARDED_BY(mu_) = 0;
  uint64_t in_flight_ GUARDED_BY(mu_) = 0;
  std::vector<std::string> doomed_ GUARDED_BY(mu_);    // damaged values to delete
  std::vector<uint64_t> doomed_seqs_ GUARDED_BY(mu_);  // their batches' seqs
  // Work queued and not yet done (blocks, delete batches), by sequence
  // number: Flush waits until none up to its own call's is left.
  uint64_t next_seq_ GUARDED_BY(mu_) = 0;
  std::set<uint64_t> pending_ GUARDED_BY(mu_);
  // What the reads counted, added under mu_ a read at a time (Fetch,
  // ReportDamaged): read one by one as they changed, a scrape could show a
  // corruption without its miss, or a refused hit's bytes still read.
  struct ReadCounts {
    uint64_t hits = 0, misses = 0, corruptions = 0, bytes_read = 0;
  };
  ReadCounts reads_ GUARDED_BY(mu_);
  uint64_t writes_ GUARDED_BY(mu_) = 0;
  uint64_t bytes_written_ GUARDED_BY(mu_) = 0;
  uint64_t dropped_ GUARDED_BY(mu_) = 0;
  uint64_t write_failures_ GUARDED_BY(mu_) = 0;
  uint64_t over_quota_ GUARDED_BY(mu_) = 0;
  uint64_t rewrites_skipped_ GUARDED_BY(mu_) = 0;
  std::vector<Known> known_ GUARDED_BY(mu_);  // a power of two, or empty
  std::unordered_map<BlockKey, RemoteNamespaceLimits, BlockKeyHash> limits_
      GUARDED_BY(mu_);
  // Quota counters left below zero whose reset failed (ResetQuotaCounter).
  struct OwedReset {
    int64_t bytes = 0;
    uint32_t ttl_seconds = 0;
  };
  std::unordered_map<BlockKey, OwedReset, BlockKeyHash> owed_resets_ GUARDED_BY(mu_);
  QuotaWindows quota_windows_ GUARDED_BY(mu_);  // the counters' windows seen
};

}  // namespace internal

std::unique_ptr<RemoteTier> RemoteTier::Open(std::unique_ptr<RemoteStore> store,
                                             RemoteTierOptions options) {
  auto impl =
      std::make_unique<internal::RemoteTierImpl>(std::move(store), std::move(options));
  impl->Probe();
  return std::unique_ptr<RemoteTier>(new RemoteTier(std::move(impl)));
}

RemoteTier::RemoteTier(std::unique_ptr<internal::RemoteTierImpl> impl)
    : impl_(std::move(impl)) {}
RemoteTier::~RemoteTier() = default;

const RemoteTierOptions& RemoteTier::options() const { return impl_->options(); }
std::string RemoteTier::Describe() const { return impl_->Describe(); }
std::string RemoteTier::StoreKey(const BlockKey& key) const {
  return impl_->StoreKey(key);
}

void RemoteTier::SetNamespaceLimits(const BlockKey& namespace_id,
                                    RemoteNamespaceLimits limits) {
  impl_->SetLimits(namespace_id, limits);
}

std::vector<std::optional<SharedBytes>> RemoteTier::GetMany(
    std::span<const BlockKey> keys) {
  return impl_->Fetch(keys, nullptr, /*count=*/true);
}

std::vector<std::optional<SharedBytes>> RemoteTier::PeekMany(
    std::span<const BlockKey> keys) const {
  return impl_->Fetch(keys, nullptr, /*count=*/false);
}

void RemoteTier::Flush() { impl_->Flush(); }
RemoteCounters RemoteTier::Counters() const { return impl_->Counters(); }

Status RemoteTier::Put(const BlockMeta& meta, SharedBytes payload, bool /*dirty*/) {
  impl_->Enqueue(meta, payload, /*evicted=*/false);
  return Status::OK();
}

void RemoteTier::OnEvict(const BlockMeta& meta, const SharedBytes& payload,
                         bool /*dirty*/) {
  impl_->Enqueue(meta, payload, /*evicted=*/true);
}

StatusOr<SharedBytes> RemoteTier::Get(const BlockKey& key) {
  std::vector<std::optional<SharedBytes>> got =
      impl_->Fetch(std::span<const BlockKey>(&key, 1), nullptr, /*count=*/true);
  if (!got[0].has_value())
    return Status::NotFound("no block " + key.ToHex() + " remotely");
  return std::move(*got[0]);
}

StatusOr<BlockMeta> RemoteTier::Peek(const BlockKey& key) const {
  std::vector<BlockMeta> metas;
  std::vector<std::optional<SharedBytes>> got =
      impl_->Fetch(std::span<const BlockKey>(&key, 1), &metas, /*count=*/false);
  if (!got[0].has_value())
    return Status::NotFound("no block " + key.ToHex() + " remotely");
  return metas[0];
}

bool RemoteTier::Contains(const BlockKey& key) const { return Peek(key).ok(); }

Status RemoteTier::Remove(const BlockKey& key) {
  return Status::NotFound("the remote tier removes nothing (block " + key.ToHex() + ")");
}

TierCounters RemoteTier::Totals() const {
  const RemoteCounters r = Counters();
  TierCounters t;
  t.hits = r.hits;
  t.misses = r.misses;
  t.inserts = r.writes;
  t.corruptions = r.corruptions;
  t.io_errors = r.errors;
  return t;
}

TierCounters RemoteTier::OwnerCounters(OwnerId /*owner*/) const { return TierCounters{}; }

Status RemoteTier::Audit(std::vector<AuditFinding>* /*findings*/) { return Status::OK(); }

void RemoteTier::ForEach(
    const std::function<void(const BlockMeta&, uint64_t bytes)>& /*fn*/) const {}

void RemoteTier::SetEvictionListener(EvictionListener* /*listener*/) {}

void RemoteTier::ReportDamaged(const BlockKey& key, uint64_t bytes,
                               std::string_view why) {
  impl_->ReportDamaged(key, bytes, why);
}

}  // namespace prefixkv
