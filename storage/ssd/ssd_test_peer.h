// SsdTierTestPeer: what the SSD tier's own tests (tests/storage/ssd/) may do
// that the public API does not offer. Private to storage/ssd: nothing in
// include/ names it (it needs no friendship: it builds the ssd::TierImpl
// itself and wraps it through ssd::Access, like SsdTier::Open), and only
// tests that mirror this folder can include it.
//
// Errors of the payload files are injected through the FileSystem seam
// (SsdTierOptions::file_system, fault_injection_file_system.h); this peer
// covers the metadata database's writes, whose RocksDB errors (and RocksDB's
// reaction to them) are not what those tests are about, and writes records
// into an open tier's database that the tier did not write (damage RocksDB's
// own checksums cannot see).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "prefixkv/advanced/ssd_tier.h"

namespace prefixkv {

// Stateless. Thread-safe.
class SsdTierTestPeer {
 public:
  // SsdTier::Open, plus `before_commit`, called (on the committing thread)
  // before every metadata write to the database, including those Open makes;
  // a non-OK result is handled exactly like the database returning that error
  // (counted, logged once, returned; nothing changes).
  // `after_commit`, when given, is called (on the committing thread) after
  // every metadata write that succeeded, before the removals it made are
  // confirmed in the removal journal.
  static StatusOr<std::unique_ptr<SsdTier>> OpenWithCommitHook(
      const SsdTierOptions& options, std::function<Status()> before_commit,
      std::function<void()> after_commit = nullptr);
  // Flushes the metadata database's memtables to tables and waits: what the
  // tier's listener runs before a flush runs (a journal sync) runs too.
  static Status FlushMemtables(SsdTier& tier);

  // The value under `key` in the tier's metadata database (ssd_layout.h's
  // keys), read straight from RocksDB; NotFound when absent.
  static StatusOr<std::string> ReadRaw(SsdTier& tier, std::string_view key);
  // Writes straight into the tier's metadata database, behind its index and
  // live counters: a Put of `value` under `key`, or a merge operand (for a
  // counter record, an EncodeCounters delta). RocksDB checksums it like any
  // other write, so only the tier's own checks can tell it is wrong.
  // REQUIRES: no block operation runs on `tier` meanwhile.
  static Status PutRaw(SsdTier& tier, std::string_view key, std::string_view value);
  static Status MergeRaw(SsdTier& tier, std::string_view key, std::string_view value);
};

}  // namespace prefixkv
