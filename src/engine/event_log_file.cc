// The event log's files (event_log_file.h): record encoding, segment scans
// that stop at the first torn or damaged record, and the two small files
// replaced atomically (the seq reservation and the SSD key set checkpoint).
#include "event_log_file.h"

#include <cstdio>
#include <cstring>

#include "prefixkv/advanced/hash.h"

namespace prefixkv::internal {
namespace {

constexpr uint64_t kSegmentMagic = 0x31305456454b5650ull;     // "PVKEVT01"
constexpr uint64_t kCheckpointMagic = 0x31304b43454b5650ull;  // "PVKECK01"
constexpr size_t kPayloadBytes = kEventRecordBytes - 8;
constexpr size_t kBlockBytes = 16 * 3 + 4 + 8;  // one checkpoint entry

void Put(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}
uint64_t Get(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
void PutKey(std::string* out, const BlockKey& k) {
  Put(out, k.lo, 8);
  Put(out, k.hi, 8);
}
BlockKey GetKey(const char* p) { return BlockKey{.hi = Get(p + 8, 8), .lo = Get(p, 8)}; }
uint64_t Check(const char* p, size_t n) { return Hash64(p, n); }

// Decodes one payload; false when a field is out of its range.
bool DecodeEvent(const char* p, KvEvent* e) {
  e->seq = Get(p, 8);
  const auto kind = static_cast<uint8_t>(p[8]);
  const auto reason = static_cast<uint8_t>(p[9]);
  const auto tier = static_cast<uint8_t>(p[10]);
  const auto from = static_cast<uint8_t>(p[11]);
  const auto copy = static_cast<uint8_t>(p[12]);
  if (e->seq == 0 || kind < 1 || kind > 4 || reason > 7 || tier > 3 || from > 3 ||
      copy > 1) {
    return false;
  }
  e->kind = static_cast<KvEventKind>(kind);
  e->reason = static_cast<KvRemoveReason>(reason);
  e->tier = static_cast<TierLevel>(tier);
  e->from = static_cast<TierLevel>(from);
  e->copy_remains = copy == 1;
  e->owner = static_cast<OwnerId>(Get(p + 13, 4));
  e->namespace_id = GetKey(p + 17);
  e->key = GetKey(p + 33);
  e->parent = GetKey(p + 49);
  e->bytes = Get(p + 65, 8);
  e->unix_ms = static_cast<int64_t>(Get(p + 73, 8));
  return true;
}

StatusOr<std::string> ReadWhole(FileSystem* fs, const std::string& path) {
  PKV_ASSIGN_OR_RETURN(std::unique_ptr<FileHandle> f,
                       fs->OpenFile(path, {.mode = OpenMode::kRead}));
  PKV_ASSIGN_OR_RETURN(uint64_t size, f->Size());
  std::string data(size, '\0');
  PKV_ASSIGN_OR_RETURN(size_t n, f->Read(0, size, data.data()));
  data.resize(n);
  return data;
}

// Replaces `dir/name` with `data`, durably.
Status ReplaceFile(FileSystem* fs, const std::string& dir, const std::string& name,
                   const std::string& data) {
  const std::string tmp = dir + "/" + name + ".tmp";
  {
    PKV_ASSIGN_OR_RETURN(std::unique_ptr<FileHandle> f,
                         fs->OpenFile(tmp, {.mode = OpenMode::kCreateOrTruncate}));
    PKV_RETURN_IF_ERROR(f->Write(0, data.data(), data.size()));
    PKV_RETURN_IF_ERROR(f->Sync());
  }
  PKV_RETURN_IF_ERROR(fs->RenameFile(tmp, dir + "/" + name));
  return fs->SyncDir(dir);
}

}  // namespace

void EncodeEventRecord(const KvEvent& e, char* out) {
  // No allocation: Append runs under the tiers' locks.
  char* p = out + 8;
  const auto put = [&p](uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) *p++ = static_cast<char>(v >> (8 * i));
  };
  put(e.seq, 8);
  put(static_cast<uint8_t>(e.kind), 1);
  put(static_cast<uint8_t>(e.reason), 1);
  put(static_cast<uint8_t>(e.tier), 1);
  put(static_cast<uint8_t>(e.from), 1);
  put(e.copy_remains ? 1 : 0, 1);
  put(e.owner, 4);
  for (const BlockKey* k : {&e.namespace_id, &e.key, &e.parent}) {
    put(k->lo, 8);
    put(k->hi, 8);
  }
  put(e.bytes, 8);
  put(static_cast<uint64_t>(e.unix_ms), 8);
  p = out;
  put(kPayloadBytes, 4);
  put(Check(out + 8, kPayloadBytes) & 0xffffffffu, 4);
}

StatusOr<EventSegmentScan> ReadEventSegment(FileSystem* fs, const std::string& path) {
  PKV_ASSIGN_OR_RETURN(std::string data, ReadWhole(fs, path));
  EventSegmentScan scan;
  scan.file_bytes = data.size();
  if (data.size() < kEventSegmentHeaderBytes || Get(data.data(), 8) != kSegmentMagic ||
      Get(data.data() + 16, 8) != Check(data.data(), 16)) {
    return scan;
  }
  scan.header_ok = true;
  scan.prev_seq = Get(data.data() + 8, 8);
  uint64_t pos = kEventSegmentHeaderBytes;
  uint64_t last = scan.prev_seq;
  while (pos + kEventRecordBytes <= data.size()) {
    const char* r = data.data() + pos;
    KvEvent e;
    if (Get(r, 4) != kPayloadBytes ||
        Get(r + 4, 4) != (Check(r + 8, kPayloadBytes) & 0xffffffffu) ||
        !DecodeEvent(r + 8, &e) || e.seq <= last) {
      break;
    }
    last = e.seq;
    scan.events.push_back(e);
    pos += kEventRecordBytes;
  }
  scan.valid_bytes = pos;
  return scan;
}

StatusOr<std::unique_ptr<EventSegmentWriter>> EventSegmentWriter::Create(
    FileSystem* fs, const std::string& path, uint64_t prev_seq) {
  PKV_ASSIGN_OR_RETURN(std::unique_ptr<FileHandle> f,
                       fs->OpenFile(path, {.mode = OpenMode::kCreateOrTruncate}));
  std::string h;
  Put(&h, kSegmentMagic, 8);
  Put(&h, prev_seq, 8);
  Put(&h, Check(h.data(), 16), 8);
  PKV_RETURN_IF_ERROR(f->Write(0, h.data(), h.size()));
  // The header is synced with the directory entry: a segment name that
  // survives a crash always has its header.
  PKV_RETURN_IF_ERROR(f->Sync());
  const size_t slash = path.rfind('/');
  PKV_RETURN_IF_ERROR(
      fs->SyncDir(slash == std::string::npos ? "." : path.substr(0, slash)));
  return std::unique_ptr<EventSegmentWriter>(
      new EventSegmentWriter(std::move(f), h.size()));
}

StatusOr<std::unique_ptr<EventSegmentWriter>> EventSegmentWriter::Reopen(
    FileSystem* fs, const std::string& path, uint64_t size) {
  PKV_ASSIGN_OR_RETURN(std::unique_ptr<FileHandle> f,
                       fs->OpenFile(path, {.mode = OpenMode::kReadWrite}));
  PKV_ASSIGN_OR_RETURN(uint64_t have, f->Size());
  if (have != size) {
    PKV_RETURN_IF_ERROR(f->Truncate(size));
    PKV_RETURN_IF_ERROR(f->Sync());
  }
  return std::unique_ptr<EventSegmentWriter>(new EventSegmentWriter(std::move(f), size));
}

Status EventSegmentWriter::Append(const char* bytes, size_t n) {
  PKV_RETURN_IF_ERROR(file_->Write(size_, bytes, n));
  size_ += n;
  return Status::OK();
}

Status EventSegmentWriter::Sync() { return file_->DataSync(); }

std::string EventSegmentPath(const std::string& dir, uint64_t first_seq) {
  char name[32];
  std::snprintf(name, sizeof(name), "%020llu.log",
                static_cast<unsigned long long>(first_seq));
  return dir + "/" + name;
}

uint64_t EventSegmentSeq(const std::string& name) {
  if (name.size() != 24 || !name.ends_with(".log")) return 0;
  uint64_t v = 0;
  for (size_t i = 0; i < 20; ++i) {
    if (name[i] < '0' || name[i] > '9') return 0;
    v = v * 10 + static_cast<uint64_t>(name[i] - '0');
  }
  return v;
}

StatusOr<uint64_t> ReadSeqReservation(FileSystem* fs, const std::string& dir) {
  if (!fs->FileSize(dir + "/SEQ").ok()) return Status::NotFound("no SEQ file");
  PKV_ASSIGN_OR_RETURN(std::string data, ReadWhole(fs, dir + "/SEQ"));
  if (data.size() != 16 || Get(data.data() + 8, 8) != Check(data.data(), 8)) {
    return Status::Corruption("event log SEQ file is damaged");
  }
  return Get(data.data(), 8);
}

Status WriteSeqReservation(FileSystem* fs, const std::string& dir, uint64_t ceiling) {
  std::string data;
  Put(&data, ceiling, 8);
  Put(&data, Check(data.data(), 8), 8);
  return ReplaceFile(fs, dir, "SEQ", data);
}

StatusOr<SsdKeysCheckpoint> ReadSsdKeysCheckpoint(FileSystem* fs,
                                                  const std::string& dir) {
  if (!fs->FileSize(dir + "/ssd-keys").ok()) return Status::NotFound("no checkpoint");
  PKV_ASSIGN_OR_RETURN(std::string data, ReadWhole(fs, dir + "/ssd-keys"));
  const auto damaged = [] {
    return Status::Corruption("event log checkpoint is damaged");
  };
  if (data.size() < 32 || Get(data.data(), 8) != kCheckpointMagic) return damaged();
  const uint64_t count = Get(data.data() + 16, 8);
  if (count > (data.size() - 32) / kBlockBytes ||
      data.size() != 32 + count * kBlockBytes ||
      Get(data.data() + data.size() - 8, 8) != Check(data.data(), data.size() - 8)) {
    return damaged();
  }
  SsdKeysCheckpoint c;
  c.seq = Get(data.data() + 8, 8);
  c.blocks.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    const char* p = data.data() + 24 + i * kBlockBytes;
    c.blocks.push_back({.namespace_id = GetKey(p),
                        .key = GetKey(p + 16),
                        .parent = GetKey(p + 32),
                        .owner = static_cast<OwnerId>(Get(p + 48, 4)),
                        .bytes = Get(p + 52, 8)});
  }
  return c;
}

Status WriteSsdKeysCheckpoint(FileSystem* fs, const std::string& dir,
                              const SsdKeysCheckpoint& checkpoint) {
  std::string data;
  data.reserve(32 + checkpoint.blocks.size() * kBlockBytes);
  Put(&data, kCheckpointMagic, 8);
  Put(&data, checkpoint.seq, 8);
  Put(&data, checkpoint.blocks.size(), 8);
  for (const KvSnapshotBlock& b : checkpoint.blocks) {
    PutKey(&data, b.namespace_id);
    PutKey(&data, b.key);
    PutKey(&data, b.parent);
    Put(&data, b.owner, 4);
    Put(&data, b.bytes, 8);
  }
  Put(&data, Check(data.data(), data.size()), 8);
  return ReplaceFile(fs, dir, "ssd-keys", data);
}

}  // namespace prefixkv::internal
