// File systems a test mounts itself, unmounted when they go out of scope: a
// small tmpfs (a full disk, or a read-only directory, in a few megabytes), a
// read-only bind mount of a directory in use (what a disk remounted read-only
// after errors does to new files), and a small ext4 image on a loop device
// (a real block file system: fallocate keeps what it allocated). Need
// CAP_SYS_ADMIN (root, as CI runs): mounted() is false otherwise, and
// why_not() says why, for the test's skip message.
#pragma once

#include <dirent.h>
#include <sys/mount.h>

#include <cerrno>
#include <cstdlib>
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

// `dir` bind-mounted read-only over itself: new files there cannot be
// created (EROFS), while files a process opened before keep taking writes,
// as on a disk the kernel remounted read-only only for new opens. Not
// thread-safe.
class ReadOnlyBindMount {
 public:
  explicit ReadOnlyBindMount(const std::string& dir) : dir_(dir) {
    if (::mount(dir_.c_str(), dir_.c_str(), nullptr, MS_BIND, nullptr) != 0) {
      why_not_ = "cannot bind-mount " + dir_ + ": " + std::strerror(errno) +
                 " (the test needs root / CAP_SYS_ADMIN)";
      return;
    }
    mounted_ = true;
    if (::mount(nullptr, dir_.c_str(), nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY,
                nullptr) != 0) {
      why_not_ =
          "cannot make the bind mount of " + dir_ + " read-only: " + std::strerror(errno);
      Unmount();
    }
  }
  ~ReadOnlyBindMount() { Unmount(); }
  ReadOnlyBindMount(const ReadOnlyBindMount&) = delete;
  ReadOnlyBindMount& operator=(const ReadOnlyBindMount&) = delete;

  bool mounted() const { return mounted_; }
  const std::string& why_not() const { return why_not_; }
  // Writable again (the directory as it was below the bind mount).
  void Unmount() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
    mounted_ = false;
  }

 private:
  const std::string dir_;
  bool mounted_ = false;
  std::string why_not_;
};

// A `size_mib` ext4 file system, made in an image file `image` and mounted on
// `dir` through a loop device (mkfs.ext4 and mount(8), Debian's e2fsprogs and
// mount). Unlike tmpfs, a failed fallocate there keeps what it allocated, as
// on the disks users have. Not thread-safe.
class LoopExt4Mount {
 public:
  LoopExt4Mount(const std::string& image, const std::string& dir, int size_mib)
      : image_(image), dir_(dir) {
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    const std::string mkfs = "truncate -s " + std::to_string(size_mib) + "M '" + image_ +
                             "' && mkfs.ext4 -q -F '" + image_ + "' >/dev/null 2>&1";
    if (std::system(mkfs.c_str()) != 0) {
      why_not_ = "cannot make an ext4 image (" + mkfs + ")";
      return;
    }
    const std::string mount = "mount -o loop '" + image_ + "' '" + dir_ + "' 2>/dev/null";
    if (std::system(mount.c_str()) != 0) {
      why_not_ = "cannot loop-mount " + image_ + " on " + dir_ +
                 " (the test needs root / CAP_SYS_ADMIN and a loop device)";
      return;
    }
    mounted_ = true;
  }
  ~LoopExt4Mount() {
    // Lazy: the loop device is released (autoclear) once nothing uses it.
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
    std::error_code ec;
    std::filesystem::remove(image_, ec);
  }
  LoopExt4Mount(const LoopExt4Mount&) = delete;
  LoopExt4Mount& operator=(const LoopExt4Mount&) = delete;

  bool mounted() const { return mounted_; }
  const std::string& why_not() const { return why_not_; }

 private:
  const std::string image_;
  const std::string dir_;
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
