// FaultInjectionFileSystem: injected faults and simulated power loss over
// another FileSystem (see prefixkv/advanced/fault_injection_file_system.h).
#include "tests/support/fault_injection_file_system.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

namespace prefixkv {
namespace {

constexpr uint64_t kPage = 4096;

// "dir/name" -> {"dir", "name"}; a bare name is in ".".
std::pair<std::string, std::string> SplitPath(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return {".", path};
  return {path.substr(0, slash), path.substr(slash + 1)};
}

std::string TrimSlashes(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

// `prefix` itself or anything under it -> the same under `replacement`.
bool Rebase(const std::string& s, const std::string& prefix,
            const std::string& replacement, std::string* out) {
  if (s == prefix) {
    *out = replacement;
    return true;
  }
  if (s.size() > prefix.size() && s.compare(0, prefix.size(), prefix) == 0 &&
      s[prefix.size()] == '/') {
    *out = replacement + s.substr(prefix.size());
    return true;
  }
  return false;
}

StatusOr<std::string> ReadWhole(FileSystem* fs, const std::string& path) {
  PKV_ASSIGN_OR_RETURN(std::unique_ptr<FileHandle> f,
                       fs->OpenFile(path, {.mode = OpenMode::kRead}));
  PKV_ASSIGN_OR_RETURN(uint64_t size, f->Size());
  std::string content(size, '\0');
  PKV_ASSIGN_OR_RETURN(size_t got, f->Read(0, content.size(), content.data()));
  content.resize(got);
  return content;
}

}  // namespace

// A file opened through the wrapper: every call goes through the wrapper's
// checks and bookkeeping. Thread-safe (the wrapper's lock).
class FaultInjectionFileSystem::Handle final : public FileHandle {
 public:
  Handle(FaultInjectionFileSystem* fs, std::unique_ptr<FileHandle> base,
         std::shared_ptr<Node> node, uint64_t epoch)
      : FileHandle(base->path()),
        fs(fs),
        base(std::move(base)),
        node(std::move(node)),
        epoch(epoch) {}

  StatusOr<size_t> Read(uint64_t offset, size_t n, void* buf) const override {
    return fs->Read(*this, offset, n, buf);
  }
  Status Write(uint64_t offset, const void* data, size_t n) override {
    return fs->Write(*this, offset, data, n);
  }
  Status DataSync() override { return fs->SyncFile(*this, /*data_only=*/true); }
  Status Sync() override { return fs->SyncFile(*this, /*data_only=*/false); }
  Status Truncate(uint64_t size) override { return fs->Truncate(*this, size); }
  StatusOr<uint64_t> Size() const override {
    {
      MutexLock lock(&fs->mu_);
      PKV_RETURN_IF_ERROR(fs->CheckPower(epoch));
    }
    return base->Size();
  }
  bool direct_io() const override { return base->direct_io(); }

