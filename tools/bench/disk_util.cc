// Disk helpers of the bench suites (disk_util.h).
#include "tools/bench/disk_util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <vector>

namespace prefixkv::cli {

namespace fs = std::filesystem;

bool RawReadFiles(const fs::path& dir, uint64_t* bytes) {
  constexpr size_t kChunk = 1 << 20;
  void* buf = nullptr;
  if (posix_memalign(&buf, 4096, kChunk) != 0) return false;
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
    for (off_t at = 0; (n = pread(fd, buf, kChunk, at)) > 0; at += n) *bytes += n;
    ok &= n == 0;
    close(fd);
  }
  free(buf);
  return ok;
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
