// Encoding and decoding of the key-value space's value records (layout in
// docs/format.md, section 4; the domains' disjointness in docs/protocol.md,
// "Raw keys").
#include "value_record.h"

#include <cstring>

#include "prefixkv/advanced/hash.h"

namespace prefixkv::internal {
namespace {

constexpr char kMagic[4] = {'P', 'K', 'V', 'V'};
constexpr uint16_t kVersion = 1;

BlockKey DomainKey(const char (&domain)[16], std::string_view name) {
  HashStream h(HashStream::Width::k128);
  h.Update(domain, sizeof(domain));
  h.Update(name.data(), name.size());
  return h.Digest128();
}

template <typename T>
void PutLe(uint8_t* out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
}

template <typename T>
T GetLe(const uint8_t* in) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(in[i]) << (8 * i);
  return v;
}

}  // namespace

BlockKey ValueKey(std::string_view name) {
  static constexpr char kDomain[16] = {'p', 'r', 'e', 'f', 'i', 'x', 'k', 'v',
                                       '/', 'r', 'a', 'w', '/', 'v', '3', '|'};
  return DomainKey(kDomain, name);
}

BlockKey LegacyValueKey(std::string_view name) {
  static constexpr char kDomain[16] = {'p', 'r', 'e', 'f', 'i', 'x', 'k', 'v',
                                       '/', 'r', 'a', 'w', '/', 'v', '2', '|'};
  return DomainKey(kDomain, name);
}

SharedBytes EncodeValueRecord(std::string_view name, uint64_t expires_at_ms,
                              const SharedBytes& value,
                              const std::shared_ptr<MemoryResource>& memory) {
  uint8_t* out = nullptr;
  const size_t size = kValueHeaderBytes + name.size() + value.size();
  SharedBytes record;
  if (memory != nullptr) {
    record = SharedBytes::AllocateIn(memory, size, size, SharedBytes::kBufferAlign, &out);
  }
  if (out == nullptr) record = SharedBytes::Allocate(size, &out);
  std::memcpy(out, kMagic, sizeof(kMagic));
  PutLe<uint16_t>(out + 4, kVersion);
  PutLe<uint16_t>(out + 6, 0);  // flags
  PutLe<uint32_t>(out + 8, static_cast<uint32_t>(name.size()));
  PutLe<uint32_t>(out + 12, 0);  // reserved
  PutLe<uint64_t>(out + 16, expires_at_ms);
  if (!name.empty()) std::memcpy(out + kValueHeaderBytes, name.data(), name.size());
  if (!value.empty()) {
    std::memcpy(out + kValueHeaderBytes + name.size(), value.data(), value.size());
  }
  return record;
}

StatusOr<ValueRecord> DecodeValueRecord(const SharedBytes& payload, const BlockKey& key) {
  const uint8_t* p = payload.data();
  if (payload.size() < kValueHeaderBytes || std::memcmp(p, kMagic, sizeof(kMagic)) != 0) {
    return Status::Corruption("not a value record (bad magic or truncated)");
  }
  if (GetLe<uint16_t>(p + 4) != kVersion || GetLe<uint16_t>(p + 6) != 0 ||
      GetLe<uint32_t>(p + 12) != 0) {
    return Status::Corruption("value record of an unknown version or flags");
  }
  const uint32_t name_bytes = GetLe<uint32_t>(p + 8);
  if (name_bytes > payload.size() - kValueHeaderBytes) {
    return Status::Corruption("value record's name runs past its end");
  }
  ValueRecord r;
  r.name =
      std::string_view(reinterpret_cast<const char*>(p + kValueHeaderBytes), name_bytes);
  if (ValueKey(r.name) != key) {
    return Status::Corruption("value record's name does not hash to its key");
  }
  r.expires_at_ms = GetLe<uint64_t>(p + 16);
  const size_t start = kValueHeaderBytes + name_bytes;
  r.value = payload.Slice(start, payload.size() - start);
  return r;
}

}  // namespace prefixkv::internal
