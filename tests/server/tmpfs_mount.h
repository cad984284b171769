// A small tmpfs the test mounts itself (a full disk, or a read-only
// directory, in a few megabytes), unmounted when it goes out of scope. Needs
// CAP_SYS_ADMIN (root, as CI runs): mounted() is false otherwise, and
// why_not() says why, for the test's skip message.
#pragma once

#include <dirent.h>
#include <sys/mount.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

namespace prefixkv::testing {

// Not thread-safe.
class TmpfsMount {
 public:
  // Mounts a tmpfs of `size` ("24M") on `dir` (created), read-only if asked.
  TmpfsMount(const std::string& dir, const std::string& size, bool read_only = false)
      : dir_(dir), size_(size) {
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    const std::string opts = "size=" + size_;
    if (::mount("tmpfs", dir_.c_str(), "tmpfs", read_only ? MS_RDONLY : 0,
                opts.c_str()) != 0) {
      why_not_ = "cannot mount a " + size_ + " tmpfs on " + dir_ + ": " +
                 std::strerror(errno) +
                 " (the test needs root / CAP_SYS_ADMIN to make a small file system)";
      return;
    }
    mounted_ = true;
  }
  ~TmpfsMount() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  TmpfsMount(const TmpfsMount&) = delete;
  TmpfsMount& operator=(const TmpfsMount&) = delete;

  bool mounted() const { return mounted_; }
  const std::string& why_not() const { return why_not_; }

  // Makes the mount read-only or writable again, keeping its contents.
  bool Remount(bool read_only) {
    const std::string opts = "size=" + size_;
    return ::mount("tmpfs", dir_.c_str(), "tmpfs",
                   MS_REMOUNT | (read_only ? MS_RDONLY : 0), opts.c_str()) == 0;
  }

 private:
  const std::string dir_;
  const std::string size_;
  bool mounted_ = false;
  std::string why_not_;
};

// Entries of a directory (0 if it cannot be read), "." and ".." excluded.
inline int CountEntries(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return 0;
  int n = 0;
  while (dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) ++n;
  }
  ::closedir(d);
  return n;
}

}  // namespace prefixkv::testing
