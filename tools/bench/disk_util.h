// Disk helpers of the `prefixkv-bench` suites that read the SSD tier's files
// cold: the raw O_DIRECT read that is a suite's limit, evicting the files'
// own pages (never the whole machine's page cache: other processes' figures
// would suffer), and proof that a read really was cold (mincore: how many of
// the files' pages are resident afterwards).
#pragma once

#include <cstdint>
#include <filesystem>

namespace prefixkv::cli {

// Sequential O_DIRECT read of every file under `dir`, 1 MiB at a time; false
// on an error. `*bytes`: how many were read.
bool RawReadFiles(const std::filesystem::path& dir, uint64_t* bytes);

// Drops the page-cache pages of every file under `dir` (posix_fadvise
// DONTNEED after a sync of each file).
void EvictFilePages(const std::filesystem::path& dir);

// Bytes of the files under `dir` that are in the page cache now.
uint64_t ResidentBytes(const std::filesystem::path& dir);

// Total size of the regular files under `dir`, without those under any
// directory named `skip` (e.g. the SSD tier's "segments").
uint64_t FileBytes(const std::filesystem::path& dir, const char* skip = nullptr);

}  // namespace prefixkv::cli
