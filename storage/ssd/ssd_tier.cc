// SsdTier: the public API and the block read/write paths (see ssd_tier.h and
// ssd_tier_impl.h for the locking rules).
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <cstdio>
#include <unordered_map>

#include "ssd_layout.h"
#include "ssd_tier_impl.h"

namespace prefixkv {

using ssd::IndexEntry;

// ---- public API: thin delegation -------------------------------------------

SsdTier::SsdTier(std::unique_ptr<ssd::TierImpl> impl) : impl_(std::move(impl)) {}
SsdTier::~SsdTier() { (void)Close(); }

Status SsdTier::Put(const BlockMeta& meta, SharedBytes payload, bool dirty) {
  return impl_->Put(impl_->Stored(meta), payload, dirty);
}
StatusOr<SharedBytes> SsdTier::Get(const BlockKey& key) { return impl_->Get(key); }
StatusOr<SharedBytes> SsdTier::GetForAudit(const BlockKey& key) {
  return impl_->Get(key, /*touch=*/false);
}
StatusOr<SharedBytes> SsdTier::PeekIntact(const BlockKey& key) {
  return impl_->PeekIntact(key);
}
StatusOr<BlockMeta> SsdTier::Peek(const BlockKey& key) const {
  PKV_ASSIGN_OR_RETURN(BlockMeta meta, impl_->Peek(key));
  return impl_->Run(meta);
}
bool SsdTier::Contains(const BlockKey& key) const { return impl_->Peek(key).ok(); }
Status SsdTier::Remove(const BlockKey& key) { return impl_->Remove(key); }
TierCounters SsdTier::Totals() const { return impl_->Totals(); }
TierCounters SsdTier::Totals(OwnerId owners, std::vector<TierCounters>* counters) const {
  return impl_->Totals(owners, counters);
}
TierCounters SsdTier::OwnerCounters(OwnerId owner) const {
  return impl_->OwnerCounters(owner);
}
Status SsdTier::Audit(std::vector<AuditFinding>* findings) {
  return impl_->Audit(findings);
}
std::vector<BlockKey> SsdTier::FindOrphans() const { return impl_->FindOrphans(); }
bool SsdTier::HasStoredChildren(const BlockKey& key) const {
  return impl_->HasStoredChildren(key);
}
void SsdTier::ForEach(const std::function<void(const BlockMeta&, uint64_t)>& fn) const {
  impl_->ForEach(fn);
}
void SsdTier::SetEvictionListener(EvictionListener* l) { impl_->SetEvictionListener(l); }
void SsdTier::ForEachIncludingQueued(
    const std::function<void(const BlockMeta&, uint64_t)>& fn) const {
  impl_->ForEachIncludingQueued(fn);
}
void SsdTier::OnEvict(const BlockMeta& meta, const SharedBytes& payload, bool dirty) {
  if (dirty) impl_->OnEvict(impl_->Stored(meta), payload);
}
Status SsdTier::BindOwner(OwnerId owner, const std::string& name,
                          std::optional<BlockKey> namespace_id) {
  return impl_->BindOwner(owner, name, namespace_id);
}
Status SsdTier::Flush() { return impl_->Flush(); }
Status SsdTier::WriteBackStatus() const { return impl_->WriteBackStatus(); }
Status SsdTier::Close() { return impl_->Close(); }
void SsdTier::NoteBlocksLostAtStop() { impl_->NoteBlocksLostAtStop(); }
void SsdTier::BeginStop() { impl_->BeginStop(); }
Status SsdTier::Compact() { return impl_->Compact(); }
SsdSpaceUsage SsdTier::SpaceUsage() const { return impl_->SpaceUsage(); }
StatusOr<uint64_t> SsdTier::PurgeNamespace(const BlockKey& ns) {
  return impl_->PurgeNamespace(ns);
}
std::vector<SsdNamespaceUsage> SsdTier::Namespaces() const { return impl_->Namespaces(); }
Status SsdTier::PutManifest(const BlockKey& ns, std::string_view manifest) {
  return impl_->PutManifest(ns, manifest);
}
StatusOr<std::vector<std::pair<BlockKey, std::string>>> SsdTier::Manifests() const {
  return impl_->Manifests();
}
StatusOr<bool> SsdTier::HasFlag(std::string_view name) const {
  return impl_->HasFlag(name);
}
Status SsdTier::SetFlag(std::string_view name) { return impl_->SetFlag(name); }
StatusOr<std::vector<SsdRemoval>> SsdTier::Removals() const { return impl_->Removals(); }
uint32_t SsdTier::removal_history_entries() const {
  return impl_->removal_history_entries();
}
const SsdOpenReport& SsdTier::open_report() const { return impl_->report(); }
uint64_t SsdTier::queued_blocks() const { return impl_->queued_blocks(); }
ReadAheadResult SsdTier::ReadAhead(const BlockKey& key) {
  return impl_->StartReadAhead(key);
}
void SsdTier::CancelReadAhead(const BlockKey& key) { impl_->CancelReadAhead(key); }
SsdReadAheadStats SsdTier::ReadAheadStats() const { return impl_->ReadAheadStats(); }
SsdWriteBackState SsdTier::WriteBackState() const { return impl_->WriteBackState(); }

std::unique_ptr<SsdTier> ssd::Access::Wrap(std::unique_ptr<ssd::TierImpl> impl) {
  return std::unique_ptr<SsdTier>(new SsdTier(std::move(impl)));
}
ssd::TierImpl& ssd::Access::ImplOf(SsdTier& tier) { return *tier.impl_; }

// ---- helpers ------------------------------------------------------------------

Status FromRocks(const rocksdb::Status& s, std::string_view context) {
  std::string m = std::string(context) + ": " + s.ToString();
  if (s.ok()) return Status::OK();
  if (s.IsNoSpace()) return Status::NoSpace(std::move(m));
  if (s.IsCorruption()) return Status::Corruption(std::move(m));
  if (s.IsNotFound()) return Status::NotFound(std::move(m));
  if (s.IsBusy() || s.IsTryAgain()) return Status::Busy(std::move(m));
  return Status::IOError(std::move(m));
}

Mutex& ssd::TierImpl::Stripe(const BlockKey& key) {
  return stripes_[BlockKeyHash()(key) % kStripes];
}

ssd::TierImpl::BlockLock::BlockLock(ssd::TierImpl* impl, const BlockKey& key)
    : pause_(&impl->pause_), stripe_(&impl->Stripe(key)) {
  pause_->LockShared();
  stripe_->Lock();
}

ssd::TierImpl::BlockLock::~BlockLock() {
  stripe_->Unlock();
  pause_->UnlockShared();
}

ssd::TierImpl::BatchLock::BatchLock(ssd::TierImpl* impl,
                                    const std::vector<BlockKey>& keys)
    : pause_(&impl->pause_) {
  // Ascending stripe order: two batches can never wait for each other.
  std::vector<size_t> ids;
  for (const BlockKey& k : keys) ids.push_back(BlockKeyHash()(k) % kStripes);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  pause_->LockShared();
  for (size_t id : ids) {
    stripes_.push_back(&impl->stripes_[id]);
    stripes_.back()->Lock();
  }
}

ssd::TierImpl::BatchLock::~BatchLock() {
  for (auto it = stripes_.rbegin(); it != stripes_.rend(); ++it) (*it)->Unlock();
  pause_->UnlockShared();
}

void ssd::TierImpl::Log(const std::string& line) const {
  if (options_.log) {
    options_.log(line);
  } else {
    std::fprintf(stderr, "prefixkv ssd: %s\n", line.c_str());
  }
}

void ssd::TierImpl::CountEvent(OwnerId owner, uint64_t TierCounters::*field) {
  MutexLock lock(&mu_);
  index_.Owner(owner).*field += 1;
  unpersisted_[owner].*field += 1;
}

void ssd::TierImpl::CountIoError(OwnerId owner) {
  MutexLock lock(&mu_);
  index_.Owner(owner).io_errors += 1;
  unpersisted_[owner].io_errors += 1;
}

void ssd::TierImpl::NoteWriteResult(const Status& s, bool payload) {
  // Payload (segment) and metadata (database) writes fail independently (a
  // read-only segments/ directory, a database error): one kind succeeding
  // says nothing about the other.
  std::atomic<bool>& failing = payload ? payload_failing_ : failing_;
  const std::string what = payload ? "segment I/O" : "metadata write";
  if (s.ok()) {
    if (failing.exchange(false)) Log(what + " succeeds again");
  } else if (!failing.exchange(true)) {
    Log(what + " failed (further failures are counted in io_errors, not logged): " +
        s.ToString());
  }
}

rocksdb::Status ssd::TierImpl::DbWrite(const rocksdb::WriteOptions& o,
                                       rocksdb::WriteBatch* batch) {
  return db_->Write(o, batch);
}

void ssd::TierImpl::FinishRemovals(bool committed) {
  ConfirmRemovals(committed);  // the removals this commit made, if it made them
  // A confirm record lost with the journal just now: the commit is in the
  // memtable alone (logged from the next one on).
  if (committed) (void)CoverALostJournal();
}

Status ssd::TierImpl::Commit(rocksdb::WriteBatch* batch, Deltas deltas, OwnerId owner,
                             bool relaxed, bool confirm_later) {
  if (options_.read_only) {
    return Status::NotSupported("ssd tier: " + options_.path + " is opened read-only");
  }
  Deltas events;
  {
    MutexLock lock(&mu_);
    events.swap(unpersisted_);
  }
  for (const auto& [o, d] : events) ssd::AddCounters(&deltas[o], d);
  for (const auto& [o, d] : deltas) {
    if (!ssd::IsZero(d)) batch->Merge(ssd::CounterKey(o), ssd::EncodeCounters(d));
  }
  // A RocksDB background error stops writes until Resume(); retry it paced.
  // Not after a failed log write: RocksDB 7.8 would append to the failed log
  // writer again, and abort.
  uint64_t now = options_.clock->NowNanos();
  if (failing_ && !log_broken_ &&
      now - last_resume_nanos_ >= options_.retry_interval_ms * 1000000) {
    last_resume_nanos_ = now;
    (void)db_->Resume();
  }
  Status s = commit_hook_ ? commit_hook_() : Status::OK();
  if (s.ok()) s = SyncJournalBeforeCommit();
  // Before the write: a removal whose record the journal lost (this
  // commit's own, as a rule) is then in the log or a table, never in the
  // memtable alone.
  if (s.ok()) s = CoverALostJournal();
  if (s.ok() && log_broken_) {
    s = Status::IOError(
        "ssd tier: the metadata log could not be written; no metadata write is "
        "possible until the tier is reopened (restart)");
  } else if (s.ok()) {
    const rocksdb::WriteOptions& used = relaxed                  ? relaxed_options_
                                        : FlushModeJournalLost() ? logged_options_
                                                                 : write_options_;
    const rocksdb::Status rs = DbWrite(used, batch);
    // The log's file is named *.log (RocksDB puts the path in the message).
    if (!rs.ok() && !used.disableWAL && rs.ToString().find(".log") != std::string::npos &&
        !log_broken_.exchange(true)) {
      Log("metadata log write failed (" + rs.ToString() +
          "): no metadata write until the tier is reopened");
    }
    s = FromRocks(rs, "write");
  }
  NoteWriteResult(s);
  if (s.ok() && committed_hook_) committed_hook_();
  if (!confirm_later) FinishRemovals(s.ok());
  if (!s.ok()) {
    NoteNoSpace(s);  // the reserve gives the database room to resume
    MutexLock lock(&mu_);
    for (const auto& [o, d] : events) ssd::AddCounters(&unpersisted_[o], d);
    index_.Owner(owner).io_errors += 1;
    unpersisted_[owner].io_errors += 1;
  }
  return s;
}

bool ssd::TierImpl::FlushModeJournalLost() const {
  return write_options_.disableWAL && journal_ != nullptr && journal_->broken();
}

Status ssd::TierImpl::CoverALostJournal() {
  if (lost_journal_covered_.load(std::memory_order_acquire) || !FlushModeJournalLost()) {
    return Status::OK();
  }
  // (Until 2026-12-07 nothing was done: after a kill -9 the open regenerated
  // the journal from the table's older metadata, a removal acknowledged
  // since came back and a store acknowledged since was lost;
  // SsdFaultTest.AFlushModeKillAfterAJournalFailureKeepsEveryAcknowledgedChange.)
  Log("removal journal lost in flush mode: the memtable is flushed and later "
      "metadata commits are written to the log");
  rocksdb::FlushOptions fo;
  fo.wait = true;
  PKV_RETURN_IF_ERROR(FromRocks(db_->Flush(fo), "flush after the journal was lost"));
  lost_journal_covered_.store(true, std::memory_order_release);
  return Status::OK();
}

void ssd::TierImpl::AddDeletes(rocksdb::WriteBatch* batch, const BlockKey& key,
                               const IndexEntry& e) {
  // The payload's extent becomes garbage in its segment (ssd_reclaim.cc);
  // journaled first, so a metadata rebuild never brings it back.
  JournalRemoval(key, e.checksum, e.segment, e.offset);
  batch->Delete(ssd::BlockRecordKey(ssd::kMetaTag, e.namespace_id, key));
}

Status ssd::TierImpl::DropEntry(const BlockKey& key, const IndexEntry& e,
                                const TierCounters& events, bool erase_on_failure) {
  rocksdb::WriteBatch batch;
  AddDeletes(&batch, key, e);  // the journal append comes before the commit
  AddRemovalRecord(&batch, key, e.namespace_id, events);
  Deltas deltas;
  TierCounters& delta = deltas[e.owner];
  delta = events;
  delta.entries -= 1;  // wraps: a delta subtracts (ssd_layout.h)
  delta.bytes -= e.bytes;
  Status s = Commit(&batch, std::move(deltas), e.owner);
  if (!s.ok() && !erase_on_failure) return s;
  if (!s.ok() && journal_ != nullptr) {
    // Dropped all the same (damaged bytes): confirmed as if the commit had
    // succeeded, so the next open finishes the removal (ssd_journal.h).
    (void)journal_->AppendConfirm(key, e.checksum, e.segment, e.offset);
  }
  {
    MutexLock lock(&mu_);
    index_.Erase(key);
    EmitRemoved(key, e, events);
    ssd::AddCounters(&index_.Owner(e.owner), events);
    // Keep the persisted counters right at the next successful write.
    if (!s.ok()) ssd::AddCounters(&unpersisted_[e.owner], events);
  }
  WakeReclaimer();  // the block's extent is garbage now
  return s;
}

// ---- write path -------------------------------------------------------------------

Status ssd::TierImpl::Put(const BlockMeta& meta, const SharedBytes& payload, bool dirty) {
  if (payload.size() > options_.capacity_bytes) {
    return Status::NoSpace("payload of " + std::to_string(payload.size()) +
                           " bytes exceeds the SSD tier capacity");
  }
  // This Put supersedes a queued version, but only once it is stored: a
  // failed Put must not lose an acknowledged block that lives only in the
  // queue (it did until 2026-12-06,
  // SsdFaultTest.AFailedPutKeepsTheQueuedWriteBackOfItsKey). Until then the
  // queued version stays findable, writers kept off it: dropped first, the
  // key was in neither the queue nor the index while the Put wrote
  // (SsdFaultTest.AQueuedVersionStaysFindableWhileAPutSupersedesIt).
  const uint64_t held = queue_->Hold(meta.key);
  Status s = Store({{meta, payload}}, dirty);
  queue_->Release(meta.key, held, /*superseded=*/s.ok());
  PKV_RETURN_IF_ERROR(s);
  EnforceCapacity();
  ThrottleWrites();  // after the evictions, whose garbage counts too
  return Status::OK();
}

// A store is five steps: the payloads go to a segment first (AppendPayloads),
// then, under the blocks' stripes, each block gets its access sequence and
// reuse count (AssignSequences), the metadata and counters are committed as
// one RocksDB batch (BatchStoredMeta, Commit), the committed blocks enter the
// index (IndexStored), and the journal learns whether the extents are
// referenced (JournalStoreOutcome). A crash between any two steps leaves
// extents nothing points at (garbage), never metadata without its bytes.
Status ssd::TierImpl::Store(const std::vector<ssd::WriteBackItem>& items, bool dirty) {
  if (Status space = CheckDiskSpace(); !space.ok()) {  // a full disk: refused, no I/O
    CountIoError(items.front().meta.owner);
    return space;
  }
  std::vector<ssd::StoredMeta> stored;
  std::vector<ssd::ExtentLocation> locations;
  PKV_RETURN_IF_ERROR(AppendPayloads(items, dirty, &stored, &locations));
  {
    std::vector<ssd::JournalRecord> written;
    for (size_t i = 0; i < items.size(); ++i) {
      written.push_back({items[i].meta.key, stored[i].payload_xxh3, stored[i].segment,
                         stored[i].offset});
    }
    JournalNewExtents(std::move(written));  // crash garbage unless committed
  }
  std::vector<BlockKey> keys;
  for (const auto& item : items) keys.push_back(item.meta.key);
  Status s;
  bool replaced = false;
  {
    BatchLock batch_lock(this, keys);
    std::vector<std::optional<IndexEntry>> old(items.size());
    {
      MutexLock lock(&mu_);
      replaced = AssignSequences(items, &stored, &old);
    }
    rocksdb::WriteBatch batch;
    Deltas deltas;
    BatchStoredMeta(items, stored, old, &batch, &deltas);
    s = Commit(&batch, std::move(deltas), items.front().meta.owner, /*relaxed=*/false,
               /*confirm_later=*/true);
    {
      MutexLock lock(&mu_);
      IndexStored(items, stored, old, dirty, s.ok());
    }
    // Under the blocks' locks: a Remove of one of them journals its removal
    // after this commit record, never before (JournalContents::Excludes).
    JournalStoreOutcome(items, stored, s.ok());
    // The replaced versions' removals are confirmed after the new versions'
    // commit records. Confirmed before them, a kill -9 in between (in flush
    // mode, the commit lost with the memtable) left a confirmed removal and
    // a new version no record named committed, and the roll-forward
    // restored neither (JournalContents::WithoutUncommittedRemovals).
    FinishRemovals(s.ok());
  }
  // After the index update: a reclaim pass that sees the segment no longer
  // pending also sees the new references.
  store_->EndPending(locations.front().segment);
  if (replaced || !s.ok()) WakeReclaimer();  // garbage left behind
  if (s.ok()) PaceMemtableFlush(items);
  return s;
}

Status ssd::TierImpl::AppendPayloads(const std::vector<ssd::WriteBackItem>& items,
                                     bool dirty, std::vector<ssd::StoredMeta>* stored,
                                     std::vector<ssd::ExtentLocation>* locations) {
  std::vector<ssd::ExtentSpec> extents;
  for (const auto& [meta, payload] : items) {
    // The checksum comes from the append, which hashes while it copies.
    stored->push_back({meta.owner, meta.parent, payload.size(), 0, 0, dirty});
    extents.push_back({meta.namespace_id, meta.key, &payload, std::nullopt});
  }
  {
    // Parents stay unevictable from here until the commit is over.
    MutexLock lock(&mu_);
    for (const auto& item : items) index_.BeginPendingChild(item.meta.parent);
  }
  // The payload bytes, before any metadata can point at them: one aligned
  // write to this thread's active segment (plus fdatasync in sync mode). No
  // block lock is held, so writers of different batches write in parallel.
  Status written =
      store_->Append(extents, options_.durability == SsdDurability::kSync, locations);
  NoteWriteResult(written, /*payload=*/true);
  if (!written.ok()) {
    {
      MutexLock lock(&mu_);
      for (const auto& item : items) index_.EndPendingChild(item.meta.parent);
    }
    NoteNoSpace(written);
    CountIoError(items.front().meta.owner);
    return written;
  }
  for (size_t i = 0; i < items.size(); ++i) {
    (*stored)[i].segment = (*locations)[i].segment;
    (*stored)[i].offset = (*locations)[i].offset;
    (*stored)[i].payload_xxh3 = (*locations)[i].checksum;
  }
  return Status::OK();
}

bool ssd::TierImpl::AssignSequences(const std::vector<ssd::WriteBackItem>& items,
                                    std::vector<ssd::StoredMeta>* stored,
                                    std::vector<std::optional<IndexEntry>>* old) {
  bool replaced = false;
  // Reuse counts given earlier in this batch, for a child in the same batch.
  std::unordered_map<BlockKey, uint32_t, BlockKeyHash> batch_hits;
  for (size_t i = 0; i < items.size(); ++i) {
    uint32_t hits = 0;
    if (const IndexEntry* e = index_.Find(items[i].meta.key)) {
      (*old)[i] = *e;
      replaced = true;
      hits = e->chain_hits;
    }
    (*stored)[i].access_seq = ++next_seq_;
    // The reuse count SsdIndex::Insert will give it (the most of its old one
    // and its parent's, the parent possibly earlier in this batch), persisted
    // with the record.
    if (const IndexEntry* p = index_.Find(items[i].meta.parent)) {
      hits = std::max(hits, p->chain_hits);
    }
    if (auto in_batch = batch_hits.find(items[i].meta.parent);
        in_batch != batch_hits.end()) {
      hits = std::max(hits, in_batch->second);
    }
    if (items.size() > 1) batch_hits[items[i].meta.key] = hits;
    (*stored)[i].chain_hits = ssd::PersistedChainHits(hits);
  }
  return replaced;
}

void ssd::TierImpl::BatchStoredMeta(const std::vector<ssd::WriteBackItem>& items,
                                    const std::vector<ssd::StoredMeta>& stored,
                                    const std::vector<std::optional<IndexEntry>>& old,
                                    rocksdb::WriteBatch* batch, Deltas* deltas) {
  for (size_t i = 0; i < items.size(); ++i) {
    const BlockMeta& meta = items[i].meta;
    if (old[i] && old[i]->namespace_id != meta.namespace_id) {
      AddDeletes(batch, meta.key, *old[i]);
    }
    batch->Put(ssd::BlockRecordKey(ssd::kMetaTag, meta.namespace_id, meta.key),
               ssd::EncodeMeta(stored[i]));
    if (old[i]) {
      // The replaced extent is garbage now. Other bytes: their removal
      // (excluding every extent of the key with them from a rebuild,
      // ssd_journal.h). The same bytes (an idempotent SET, a block stored
      // again): this extent only, as a removal of the bytes would exclude
      // the new version too. (Until 2026-12-06 nothing was journaled then,
      // and once the removal that excluded the garbage copy by its bytes
      // was dropped with its segment, a rebuild brought a removed block
      // back from it.)
      JournalRemoval(meta.key, old[i]->checksum, old[i]->segment, old[i]->offset,
                     /*awaits_commit=*/true,
                     /*extent_only=*/old[i]->checksum == stored[i].payload_xxh3);
      (*deltas)[old[i]->owner].entries -= 1;
      (*deltas)[old[i]->owner].bytes -= old[i]->bytes;
    }
    (*deltas)[meta.owner].entries += 1;
    (*deltas)[meta.owner].bytes += stored[i].payload_bytes;
    (*deltas)[meta.owner].inserts += 1;
  }
}

void ssd::TierImpl::IndexStored(const std::vector<ssd::WriteBackItem>& items,
                                const std::vector<ssd::StoredMeta>& stored,
                                const std::vector<std::optional<IndexEntry>>& old,
                                bool dirty, bool committed) {
  for (size_t i = 0; i < items.size(); ++i) {
    const BlockMeta& meta = items[i].meta;
    if (committed) {
      index_.Insert(meta.key, IndexEntry{meta.namespace_id, meta.parent, meta.owner,
                                         stored[i].payload_bytes, stored[i].payload_xxh3,
                                         stored[i].access_seq, dirty, stored[i].segment,
                                         stored[i].offset, stored[i].chain_hits});
      index_.Owner(meta.owner).inserts += 1;
      // Write-back items were reported when they entered the queue.
      if (!dirty && options_.events != nullptr) {
        KvEvent event = MakeKvEvent(
            KvEventKind::kStored, TierLevel::kSsd, meta, stored[i].payload_bytes,
            old[i].has_value() ? CurrentKvReason() : KvRemoveReason::kNone);
        EmitEvent(event);
      }
    }
    index_.EndPendingChild(meta.parent);
  }
}

void ssd::TierImpl::JournalStoreOutcome(const std::vector<ssd::WriteBackItem>& items,
                                        const std::vector<ssd::StoredMeta>& stored,
                                        bool committed) {
  if (committed) {
    // The metadata knows these extents now: a later Open whose metadata does
    // not is older than the segments, and a rebuild takes each even if its
    // key was removed with the same bytes before (ssd_journal.h).
    std::vector<ssd::JournalRecord> records;
    for (size_t i = 0; i < items.size(); ++i) {
      records.push_back({items[i].meta.key, stored[i].payload_xxh3, stored[i].segment,
                         stored[i].offset});
    }
    JournalCommits(std::move(records));
    return;
  }
  // Never acknowledged: a rebuild or roll-forward must not bring them back (the
  // key may be removed later, which would not name these extents). These
  // extents only: the key may hold the same bytes live elsewhere. Synced (a
  // failure path): later stores append after these extents, so the next
  // open's walk from each segment's end would not reach them.
  for (size_t i = 0; i < items.size(); ++i) {
    JournalRemoval(items[i].meta.key, stored[i].payload_xxh3, stored[i].segment,
                   stored[i].offset, /*awaits_commit=*/false, /*extent_only=*/true);
  }
  (void)SyncJournal();
}

void ssd::TierImpl::PaceMemtableFlush(const std::vector<ssd::WriteBackItem>& items) {
  if (options_.durability != SsdDurability::kFlush) return;
  // Without a log, what a kill can lose is what the memtable holds. Metadata
  // alone would fill it only every few hundred thousand blocks, so a flush is
  // started every write_buffer_bytes of PAYLOAD: the loss window stays what
  // it was when payloads went through the memtable.
  uint64_t bytes = 0;
  for (const auto& item : items) bytes += item.payload.size();
  const uint64_t before = unflushed_payload_bytes_.fetch_add(bytes);
  if (before + bytes < options_.write_buffer_bytes) return;
  unflushed_payload_bytes_ = 0;
  rocksdb::FlushOptions fo;
  fo.wait = false;
  fo.allow_write_stall = true;
  (void)db_->Flush(fo);  // background; an error surfaces at the next write
}

void ssd::TierImpl::EmitRemoved(const BlockKey& key, const IndexEntry& e,
                                const TierCounters& events) {
  if (options_.events == nullptr) return;
  KvRemoveReason reason = CurrentKvReason();
  if (events.corruptions > 0) {
    reason = KvRemoveReason::kCorrupt;
  } else if (events.evictions > 0) {
    reason = KvRemoveReason::kEvicted;
  } else if (reason == KvRemoveReason::kNone) {
    reason = KvRemoveReason::kRemoved;
  }
  KvEvent event =
      MakeKvEvent(KvEventKind::kRemoved, TierLevel::kSsd,
                  BlockMeta{key, e.parent, e.namespace_id, e.owner}, e.bytes, reason);
  EmitEvent(event);
}

void ssd::TierImpl::OnEvict(const BlockMeta& meta, const SharedBytes& payload) {
  if (options_.events != nullptr) {
    // Readable from the queue from here on; its commit reports nothing more.
    KvEvent event =
        MakeKvEvent(KvEventKind::kMoved, TierLevel::kSsd, meta, payload.size());
    event.from = TierLevel::kHot;
    EmitEvent(event);
  }
  if (queue_->Enqueue(meta, payload)) return;
  // Backpressure: the queue is full, so the evicting thread pays for the write.
  Status s = Put(meta, payload, /*dirty=*/true);
  if (s.ok()) return;
  // Never drop a dirty block: keep it queued (over depth) for the retries,
  // and report write-back as failing at once, so the tier stack stops
  // acknowledging new Puts: only evictions already under way can still go
  // over the bound (docs/ssd.md "Write-back failures").
  queue_->EnqueueFailed(meta, payload, s);
}

Status ssd::TierImpl::Remove(const BlockKey& key) {
  // A queued version is newer than the stored one, and stays the key's until
  // the removal commits: held, not cancelled, so meanwhile a Get serves it,
  // never the stored version it overwrote (a GET concurrent with a DEL was
  // served those older bytes until 2026-12-07,
  // SsdFaultTest.ARemoveNeverUncoversTheStoredOlderVersionWhileItCommits),
  // and when the commit fails it is written as a failed Put leaves it
  // (SsdFaultTest.AFailedRemoveKeepsTheQueuedWriteBackOfItsKey).
  std::optional<IndexEntry> queued;
  const uint64_t held = queue_->Hold(key);
  if (held != 0) queued = QueuedEntry(key);
  Status s = RemoveHeld(key, queued);
  queue_->Release(key, held, /*superseded=*/s.ok());
  return s;
}

std::optional<ssd::IndexEntry> ssd::TierImpl::QueuedEntry(const BlockKey& key) const {
  const std::optional<BlockMeta> meta = queue_->FindMeta(key);
  if (!meta.has_value()) return std::nullopt;
  const std::optional<SharedBytes> payload = queue_->Find(key);
  return IndexEntry{.namespace_id = meta->namespace_id,
                    .parent = meta->parent,
                    .owner = meta->owner,
                    .bytes = payload ? payload->size() : 0};
}

Status ssd::TierImpl::RemoveHeld(const BlockKey& key,
                                 const std::optional<IndexEntry>& queued) {
  BlockLock block_lock(this, key);
  IndexEntry e;
  {
    MutexLock lock(&mu_);
    const IndexEntry* found = index_.Find(key);
    if (found == nullptr) {
      if (!queued.has_value()) return Status::NotFound("block not in the ssd tier");
      // Never committed: it leaves with the queue entry.
      if (options_.events != nullptr) EmitRemoved(key, *queued, TierCounters{});
      return Status::OK();
    }
    e = *found;
  }
  TierCounters events;
  events.removes = 1;
  return DropEntry(key, e, events, /*erase_on_failure=*/false);
}

// ---- read path --------------------------------------------------------------------

StatusOr<SharedBytes> ssd::TierImpl::Get(const BlockKey& key, bool touch) {
  if (std::optional<SharedBytes> queued = queue_->Find(key)) {
    if (touch) {
      std::optional<BlockMeta> meta = queue_->FindMeta(key);
      CountEvent(meta ? meta->owner : StoredReader(), &TierCounters::hits);
    }
    return *queued;
  }
  bool flush = false;
  StatusOr<SharedBytes> payload = GetIndexed(key, touch, &flush);
  // Outside the block's lock (the batch takes the stripes of its keys).
  // A failure is counted and logged; the read still succeeded.
  if (flush) (void)FlushAccessOrder();
  return payload;
}

OwnerId ssd::TierImpl::StoredReader() const { return StoredOwner(CurrentReadOwner()); }

bool ssd::TierImpl::FindIndexed(const BlockKey& key, bool touch, IndexEntry* e) {
  {
    MutexLock lock(&mu_);
    const IndexEntry* found = index_.Find(key);
    if (found != nullptr) {
      *e = *found;
      return true;
    }
  }
  // An absent block has no owner: the miss is the reader's (its stored id;
  // nobody's, kEveryOwner, without a ReadOwnerScope), as in the hot tier. It
  // went to stored id 0, in a directory of named owners whichever owner took
  // that id first: a GET of an absent value counted as a model's SSD miss.
  if (touch) CountEvent(StoredReader(), &TierCounters::misses);
  return false;
}

StatusOr<SharedBytes> ssd::TierImpl::GetIndexed(const BlockKey& key, bool touch,
                                                bool* flush) {
  // pause_ shared, as every block operation, but the read holds no stripe:
  // a reader inside a 2 MiB read held its stripe for milliseconds, so
  // write-back commits (which take the stripes of up to 16 keys) and
  // access-order batches (up to 256) waited for reads of other blocks, and
  // readers of further blocks waited behind those (docs/ssd.md "Reads").
  // Served bytes are still never stale or wrong: the entry is the one
  // current when the Get looked (the read is ordered there), and the bytes
  // read are checked against its length and XXH3 (a segment reclaimed or
  // reused meanwhile fails that check, or is gone).
  ReaderLock paused(&pause_);
  IndexEntry e;
  if (!FindIndexed(key, touch, &e)) return Status::NotFound("not in the ssd tier");
  // A read made ahead of this Get, if it was made at this very entry.
  std::optional<SharedBytes> ahead = read_ahead_.Take(key, e);
  SharedBytes payload;
  if (ahead.has_value()) {
    payload = std::move(*ahead);
  } else if (StatusOr<SharedBytes> read = ReadExtent(e); read.ok()) {
    payload = std::move(read).value();
  } else {
    // A failed read is judged under the block's stripe against the entry as
    // it is now: the same extent's failure counts as before (an I/O error,
    // or a damaged block dropped); an extent moved by compaction, or a block
    // replaced meanwhile, is read again from where it is now; a block
    // removed meanwhile is a miss. None is dropped as corrupt for a race.
    MutexLock stripe(&Stripe(key));
    IndexEntry now;
    if (!FindIndexed(key, /*touch=*/false, &now)) {
      if (touch) CountEvent(e.owner, &TierCounters::misses);
      return Status::NotFound("not in the ssd tier");
    }
    if (SameExtent(now, e)) return ReadFailed(key, now, read.status(), touch);
    e = now;
    PKV_ASSIGN_OR_RETURN(payload, ReadVerified(key, e, touch));
  }
  if (!touch) return payload;
  // The new access order reaches the metadata with the next batch
  // (ssd_access_order.cc); the hit rides along with the next write.
  MutexLock lock(&mu_);
  index_.Touch(key, ++next_seq_, /*hit=*/true);
  index_.Owner(e.owner).hits += 1;
  unpersisted_[e.owner].hits += 1;
  *flush = NoteAccess(key);
  return payload;
}

StatusOr<SharedBytes> ssd::TierImpl::PeekIntact(const BlockKey& key) {
  if (std::optional<SharedBytes> queued = queue_->Find(key)) return *queued;
  ReaderLock paused(&pause_);
  IndexEntry e;
  {
    MutexLock lock(&mu_);
    const IndexEntry* found = index_.Find(key);
    if (found == nullptr) return Status::NotFound("not in the ssd tier");
    e = *found;
  }
  return ReadExtent(e);  // checked against the entry, as GetIndexed's read
}

StatusOr<SharedBytes> ssd::TierImpl::ReadVerified(const BlockKey& key,
                                                  const IndexEntry& e, bool lookup) {
  StatusOr<SharedBytes> read = ReadExtent(e);
  if (read.ok()) return read;
  return ReadFailed(key, e, read.status(), lookup);
}

Status ssd::TierImpl::ReadFailed(const BlockKey& key, const IndexEntry& e,
                                 const Status& s, bool lookup) {
  if (!s.IsNotFound() && !s.IsCorruption()) {  // the medium failed: the block stays
    NoteWriteResult(s, /*payload=*/true);
    CountEvent(e.owner, &TierCounters::io_errors);
    if (lookup) CountEvent(e.owner, &TierCounters::misses);
    return s;
  }
  const std::string why(s.message());
  (void)DropCorrupt(key, e, why, lookup);
  return Status::NotFound("corrupt: " + why);
}

StatusOr<SharedBytes> ssd::TierImpl::ReadExtent(const IndexEntry& e) const {
  // One O_DIRECT read of the aligned extent into a buffer the result owns
  // (payload at offset 0): no copy after the read.
  PKV_ASSIGN_OR_RETURN(SharedBytes read, store_->Read({e.segment, e.offset}, e.bytes));
  if (read.size() != e.bytes) {
    return Status::Corruption("payload length " + std::to_string(read.size()) +
                              ", expected " + std::to_string(e.bytes));
  }
  if (ssd::PayloadChecksum(read.data(), read.size()) != e.checksum) {
    return Status::Corruption("payload checksum mismatch");
  }
  return read;
}

ReadAheadResult ssd::TierImpl::StartReadAhead(const BlockKey& key) {
  if (!read_ahead_.enabled()) return ReadAheadResult::kNone;
  // A queued block is served from memory (Get looks there first).
  if (queue_->FindMeta(key).has_value()) return ReadAheadResult::kNone;
  IndexEntry e;
  {
    MutexLock lock(&mu_);
    const IndexEntry* found = index_.Find(key);
    if (found == nullptr) return ReadAheadResult::kNone;
    e = *found;
  }
  return read_ahead_.Start(key, e);
}

Status ssd::TierImpl::DropCorrupt(const BlockKey& key, const IndexEntry& e,
                                  const std::string& why, bool lookup) {
  Log("block " + key.ToHex() + " is corrupt (" + why + "); removed");
  TierCounters events;
  events.corruptions = 1;
  // A read that is no lookup (a compaction's read-back, an eviction's read
  // for its listener, an audit's) counts no miss: the next lookup of the key
  // misses, and is counted then. Counting one here too gave a GET of a block
  // the reclaimer had dropped two SSD misses for its one lookup.
  events.misses = lookup ? 1 : 0;
  // Even if the delete fails the block is never served again this session.
  return DropEntry(key, e, events, /*erase_on_failure=*/true);
}

bool ssd::TierImpl::HasStoredChildren(const BlockKey& key) const {
  // The queue first: a child leaves it only after its commit, when the
  // index (which counts pending children too) already has it.
  if (queue_->HasChildOf(key)) return true;
  MutexLock lock(&mu_);
  return index_.ChildCount(key) > 0;
}

StatusOr<BlockMeta> ssd::TierImpl::Peek(const BlockKey& key) const {
  if (std::optional<BlockMeta> queued = queue_->FindMeta(key)) return *queued;
  MutexLock lock(&mu_);
  const IndexEntry* e = index_.Find(key);
  if (e == nullptr) return Status::NotFound("not in the ssd tier");
  return BlockMeta{key, e->parent, e->namespace_id, e->owner};
}

}  // namespace prefixkv
