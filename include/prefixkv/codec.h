// The block record codec: one binary encoding of a BlockRecord, shared by the
// SSD tier and the network server. docs/format.md describes it byte by byte.
//
// Encoding is canonical (one record has exactly one encoding for given options),
// every byte is covered by the XXH3-64 checksum, and decoding is bounded: every
// size is checked against DecodeLimits before anything is allocated, and any
// inconsistency is a Corruption status, never undefined behaviour.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "prefixkv/block.h"
#include "prefixkv/bytes.h"
#include "prefixkv/memory_resource.h"
#include "prefixkv/status.h"

namespace prefixkv {

inline constexpr uint32_t kRecordMagic = 0x42564B50;  // "PKVB" read as little-endian u32
inline constexpr uint16_t kRecordFormatVersion = 1;
inline constexpr size_t kRecordFixedHeaderBytes = 88;
inline constexpr size_t kRecordTensorAlignment = 16;

struct EncodeOptions {
  // Try zstd on each tensor and keep the compressed form only when it is smaller
  // by at least `min_compression_gain` of the raw size. Default: off (KV caches
  // of float16 compress poorly and the hot path wants memcpy speed).
  bool compress = false;
  int zstd_level = 1;                  // zstd level when compress is on
  size_t min_compress_bytes = 4096;    // tensors smaller than this stay raw
  double min_compression_gain = 0.05;  // keep zstd only when >= 5% smaller
  bool store_tokens = true;            // write BlockRecord::tokens when present
  // Where encoded records are allocated (memory_resource.h), so a block goes
  // into the hot tier without another copy. Null: the process heap; also the
  // fallback when the resource has no room.
  std::shared_ptr<MemoryResource> memory;
};

struct DecodeLimits {
  size_t max_record_bytes = size_t{4} << 30;  // 4 GiB
  size_t max_tensor_bytes = size_t{2} << 30;  // one uncompressed tensor
  uint32_t max_layers = 4096;
  uint32_t max_tensors_per_layer = 16;
  uint32_t max_ndim = 8;
  uint32_t max_meta_entries = 64;
  uint32_t max_string_bytes = 1024;  // a cache type name or meta entry
  uint32_t max_tokens = 1u << 22;
};

// Encodes `record` into one 64-byte aligned buffer.
// InvalidArgument when the record cannot be encoded (a tensor whose byte length
// does not match its shape, too many layers, a string that is too long...).
StatusOr<SharedBytes> EncodeBlock(const BlockRecord& record,
                                  const EncodeOptions& options = {});

// Rows [start, start + length) along a tensor's axis ndim - 2: the token axis
// of a KV cache tensor, the part of a store's layer cache one block holds.
struct TokenRows {
  int64_t start = 0;
  int64_t length = 0;
};

// EncodeBlock of a block cut from larger tensors (a store's layer caches)
// without an intermediate slice: every tensor of layer i is encoded as the
// rows `rows[i]` of it when set (its dimension ndim - 2 becomes
// rows[i]->length), whole otherwise. The result is byte for byte EncodeBlock
// of the sliced record. Each run of rows is copied once, straight from the
// source tensor into the record, and hashed while it is in cache: one copy
// and one XXH3 pass per byte, whatever the layout. `rows` is empty (nothing
// sliced) or has one entry per layer. InvalidArgument as EncodeBlock, and for
// rows outside a tensor or a sliced tensor of fewer than 2 dimensions.
StatusOr<SharedBytes> EncodeBlockRows(const BlockRecord& record,
                                      const std::vector<std::optional<TokenRows>>& rows,
                                      const EncodeOptions& options = {});

// Decodes and verifies a record. Raw tensors of the result view `encoded`
// (no copy, they keep it alive); compressed tensors are decompressed into
// new buffers. Corruption for any malformed or inconsistent input.
StatusOr<BlockRecord> DecodeBlock(const SharedBytes& encoded,
                                  const DecodeLimits& limits = {});

// DecodeBlock without the checksum pass over the tensor bytes, for records
// this process encoded and has held in memory since (hot-tier hits: the
// zero-copy restore path). Every bound and layout check still runs. Never use
// it for bytes read from disk or the network.
StatusOr<BlockRecord> DecodeTrustedBlock(const SharedBytes& encoded,
                                         const DecodeLimits& limits = {});

// Just the checksum check (and the fixed-header sanity checks): Corruption when
// the record is damaged. Cheaper than DecodeBlock for raw records only in that it
// builds no BlockRecord.
Status VerifyBlock(const SharedBytes& encoded, const DecodeLimits& limits = {});

// The key, parent and namespace from the fixed header, without verification.
// Corruption when `encoded` is too short or has the wrong magic.
struct RecordIdentity {
  BlockKey key;
  BlockKey parent;
  BlockKey namespace_id;
  uint32_t token_count = 0;
};
StatusOr<RecordIdentity> PeekBlockIdentity(std::string_view encoded);

}  // namespace prefixkv
