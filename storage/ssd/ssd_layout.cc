// Encoding and decoding of the SSD tier's RocksDB records (ssd_layout.h, byte
// by byte in docs/ssd.md): record keys, metadata values, counter records and
// little-endian helpers. Keys are big-endian so that one namespace's records
// are contiguous and a purge is one range; counters are fixed-width u64 fields
// merged by addition, so a delta is written without reading the record first.
// The decoders check lengths and the version and refuse what they do not know.
#include "ssd_layout.h"

#include <array>
#include <cstring>

#include "prefixkv/advanced/hash.h"
#include "prefixkv/tier_counter_fields.h"

namespace prefixkv::ssd {
namespace {

void PutBE64(std::string* out, uint64_t v) {
  for (int i = 7; i >= 0; --i) out->push_back(static_cast<char>(v >> (8 * i)));
}
uint64_t GetBE64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
void PutLE64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
uint64_t GetLE64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
void PutLE32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
uint32_t GetLE32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

// The counter record's fields: the first rows of kTierCounterFields.
std::array<uint64_t*, kCounterFields> Fields(TierCounters& c) {
  static_assert(kCounterFields == kTierCounterRecordFields);
  std::array<uint64_t*, kCounterFields> out{};
  for (size_t i = 0; i < kCounterFields; ++i) out[i] = &(c.*kTierCounterFields[i].field);
  return out;
}

}  // namespace

std::string NamespacePrefix(char tag, const BlockKey& ns) {
  std::string k;
  k.reserve(kBlockRecordKeyBytes);
  k.push_back(tag);
  PutBE64(&k, ns.hi);
  PutBE64(&k, ns.lo);
  return k;
}

std::string BlockRecordKey(char tag, const BlockKey& ns, const BlockKey& key) {
  std::string k = NamespacePrefix(tag, ns);
  PutBE64(&k, key.hi);
  PutBE64(&k, key.lo);
  return k;
}

bool ParseNamespacePrefix(std::string_view k, BlockKey* ns) {
  if (k.size() != 17) return false;
  *ns = BlockKey{GetBE64(k.data() + 1), GetBE64(k.data() + 9)};
  return true;
}

bool ParseBlockRecordKey(std::string_view k, BlockKey* ns, BlockKey* key) {
  if (k.size() != kBlockRecordKeyBytes) return false;
  *ns = BlockKey{GetBE64(k.data() + 1), GetBE64(k.data() + 9)};
  *key = BlockKey{GetBE64(k.data() + 17), GetBE64(k.data() + 25)};
  return true;
}

std::string CounterKey(OwnerId owner) {
  std::string k(1, kCounterTag);
  for (int i = 3; i >= 0; --i) k.push_back(static_cast<char>(owner >> (8 * i)));
  return k;
}

bool ParseCounterKey(std::string_view k, OwnerId* owner) {
  if (k.size() != 5 || k[0] != kCounterTag) return false;
  *owner = 0;
  for (int i = 1; i < 5; ++i) *owner = (*owner << 8) | static_cast<uint8_t>(k[i]);
  return true;
}

std::string EncodeMeta(const StoredMeta& m) {
  std::string v(kMetaBytes, '\0');
  char* p = v.data();
  p[0] = static_cast<char>(kMetaVersion);
  p[1] = static_cast<char>(m.dirty ? 1 : 0);  // flags
  p[2] = static_cast<char>(m.chain_hits & 0xFF);
  p[3] = static_cast<char>(m.chain_hits >> 8);
  PutLE32(p + 4, m.owner);
  m.parent.EncodeTo(reinterpret_cast<uint8_t*>(p + 8));
  PutLE64(p + 24, m.payload_bytes);
  PutLE64(p + 32, m.payload_xxh3);
  PutLE64(p + 40, m.access_seq);
  PutLE64(p + 48, m.segment);
  PutLE64(p + 56, m.offset);
  PutLE64(p + 64, Hash64(p, 64));
  return v;
}

Status DecodeMeta(std::string_view v, StoredMeta* m) {
  if (v.empty()) return Status::Corruption("empty block metadata");
  if (static_cast<uint8_t>(v[0]) != kMetaVersion) {
    // A record of this size whose checksum holds once its first byte reads
    // kMetaVersion again is this layout with a damaged version byte, not a
    // newer layout (which would be kept, never served, and keep nothing
    // alive: its block would be lost).
    if (v.size() == kMetaBytes) {
      std::string fixed(v);
      fixed[0] = static_cast<char>(kMetaVersion);
      if (GetLE64(fixed.data() + 64) == Hash64(fixed.data(), 64)) {
        return Status::Corruption("block metadata version byte damaged");
      }
    }
    return Status::NotSupported("block metadata version " +
                                std::to_string(static_cast<uint8_t>(v[0])));
  }
  if (v.size() != kMetaBytes) return Status::Corruption("block metadata length");
  const char* p = v.data();
  if (GetLE64(p + 64) != Hash64(p, 64)) {
    return Status::Corruption("block metadata checksum");
  }
  m->owner = GetLE32(p + 4);
  m->parent = BlockKey::DecodeFrom(reinterpret_cast<const uint8_t*>(p + 8));
  m->payload_bytes = GetLE64(p + 24);
  m->payload_xxh3 = GetLE64(p + 32);
  m->access_seq = GetLE64(p + 40);
  m->dirty = (p[1] & 1) != 0;
  m->chain_hits = static_cast<uint16_t>(static_cast<uint8_t>(p[2]) |
                                        (static_cast<uint8_t>(p[3]) << 8));
  m->segment = GetLE64(p + 48);
  m->offset = GetLE64(p + 56);
  return Status::OK();
}

std::string EncodeCounters(const TierCounters& c) {
  TierCounters copy = c;
  std::string v(kCounterBytes, '\0');
  auto f = Fields(copy);
  for (size_t i = 0; i < kCounterFields; ++i) PutLE64(v.data() + 8 * i, *f[i]);
  return v;
}

bool DecodeCounters(std::string_view v, TierCounters* c) {
  if (v.size() != kCounterBytes) return false;
  auto f = Fields(*c);
  for (size_t i = 0; i < kCounterFields; ++i) *f[i] = GetLE64(v.data() + 8 * i);
  return true;
}

void AddCounters(TierCounters* into, const TierCounters& delta) {
  TierCounters d = delta;
  auto a = Fields(*into);
  auto b = Fields(d);
  for (size_t i = 0; i < kCounterFields; ++i) *a[i] += *b[i];  // wraps on purpose
}

bool IsZero(const TierCounters& c) { return c == TierCounters{}; }

uint64_t PayloadChecksum(const void* data, size_t size) { return Hash64(data, size); }

}  // namespace prefixkv::ssd
