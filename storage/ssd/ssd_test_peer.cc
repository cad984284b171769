// SsdTierTestPeer (ssd_test_peer.h): what the SSD tier's own tests may do that
// the public API does not offer, namely a commit hook before every metadata
// write and raw reads and writes of the metadata database behind the index's
// back. It lives in the module, not in tests/, because it needs ssd::TierImpl
// (through ssd::Access, like SsdTier::Open); every raw access on a closed tier
// is InvalidArgument, never a null dereference.
#include "ssd_test_peer.h"

#include "ssd_tier_impl.h"

namespace prefixkv {

StatusOr<std::unique_ptr<SsdTier>> SsdTierTestPeer::OpenWithCommitHook(
    const SsdTierOptions& options, std::function<Status()> before_commit,
    std::function<void()> after_commit) {
  PKV_RETURN_IF_ERROR(ssd::TierImpl::ValidateOptions(options));
  auto impl = std::make_unique<ssd::TierImpl>(options);
  impl->SetCommitHookForTest(std::move(before_commit));
  impl->SetCommittedHookForTest(std::move(after_commit));
  PKV_RETURN_IF_ERROR(impl->Open());
  return ssd::Access::Wrap(std::move(impl));
}

namespace {

rocksdb::Slice ToSlice(std::string_view v) { return rocksdb::Slice(v.data(), v.size()); }

// The tier's metadata database; an error (not a crash) once it is closed.
StatusOr<rocksdb::DB*> DbOf(SsdTier& tier) {
  rocksdb::DB* db = ssd::Access::ImplOf(tier).DbForTest();
  if (db == nullptr) return Status::InvalidArgument("test peer: the ssd tier is closed");
  return db;
}

}  // namespace

Status SsdTierTestPeer::FlushMemtables(SsdTier& tier) {
  PKV_ASSIGN_OR_RETURN(rocksdb::DB * db, DbOf(tier));
  rocksdb::FlushOptions fo;
  fo.wait = true;
  return FromRocks(db->Flush(fo), "test peer flush");
}

StatusOr<std::string> SsdTierTestPeer::ReadRaw(SsdTier& tier, std::string_view key) {
  PKV_ASSIGN_OR_RETURN(rocksdb::DB * db, DbOf(tier));
  std::string value;
  PKV_RETURN_IF_ERROR(
      FromRocks(db->Get(rocksdb::ReadOptions(), ToSlice(key), &value), "test peer read"));
  return value;
}

Status SsdTierTestPeer::PutRaw(SsdTier& tier, std::string_view key,
                               std::string_view value) {
  PKV_ASSIGN_OR_RETURN(rocksdb::DB * db, DbOf(tier));
  return FromRocks(db->Put(rocksdb::WriteOptions(), ToSlice(key), ToSlice(value)),
                   "test peer put");
}

Status SsdTierTestPeer::MergeRaw(SsdTier& tier, std::string_view key,
                                 std::string_view value) {
  PKV_ASSIGN_OR_RETURN(rocksdb::DB * db, DbOf(tier));
  return FromRocks(db->Merge(rocksdb::WriteOptions(), ToSlice(key), ToSlice(value)),
                   "test peer merge");
}

}  // namespace prefixkv
