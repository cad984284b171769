// A RocksDB FileSystem over prefixkv's FileSystem seam, so that the metadata
// database's writes see the same FileSystem as the segment files (a
// fault-injecting one included: its simulated power loss then drops
// RocksDB's unsynced log tail and unsynced new files too).
//
// What goes through `fs`: every file RocksDB writes (write-ahead logs,
// MANIFEST, tables, CURRENT, OPTIONS: created, appended, synced, truncated),
// directory fsyncs, renames and deletes. What stays RocksDB's own (its
// default file system): reads, directory creation and listing, locking, the
// info LOG. Reads see what was written (the same files), so nothing is cached
// on either side. Private to storage/ssd.
#pragma once

#include <rocksdb/env.h>

#include <functional>
#include <memory>
#include <string_view>

#include "prefixkv/file_system.h"

namespace prefixkv::ssd {

// An Env whose file system routes RocksDB's writes through `fs`.
// REQUIRES: `fs` outlives the Env, and the Env outlives every DB using it.
std::unique_ptr<rocksdb::Env> NewRoutedRocksEnv(FileSystem* fs);

// RocksDB's info log, as lines handed to `sink` ("rocksdb: " and the
// message), never a file: RocksDB's own LOG file is written through a
// WritableFileWriter, and on a full disk a failed append to it makes the next
// log line abort the process (librocksdb with assertions on:
// `sync_without_flush_called_`). Only messages at `level` or above. `sink`
// must be thread-safe and outlive every DB using the logger.
std::shared_ptr<rocksdb::Logger> NewForwardingRocksLogger(
    rocksdb::InfoLogLevel level, std::function<void(std::string_view)> sink);

}  // namespace prefixkv::ssd
