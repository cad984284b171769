// ForwardingFileSystem and ForwardingFileHandle: pass every call to the file
// system (handle) below. A test that watches or bends some calls derives
// from them and overrides only those. Test code.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "prefixkv/file_system.h"

namespace prefixkv::testing {

class ForwardingFileHandle : public FileHandle {
 public:
  explicit ForwardingFileHandle(std::unique_ptr<FileHandle> base)
      : FileHandle(base->path()), base_(std::move(base)) {}
  StatusOr<size_t> Read(uint64_t offset, size_t n, void* buf) const override {
    return base_->Read(offset, n, buf);
  }
  Status Write(uint64_t offset, const void* data, size_t n) override {
    return base_->Write(offset, data, n);
  }
  Status DataSync() override { return base_->DataSync(); }
  Status Sync() override { return base_->Sync(); }
  Status Truncate(uint64_t size) override { return base_->Truncate(size); }
  StatusOr<uint64_t> Size() const override { return base_->Size(); }
  bool direct_io() const override { return base_->direct_io(); }

 protected:
  FileHandle& base() { return *base_; }

 private:
  std::unique_ptr<FileHandle> base_;
};

class ForwardingFileSystem : public FileSystem {
 public:
  // REQUIRES: `base` outlives this object.
  explicit ForwardingFileSystem(FileSystem* base = FileSystem::Default()) : base_(base) {}
  StatusOr<std::unique_ptr<FileHandle>> OpenFile(
      const std::string& path, const FileOpenOptions& options) override {
    return base_->OpenFile(path, options);
  }
  Status DeleteFile(const std::string& path) override { return base_->DeleteFile(path); }
  Status RenameFile(const std::string& from, const std::string& to) override {
    return base_->RenameFile(from, to);
  }
  StatusOr<uint64_t> FileSize(const std::string& path) override {
    return base_->FileSize(path);
  }
  StatusOr<std::vector<std::string>> ListDir(const std::string& dir) override {
    return base_->ListDir(dir);
  }
  Status CreateDir(const std::string& dir) override { return base_->CreateDir(dir); }
  Status SyncDir(const std::string& dir) override { return base_->SyncDir(dir); }

 protected:
  FileSystem* base_file_system() const { return base_; }

 private:
  FileSystem* const base_;
};

}  // namespace prefixkv::testing