  FaultInjectionFileSystem* const fs;
  const std::unique_ptr<FileHandle> base;
  const std::shared_ptr<Node> node;  // null: opened read-only
  const uint64_t epoch;              // the wrapper's epoch at open
};

FaultInjectionFileSystem::FaultInjectionFileSystem(FileSystem* base) : base_(base) {}
FaultInjectionFileSystem::~FaultInjectionFileSystem() = default;

void FaultInjectionFileSystem::AddFault(FaultSpec fault) {
  MutexLock lock(&mu_);
  faults_.push_back({std::move(fault), 0});
}

void FaultInjectionFileSystem::ClearFaults() {
  MutexLock lock(&mu_);
  faults_.clear();
}

uint64_t FaultInjectionFileSystem::faults_injected() const {
  MutexLock lock(&mu_);
  return faults_injected_;
}

Status FaultInjectionFileSystem::CheckFault(FaultOp op, const std::string& path,
                                            bool* short_write) {
  for (ActiveFault& f : faults_) {
    if (f.spec.op != op) continue;
    if (!f.spec.path_contains.empty() &&
        path.find(f.spec.path_contains) == std::string::npos) {
      continue;
    }
    const uint64_t i = f.seen++;
    if (i < f.spec.skip || i - f.spec.skip >= f.spec.count) continue;
    ++faults_injected_;
    if (short_write != nullptr) *short_write = f.spec.short_write;
    return f.spec.error.WithContext(path);
  }
  return Status::OK();
}

Status FaultInjectionFileSystem::CheckPower(uint64_t epoch) const {
  if (power_off_) return Status::IOError("simulated power loss: the power is off");
  if (epoch != epoch_)
    return Status::IOError("file opened before a simulated power loss");
  return Status::OK();
}

Status FaultInjectionFileSystem::SavePages(Node& node, const FileHandle& file,
                                           uint64_t begin, uint64_t end) {
  end = std::min(end, node.synced_size);
  if (begin >= end) return Status::OK();
  // Page-aligned reads into an aligned buffer also suit an O_DIRECT handle.
  std::unique_ptr<void, decltype(&std::free)> buf(std::aligned_alloc(kPage, kPage),
                                                  &std::free);
  for (uint64_t page = begin / kPage; page <= (end - 1) / kPage; ++page) {
    if (node.saved_pages.count(page) > 0) continue;  // keeps the synced content
    PKV_ASSIGN_OR_RETURN(size_t got, file.Read(page * kPage, kPage, buf.get()));
    const uint64_t keep = std::min<uint64_t>(got, node.synced_size - page * kPage);
    node.saved_pages[page].assign(static_cast<const char*>(buf.get()), keep);
  }
  return Status::OK();
}

void FaultInjectionFileSystem::RecordName(const std::string& path,
                                          std::optional<std::string> previous) {
  auto [dir, name] = SplitPath(path);
  // The first record since the directory's last sync is the durable state.
  names_[dir].emplace(name, std::move(previous));
}

StatusOr<std::unique_ptr<FileHandle>> FaultInjectionFileSystem::OpenFile(
    const std::string& path, const FileOpenOptions& options) {
  MutexLock lock(&mu_);
  PKV_RETURN_IF_ERROR(CheckPower(epoch_));
  if (options.mode == OpenMode::kRead) {
    PKV_ASSIGN_OR_RETURN(std::unique_ptr<FileHandle> file,
                         base_->OpenFile(path, options));
    return std::unique_ptr<FileHandle>(
        new Handle(this, std::move(file), nullptr, epoch_));
  }
  StatusOr<uint64_t> before = base_->FileSize(path);
  const bool existed = before.ok();
  FileOpenOptions o = options;
  const bool truncate = o.mode == OpenMode::kCreateOrTruncate && existed;
  if (truncate) o.mode = OpenMode::kReadWrite;  // emptied below, after saving
  PKV_ASSIGN_OR_RETURN(std::unique_ptr<FileHandle> file, base_->OpenFile(path, o));
  if (!existed) RecordName(path, std::nullopt);
  std::shared_ptr<Node>& node = nodes_[path];
  if (node == nullptr || !existed) {
    node = std::make_shared<Node>();
    node->path = path;
    node->synced_size = node->size = existed ? *before : 0;
    node->dirty = !existed;  // a new file's content is not durable yet either
  }
  if (truncate) {
    PKV_RETURN_IF_ERROR(SavePages(*node, *file, 0, node->size));
    PKV_RETURN_IF_ERROR(file->Truncate(0));
    node->size = 0;
    node->dirty = true;
  }
  return std::unique_ptr<FileHandle>(new Handle(this, std::move(file), node, epoch_));
}

StatusOr<size_t> FaultInjectionFileSystem::Read(const Handle& h, uint64_t offset,
                                                size_t n, void* buf) {
  {
    MutexLock lock(&mu_);
    PKV_RETURN_IF_ERROR(CheckPower(h.epoch));
    PKV_RETURN_IF_ERROR(CheckFault(FaultOp::kRead, h.path()));
  }
  return h.base->Read(offset, n, buf);  // reads need no bookkeeping
}

Status FaultInjectionFileSystem::Write(Handle& h, uint64_t offset, const void* data,
                                       size_t n) {
  MutexLock lock(&mu_);
  PKV_RETURN_IF_ERROR(CheckPower(h.epoch));
  if (h.node == nullptr) return Status::InvalidArgument("write to a read-only file");
  bool short_write = false;
  const Status fault = CheckFault(FaultOp::kWrite, h.path(), &short_write);
  size_t len = n;
  if (!fault.ok()) {
    if (!short_write) return fault;
    len = n / 2;
    if (h.base->direct_io()) len = len / kPage * kPage;
    if (len == 0) return fault;
  }
  Node& node = *h.node;
  PKV_RETURN_IF_ERROR(SavePages(node, *h.base, offset, offset + len));
  node.dirty = true;
  Status s = h.base->Write(offset, data, len);
  if (s.ok()) {
    node.size = std::max<uint64_t>(node.size, offset + len);
  } else if (StatusOr<uint64_t> size = h.base->Size(); size.ok()) {
    node.size = *size;  // a prefix may have landed
  }
  return s.ok() ? fault : s;
}

Status FaultInjectionFileSystem::SyncFile(Handle& h, bool data_only) {
  MutexLock lock(&mu_);
  PKV_RETURN_IF_ERROR(CheckPower(h.epoch));
  // A failed sync leaves everything since the last good one unsynced.
  PKV_RETURN_IF_ERROR(CheckFault(FaultOp::kSync, h.path()));
  PKV_RETURN_IF_ERROR(data_only ? h.base->DataSync() : h.base->Sync());
  if (h.node != nullptr) {
    h.node->synced_size = h.node->size;
    h.node->saved_pages.clear();
    h.node->dirty = false;
  }
  return Status::OK();
}

Status FaultInjectionFileSystem::Truncate(Handle& h, uint64_t size) {
  MutexLock lock(&mu_);
  PKV_RETURN_IF_ERROR(CheckPower(h.epoch));
  if (h.node == nullptr) return Status::InvalidArgument("truncate a read-only file");
  PKV_RETURN_IF_ERROR(SavePages(*h.node, *h.base, size, h.node->synced_size));
  h.node->dirty = true;
  PKV_RETURN_IF_ERROR(h.base->Truncate(size));
  h.node->size = size;
  return Status::OK();
}

Status FaultInjectionFileSystem::DeleteFile(const std::string& path) {
  MutexLock lock(&mu_);
  PKV_RETURN_IF_ERROR(CheckPower(epoch_));
  auto [dir, name] = SplitPath(path);
  // Kept until the directory's sync: what a loss puts back under the name
  // (unless a record since that sync already says what the name was then).
  std::optional<std::string> durable;
  const bool recorded = names_.contains(dir) && names_[dir].contains(name);
  if (keep_unlinks_ && !recorded && base_->FileSize(path).ok()) {
    PKV_ASSIGN_OR_RETURN(durable, DurableContent(path));
  }
  PKV_RETURN_IF_ERROR(base_->DeleteFile(path));
  // Open handles write to a nameless file.
  if (auto it = nodes_.find(path); it != nodes_.end()) {
    it->second->path.clear();
    nodes_.erase(it);
  }
  if (durable.has_value()) {
    RecordName(path, std::move(durable));
  } else if (!keep_unlinks_ && recorded) {
    names_[dir].erase(name);  // durable at once (see the header)
  }
  return Status::OK();
}

StatusOr<std::string> FaultInjectionFileSystem::DurableContent(const std::string& path) {
  PKV_ASSIGN_OR_RETURN(std::string content, ReadWhole(base_, path));
  auto it = nodes_.find(path);
  if (it == nodes_.end() || !it->second->dirty) return content;
  const Node& node = *it->second;
  content.resize(std::max<uint64_t>(content.size(), node.synced_size), '\0');
  for (const auto& [page, saved] : node.saved_pages) {
    content.replace(page * kPage, saved.size(), saved);
  }
  content.resize(node.synced_size);
  return content;
}

void FaultInjectionFileSystem::KeepUnlinksUntilDirSync(bool keep) {
  MutexLock lock(&mu_);
  keep_unlinks_ = keep;
}

Status FaultInjectionFileSystem::RenameFile(const std::string& from,
                                            const std::string& to) {
  MutexLock lock(&mu_);
  PKV_RETURN_IF_ERROR(CheckPower(epoch_));
  if (from == to) return base_->RenameFile(from, to);
  if (base_->FileSize(from).status().IsInvalidArgument()) {  // a directory
    PKV_RETURN_IF_ERROR(base_->RenameFile(from, to));
    std::unordered_map<std::string, std::shared_ptr<Node>> nodes;
    for (auto& [path, node] : nodes_) {
      std::string moved = path;
      if (Rebase(path, from, to, &moved)) node->path = moved;
      nodes[moved] = node;
    }
    nodes_.swap(nodes);
    std::map<std::string, std::map<std::string, std::optional<std::string>>> names;
    for (auto& [dir, entries] : names_) {
      std::string moved = dir;
      Rebase(dir, from, to, &moved);
      names[moved] = std::move(entries);
    }
    names_.swap(names);
    return Status::OK();
  }
  // What a loss restores under `to`: read before the rename replaces it.
  std::optional<std::string> previous;
  if (base_->FileSize(to).ok()) {
    PKV_ASSIGN_OR_RETURN(previous, ReadWhole(base_, to));
  }
  PKV_RETURN_IF_ERROR(base_->RenameFile(from, to));
  RecordName(to, std::move(previous));
  auto [from_dir, from_name] = SplitPath(from);
  names_[from_dir].erase(from_name);  // the source name's removal is durable
  if (auto it = nodes_.find(to); it != nodes_.end()) {
    it->second->path.clear();  // replaced
    nodes_.erase(it);
  }
  if (auto it = nodes_.find(from); it != nodes_.end()) {
    std::shared_ptr<Node> node = std::move(it->second);
    nodes_.erase(it);
    node->path = to;
    nodes_[to] = std::move(node);
  }
  return Status::OK();
}

StatusOr<uint64_t> FaultInjectionFileSystem::FileSize(const std::string& path) {
  {
    MutexLock lock(&mu_);
    PKV_RETURN_IF_ERROR(CheckPower(epoch_));
  }
  return base_->FileSize(path);
}

StatusOr<std::vector<std::string>> FaultInjectionFileSystem::ListDir(
    const std::string& dir) {
  {
    MutexLock lock(&mu_);
    PKV_RETURN_IF_ERROR(CheckPower(epoch_));
  }
  return base_->ListDir(dir);
}

Status FaultInjectionFileSystem::CreateDir(const std::string& dir) {
  MutexLock lock(&mu_);
  PKV_RETURN_IF_ERROR(CheckPower(epoch_));
  return base_->CreateDir(dir);  // durable at once (see the header)
}

Status FaultInjectionFileSystem::SyncDir(const std::string& dir) {
  MutexLock lock(&mu_);
  PKV_RETURN_IF_ERROR(CheckPower(epoch_));
  PKV_RETURN_IF_ERROR(CheckFault(FaultOp::kSyncDir, dir));
  PKV_RETURN_IF_ERROR(base_->SyncDir(dir));
  names_.erase(TrimSlashes(dir));
  return Status::OK();
}

Status FaultInjectionFileSystem::RollBackFile(const Node& node, PowerLossReport* report) {
  StatusOr<std::unique_ptr<FileHandle>> file =
      base_->OpenFile(node.path, {.mode = OpenMode::kReadWrite});
  if (file.status().IsNotFound()) return Status::OK();
  PKV_RETURN_IF_ERROR(file.status());
  for (const auto& [page, content] : node.saved_pages) {
    PKV_RETURN_IF_ERROR((*file)->Write(page * kPage, content.data(), content.size()));
    report->bytes_dropped += content.size();
  }
  PKV_RETURN_IF_ERROR((*file)->Truncate(node.synced_size));
  if (node.size > node.synced_size) report->bytes_dropped += node.size - node.synced_size;
  report->files_rolled_back += 1;
  return Status::OK();
}

Status FaultInjectionFileSystem::UndoName(const std::string& path,
                                          const std::optional<std::string>& previous) {
  if (!previous.has_value()) {
    Status s = base_->DeleteFile(path);
    return s.IsNotFound() ? Status::OK() : s;
  }
  StatusOr<std::unique_ptr<FileHandle>> file =
      base_->OpenFile(path, {.mode = OpenMode::kCreateOrTruncate});
  // Its directory removed since, not through the wrapper: nothing to put back.
  if (file.status().IsNotFound()) return Status::OK();
  PKV_RETURN_IF_ERROR(file.status());
  return (*file)->Write(0, previous->data(), previous->size());
}

StatusOr<PowerLossReport> FaultInjectionFileSystem::SimulatePowerLoss() {
  MutexLock lock(&mu_);
  power_off_ = true;
  epoch_ += 1;  // every handle opened so far is dead
  PowerLossReport report;
  Status first;
  // Contents first, then names: a name restored to a replaced file's content
  // (or removed) overrides whatever its last file held.
  for (const auto& [path, node] : nodes_) {
    if (!node->dirty || node->path.empty()) continue;
    Status s = RollBackFile(*node, &report);
    if (first.ok()) first = s;
  }
  for (const auto& [dir, names] : names_) {
    for (const auto& [name, previous] : names) {
      Status s = UndoName(dir + "/" + name, previous);
      if (first.ok()) first = s;
      report.names_undone += 1;
    }
  }
  nodes_.clear();
  names_.clear();
  if (!first.ok()) return first;
  return report;
}

void FaultInjectionFileSystem::PowerOn() {
  MutexLock lock(&mu_);
  power_off_ = false;
}

}  // namespace prefixkv
