// Disk helpers of the `prefixkv-bench` suites that read the SSD tier's files
// cold: the raw O_DIRECT read that is a suite's limit, evicting the files'
// own pages (never the whole machine's page cache: other processes' figures
// would suffer), and proof that a read really was cold (mincore: how many of
// the files' pages are resident afterwards).
#pragma once

#include <cstdint>
#include <filesystem>

namespace prefixkv::cli {

// How RawReadFiles reads: 1 MiB at a time into a heap buffer (4 KiB pages),
// or 2 MiB at a time into one transparent huge page. Which is faster depends
// on the machine: a virtual machine's O_DIRECT path pins (and may map for
// the device) each page of the buffer, per read, and 2 MiB pages make that
// 512 times fewer pins (on this page's VM: 1.6-2.8 GB/s vs 3.6-3.8 GB/s).
enum class RawBuffer { kHeap, kHugePage };

// Sequential O_DIRECT read of every file under `dir` into one reused buffer;
// false on an error. `*bytes`: how many were read.
bool RawReadFiles(const std::filesystem::path& dir, uint64_t* bytes,
                  RawBuffer buffer = RawBuffer::kHeap);

// One raw read of `dir` with each RawBuffer (pages evicted before each),
// `heap_first` saying which goes first (alternate it across repeats).
struct RawReadTimes {
  double heap_s = 0, huge_page_s = 0;
  // The limit a suite compares with: the faster of the two.
  double fastest_s() const { return heap_s < huge_page_s ? heap_s : huge_page_s; }
};
bool TimeRawReads(const std::filesystem::path& dir, bool heap_first, uint64_t* bytes,
                  RawReadTimes* times);

// Drops the page-cache pages of every file under `dir` (posix_fadvise
// DONTNEED after a sync of each file).
void EvictFilePages(const std::filesystem::path& dir);

// Bytes of the files under `dir` that are in the page cache now.
uint64_t ResidentBytes(const std::filesystem::path& dir);

// Total size of the regular files under `dir`, without those under any
// directory named `skip` (e.g. the SSD tier's "segments").
uint64_t FileBytes(const std::filesystem::path& dir, const char* skip = nullptr);

}  // namespace prefixkv::cli
