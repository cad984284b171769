// Disk helpers of the bench suites (disk_util.h).
#include "tools/bench/disk_util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace prefixkv::cli {

namespace fs = std::filesystem;

bool RawReadFiles(const fs::path& dir, uint64_t* bytes, RawBuffer buffer) {
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t chunk = buffer == RawBuffer::kHugePage ? kHuge : size_t{1} << 20;
  void* mapped = nullptr;
  uint8_t* buf = nullptr;
  if (buffer == RawBuffer::kHugePage) {
    // Two huge pages' worth, so one aligned 2 MiB page fits inside.
    mapped = mmap(nullptr, 2 * kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                  -1, 0);
    if (mapped == MAP_FAILED) return false;
    buf = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(mapped) + kHuge - 1) &
                                     ~uintptr_t{kHuge - 1});
    (void)madvise(buf, kHuge, MADV_HUGEPAGE);
    std::memset(buf, 0, kHuge);  // faulted in before the timing's first read
  } else {
    void* heap = nullptr;
    if (posix_memalign(&heap, 4096, chunk) != 0) return false;
    buf = static_cast<uint8_t*>(heap);
  }
  bool ok = true;
  *bytes = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    int fd = open(e.path().c_str(), O_RDONLY | O_DIRECT);
    // A file system without O_DIRECT (tmpfs): the tier reads buffered there too.
    if (fd < 0 && errno == EINVAL) fd = open(e.path().c_str(), O_RDONLY);
    if (fd < 0) {
      ok = false;
      continue;
    }
    ssize_t n = 0;
    for (off_t at = 0; (n = pread(fd, buf, chunk, at)) > 0; at += n) *bytes += n;
    ok &= n == 0;
    close(fd);
  }
  if (mapped != nullptr) {
    munmap(mapped, 2 * kHuge);
  } else {
    free(buf);
  }
  return ok;
}

bool TimeRawReads(const fs::path& dir, bool heap_first, uint64_t* bytes,
                  RawReadTimes* times) {
  for (int i = 0; i < 2; ++i) {
    const RawBuffer b = (i == 0) == heap_first ? RawBuffer::kHeap : RawBuffer::kHugePage;
    EvictFilePages(dir);
    const auto start = std::chrono::steady_clock::now();
    if (!RawReadFiles(dir, bytes, b)) return false;
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    (b == RawBuffer::kHeap ? times->heap_s : times->huge_page_s) = s;
  }
  return true;
}

void EvictFilePages(const fs::path& dir) {
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec)) {
    if (!e.is_regular_file()) continue;
    const int fd = open(e.path().c_str(), O_RDONLY);
    if (fd < 0) continue;
    (void)fdatasync(fd);  // dirty pages are not dropped
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
  }
}

uint64_t ResidentBytes(const fs::path& dir) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  uint64_t resident = 0;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec)) {
    if (!e.is_regular_file() || e.file_size() == 0) continue;
    const int fd = open(e.path().c_str(), O_RDONLY);
    if (fd < 0) continue;
    const size_t size = e.file_size();
    void* map = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED) continue;
    std::vector<unsigned char> in((size + page - 1) / page);
    if (mincore(map, size, in.data()) == 0) {
      for (unsigned char c : in) resident += (c & 1) ? page : 0;
    }
    munmap(map, size);
  }
  return resident;
}

uint64_t FileBytes(const fs::path& dir, const char* skip) {
  uint64_t total = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (skip != nullptr && it->is_directory() && it->path().filename() == skip) {
      it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file()) total += it->file_size();
  }
  return total;
}

}  // namespace prefixkv::cli
