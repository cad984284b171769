// The SSD tier's on-disk record layout (documented byte by byte in docs/ssd.md).
//
// Keys (RocksDB default column family):
//   'm' | namespace (16, big-endian hi, lo) | block key (16, BE)  -> metadata
//   'c' | owner (u32 BE)                                         -> counters (merge-add)
//   'f' "format"                                                 -> "prefixkv-ssd/2"
//   'f' "clean"                                                  -> "1" after Close()
//   'f' "nextsegment"                                            -> lowest new segment id
//   'n' | namespace (16, BE)                                     -> namespace manifest
//   'r' | slot (u32 BE)                                          -> removal record
//   'o' | owner name (bytes)                                     -> its stored owner id
// Big-endian keys keep one namespace contiguous, so a purge is a range.
// Payload bytes are not in RocksDB: the metadata record points at an extent
// in a segment file (storage/ssd_segment.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "prefixkv/advanced/tier.h"
#include "prefixkv/status.h"

namespace prefixkv::ssd {

inline constexpr char kMetaTag = 'm';
inline constexpr char kCounterTag = 'c';
inline constexpr char kManifestTag = 'n';
inline constexpr char kRemovalTag = 'r';
inline constexpr char kOwnerNameTag = 'o';  // ssd_owner_names.h
inline constexpr uint8_t kRemovalVersion = 1;
inline constexpr size_t kRemovalBytes = 42;  // version, reason, seq u64, key, namespace
inline constexpr std::string_view kFormatKey = "fformat";
inline constexpr std::string_view kCleanKey = "fclean";
// SsdTier::SetFlag's records: this prefix, then the flag's name.
inline constexpr std::string_view kFlagPrefix = "fflag:";
// The lowest segment id a new segment may take: above every segment
// unlinked, so that no new file is named like one (a footer names its
// segment, ssd_segment.h: a stale extent of the old file left in the new
// one's tail would name the file it sits in). The removal journal's header
// keeps it as well (ssd_journal.h), for a rebuild that replaces the metadata.
inline constexpr std::string_view kNextSegmentKey = "fnextsegment";
// A file in the data directory while a metadata rebuild runs (ssd_salvage.cc):
// an open that finds it rebuilds again instead of trusting what is there.
inline constexpr char kRebuildMarker[] = "metadata.rebuilding";
inline constexpr std::string_view kFormatValue = "prefixkv-ssd/2";

inline constexpr size_t kBlockRecordKeyBytes = 33;
inline constexpr uint8_t kMetaVersion = 2;
inline constexpr size_t kMetaBytes = 72;
inline constexpr size_t kCounterFields = 11;
inline constexpr size_t kCounterBytes = kCounterFields * 8;

std::string BlockRecordKey(char tag, const BlockKey& ns, const BlockKey& key);
// The 17-byte prefix shared by every record of `tag` in namespace `ns`.
std::string NamespacePrefix(char tag, const BlockKey& ns);
// Parses a 17-byte NamespacePrefix (an 'n' key). False when malformed.
bool ParseNamespacePrefix(std::string_view k, BlockKey* ns);
// Parses a 33-byte 'm' key. False when malformed.
bool ParseBlockRecordKey(std::string_view k, BlockKey* ns, BlockKey* key);
std::string CounterKey(OwnerId owner);
bool ParseCounterKey(std::string_view k, OwnerId* owner);

// The metadata record of one stored block.
struct StoredMeta {
  OwnerId owner = 0;
  BlockKey parent;
  uint64_t payload_bytes = 0;
  uint64_t payload_xxh3 = 0;  // XXH3-64 of the payload, seed 0
  uint64_t access_seq = 0;    // larger = more recently used (persisted LRU order)
  bool dirty = false;         // Put's flag: not stored in any other tier (flags bit 0)
  uint64_t segment = 0;       // segment file id holding the payload's extent
  uint64_t offset = 0;        // byte offset of the extent in it (4096-aligned)
  // Reuse of the block's chain (IndexEntry::chain_hits, the chain policy's
  // fact), saturated at 65535, in bytes 2..3, which records written before it
  // existed hold as 0 (never reused).
  uint16_t chain_hits = 0;
};

// IndexEntry::chain_hits as StoredMeta keeps it.
inline uint16_t PersistedChainHits(uint32_t hits) {
  return hits > 0xFFFF ? uint16_t{0xFFFF} : static_cast<uint16_t>(hits);
}

std::string EncodeMeta(const StoredMeta& m);
// Corruption for a bad length or checksum; NotSupported for an unknown version.
Status DecodeMeta(std::string_view v, StoredMeta* m);

// Counters as 11 little-endian u64 in TierCounters field order. Deltas use
// two's complement, so adding them with wrap-around subtracts.
std::string EncodeCounters(const TierCounters& c);
bool DecodeCounters(std::string_view v, TierCounters* c);
void AddCounters(TierCounters* into, const TierCounters& delta);
bool IsZero(const TierCounters& c);

uint64_t PayloadChecksum(const void* data, size_t size);

// Little-endian u64 in a byte buffer (the journal's and footers' fields).
inline void StoreLE64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint64_t LoadLE64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace prefixkv::ssd
