// GatedFileSystem: a FileSystem wrapper for tests whose file writes stop at a
// Gate once armed: every FileHandle::Write (and DataSync/Sync) to a path that
// contains a given string waits in Gate::Pass() until the gate opens, as a
// stalled disk would; reads likewise at a second gate (ArmReads). Everything else passes
// through to the file system below. Test code. Thread-safe.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <utility>

#include "prefixkv/file_system.h"
#include "tests/support/forwarding_file_system.h"
#include "tests/support/gate.h"

namespace prefixkv::testing {

class GatedFileSystem final : public ForwardingFileSystem {
 public:
  // REQUIRES: `base` outlives this object.
  explicit GatedFileSystem(FileSystem* base = FileSystem::Default())
      : ForwardingFileSystem(base) {}

  // From now on writes and syncs of paths containing `path_contains` wait at
  // gate(). Call before any thread writes.
  void Arm(std::string path_contains) {
    path_contains_ = std::move(path_contains);
    armed_.store(true);
  }
  Gate& gate() { return gate_; }
  // From now on reads of paths containing `path_contains` wait at
  // read_gate(), as a read stalled in the device would. Call before any
  // thread reads.
  void ArmReads(std::string path_contains) {
    read_path_contains_ = std::move(path_contains);
    reads_armed_.store(true);
  }
  Gate& read_gate() { return read_gate_; }

  StatusOr<std::unique_ptr<FileHandle>> OpenFile(
      const std::string& path, const FileOpenOptions& options) override {
    StatusOr<std::unique_ptr<FileHandle>> f =
        ForwardingFileSystem::OpenFile(path, options);
    if (!f.ok()) return f;
    return std::unique_ptr<FileHandle>(new Handle(this, std::move(*f)));
  }

 private:
  class Handle final : public ForwardingFileHandle {
   public:
    Handle(GatedFileSystem* fs, std::unique_ptr<FileHandle> base)
        : ForwardingFileHandle(std::move(base)), fs_(fs) {}
    StatusOr<size_t> Read(uint64_t offset, size_t n, void* buf) const override {
      fs_->MaybeWaitRead(path());
      return ForwardingFileHandle::Read(offset, n, buf);
    }
    Status Write(uint64_t offset, const void* data, size_t n) override {
      fs_->MaybeWait(path());
      return base().Write(offset, data, n);
    }
    Status DataSync() override {
      fs_->MaybeWait(path());
      return base().DataSync();
    }
    Status Sync() override {
      fs_->MaybeWait(path());
      return base().Sync();
    }

   private:
    GatedFileSystem* fs_;
  };

  void MaybeWait(const std::string& path) {
    if (armed_.load() && path.find(path_contains_) != std::string::npos) gate_.Pass();
  }

  void MaybeWaitRead(const std::string& path) {
    if (reads_armed_.load() && path.find(read_path_contains_) != std::string::npos)
      read_gate_.Pass();
  }

  std::atomic<bool> armed_{false};
  std::string path_contains_;  // written before armed_ is set
  Gate gate_;
  std::atomic<bool> reads_armed_{false};
  std::string read_path_contains_;  // written before reads_armed_ is set
  Gate read_gate_;
};

}  // namespace prefixkv::testing
