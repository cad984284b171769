// SsdTier lifecycle: opening RocksDB (or moving an unopenable one aside),
// rebuilding the index and counters from the records, and closing cleanly.
#include <rocksdb/convenience.h>
#include <rocksdb/merge_operator.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include <filesystem>

#include "storage/ssd_layout.h"
#include "storage/ssd_tier_impl.h"

namespace prefixkv {
namespace {

// Adds counter records field by field (see ssd_layout.h), so every batch can
// carry its owner's deltas without reading the current value.
class CounterAddOperator : public rocksdb::AssociativeMergeOperator {
 public:
  bool Merge(const rocksdb::Slice&, const rocksdb::Slice* existing,
             const rocksdb::Slice& value, std::string* new_value,
             rocksdb::Logger*) const override {
    TierCounters sum, delta;
    if (existing != nullptr && !ssd::DecodeCounters(existing->ToStringView(), &sum))
      return false;
    if (!ssd::DecodeCounters(value.ToStringView(), &delta)) return false;
    ssd::AddCounters(&sum, delta);
    *new_value = ssd::EncodeCounters(sum);
    return true;
  }
  const char* Name() const override { return "prefixkv.CounterAdd"; }
};

rocksdb::CompressionType ParseCompression(const std::string& name) {
  if (name == "lz4") return rocksdb::kLZ4Compression;
  if (name == "zstd") return rocksdb::kZSTD;
  if (name == "snappy") return rocksdb::kSnappyCompression;
  return rocksdb::kNoCompression;
}

}  // namespace

std::string_view SsdDurabilityName(SsdDurability d) {
  switch (d) {
    case SsdDurability::kFlush:
      return "flush";
    case SsdDurability::kWal:
      return "wal";
    case SsdDurability::kSync:
      return "sync";
  }
  return "wal";
}

StatusOr<SsdDurability> ParseSsdDurability(std::string_view name) {
  for (SsdDurability d :
       {SsdDurability::kFlush, SsdDurability::kWal, SsdDurability::kSync}) {
    if (name == SsdDurabilityName(d)) return d;
  }
  return Status::InvalidArgument("durability must be flush, wal or sync");
}

StatusOr<std::unique_ptr<SsdTier>> SsdTier::Open(const SsdTierOptions& options) {
  if (options.path.empty()) return Status::InvalidArgument("ssd tier: empty path");
  if (options.clock == nullptr) return Status::InvalidArgument("ssd tier: null clock");
  if (options.capacity_bytes == 0)
    return Status::InvalidArgument("ssd tier: zero capacity");
  const std::string& c = options.compression;
  if (c != "none" && c != "lz4" && c != "zstd" && c != "snappy") {
    return Status::InvalidArgument("ssd tier: unknown compression " + c);
  }
  auto impl = std::make_unique<Impl>(options);
  PKV_RETURN_IF_ERROR(impl->Open());
  return std::unique_ptr<SsdTier>(new SsdTier(std::move(impl)));
}

SsdTier::Impl::Impl(const SsdTierOptions& options) : options_(options) {
  write_options_.disableWAL = options.durability == SsdDurability::kFlush;
  write_options_.sync = options.durability == SsdDurability::kSync;
  relaxed_options_.disableWAL = write_options_.disableWAL;
}

SsdTier::Impl::~Impl() { (void)Close(); }

rocksdb::Options SsdTier::Impl::DbOptions(bool direct_io) const {
  rocksdb::Options o;
  o.create_if_missing = true;
  o.paranoid_checks = true;
  o.merge_operator = std::make_shared<CounterAddOperator>();
  o.enable_blob_files = true;
  o.min_blob_size = options_.min_blob_bytes;
  o.blob_file_size = 256ull << 20;
  o.blob_compression_type = rocksdb::kNoCompression;
  // Evicted payloads leave garbage in blob files. Compactions relocate the
  // live blobs of the oldest 10% of blob files (RocksDB's default 25% rewrote
  // a quarter of all payloads per L0 compaction in a write-only load); under
  // LRU eviction the oldest files are mostly garbage, so relocation is cheap.
  // A file half garbage forces a compaction.
  o.enable_blob_garbage_collection = true;
  o.blob_garbage_collection_age_cutoff = 0.1;
  o.blob_garbage_collection_force_threshold = 0.5;
  o.compression = ParseCompression(options_.compression);
  o.write_buffer_size = options_.write_buffer_bytes;
  o.max_write_buffer_number = 4;
  // Two flush threads keep two blob files streaming while the memtable fills.
  o.max_background_flushes = 2;
  o.max_background_compactions = 2;
  o.use_direct_io_for_flush_and_compaction = direct_io;
  o.use_direct_reads = direct_io;
  // A torn tail after a kill is cut at the last complete batch.
  o.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
  o.keep_log_file_num = 3;
  o.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  rocksdb::BlockBasedTableOptions t;
  t.checksum = rocksdb::kXXH3;
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
  return o;
}

Status SsdTier::Impl::OpenDb() {
  for (bool direct : {options_.use_direct_io, false}) {
    rocksdb::DB* raw = nullptr;
    rocksdb::Status rs = rocksdb::DB::Open(DbOptions(direct), options_.path, &raw);
    if (rs.ok()) {
      db_.reset(raw);
      direct_io_ = direct;
      return Status::OK();
    }
    // Only a refusal of O_DIRECT is worth a second try without it.
    bool direct_refused = direct && (rs.IsInvalidArgument() || rs.IsNotSupported() ||
                                     rs.ToString().find("irect") != std::string::npos);
    if (!direct || !direct_refused) return FromRocks(rs, "open " + options_.path);
  }
  return Status::Internal("unreachable");
}

Status SsdTier::Impl::MoveAside(const Status& why) {
  db_.reset();
  std::string aside =
      options_.path + ".broken-" + std::to_string(options_.clock->NowNanos());
  std::error_code ec;
  std::filesystem::rename(options_.path, aside, ec);
  if (ec)
    return Status::IOError("cannot move " + options_.path + " aside: " + ec.message());
  report_.moved_aside_to = aside;
  Log("database at " + options_.path + " could not be opened (" + why.ToString() +
      "); moved to " + aside + ", starting cold");
  return Status::OK();
}

Status SsdTier::Impl::OpenOrMoveAside() {
  std::error_code ec;
  std::filesystem::create_directories(options_.path, ec);
  if (ec) return Status::IOError("create " + options_.path + ": " + ec.message());
  Status s = OpenDb();
  if (s.ok()) s = Rebuild();
  // A held lock, a full disk or missing permissions are not damage: report them.
  if (s.ok() || s.IsBusy() || s.IsNoSpace() ||
      s.message().find("LOCK:") != std::string::npos ||
      s.message().find("Permission denied") != std::string::npos) {
    return s;
  }
  PKV_RETURN_IF_ERROR(MoveAside(s));
  index_ = ssd::SsdIndex();
  unpersisted_.clear();
  report_ = SsdOpenReport{.moved_aside_to = report_.moved_aside_to};
  std::filesystem::create_directories(options_.path, ec);
  PKV_RETURN_IF_ERROR(OpenDb());
  return Rebuild();
}

Status SsdTier::Impl::Open() {
  PKV_RETURN_IF_ERROR(OpenOrMoveAside());
  // From here until Close() completes, a kill is an unclean stop.
  rocksdb::WriteOptions w;
  w.sync = options_.durability == SsdDurability::kSync;
  PKV_RETURN_IF_ERROR(FromRocks(db_->Put(w, std::string(ssd::kCleanKey), "0"), "open"));
  queue_ = std::make_unique<ssd::WriteBackQueue>(
      options_.queue_depth, options_.writer_threads, options_.retry_interval_ms,
      [this](const std::vector<ssd::WriteBackItem>& items) {
        PKV_RETURN_IF_ERROR(Store(items, /*dirty=*/true));
        EnforceCapacity();
        return Status::OK();
      });
  Log("opened " + options_.path + ": " + std::to_string(report_.blocks) + " blocks, " +
      std::to_string(report_.bytes) + " bytes, durability " +
      std::string(SsdDurabilityName(options_.durability)) + ", direct io " +
      (direct_io_ ? "on" : "off") +
      (report_.created                   ? ", new"
       : report_.previous_shutdown_clean ? ", clean"
                                         : ", recovered") +
      (report_.counter_repairs.empty()
           ? ""
           : ", " + std::to_string(report_.counter_repairs.size()) +
                 " counters repaired"));
  return Status::OK();
}

Status SsdTier::Impl::Close() {
  if (closed_ || db_ == nullptr) return Status::OK();
  closed_ = true;
  Status first = queue_ ? queue_->Stop() : Status::OK();
  rocksdb::WriteBatch batch;
  batch.Put(std::string(ssd::kCleanKey), "1");
  Status s = Commit(&batch, {}, 0);  // also persists the event counters
  if (first.ok()) first = s;
  rocksdb::FlushOptions fo;
  fo.wait = true;
  s = FromRocks(db_->Flush(fo), "flush at close");
  if (first.ok()) first = s;
  s = FromRocks(db_->Close(), "close");
  if (first.ok()) first = s;
  db_.reset();
  if (!first.ok()) Log("close: " + first.ToString());
  return first;
}

}  // namespace prefixkv
