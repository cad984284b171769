// The values the prefix cache (and the Engine over it) hands out: namespaces,
// what a store did, a match, a restore.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "prefixkv/block.h"
#include "prefixkv/tensor.h"
#include "prefixkv/tier_types.h"

namespace prefixkv {

// The cache type name a restored rotating layer carries: the warm-restored
// rotating family member, whatever rotating name the block was stored under.
// Consumers must match it by family (CacheTypeRegistry::IsRotatingFamily).
inline constexpr const char* kRestoredRotatingType = "PrefillReadyRotatingKVCache";

// A registered model. Cheap to copy; valid for the PrefixCache that issued it.
struct Namespace {
  uint32_t index = UINT32_MAX;  // position in the cache's namespace table
  BlockKey root;                // the chain root (fingerprint hash)
};

// What the embedder knows about whether a store's blocks will be read again.
enum class ReuseHint : uint8_t {
  kNormal,  // no hint: the hot tier's policy orders the blocks as usual
  // Unlikely to be read again, by a predictor the embedder measured on its
  // own traffic (answer length predicts it on some traces and not on others:
  // docs/eviction.md, "Reuse hints"). The blocks this store writes leave the hot tier
  // before every block without the hint (the least recently used first) until one is read
  // again. Blocks already cached keep their place; the SSD and remote tiers
  // ignore the hint.
  kUnlikely,
};

struct StoreOptions {
  ReuseHint reuse = ReuseHint::kNormal;
};

// What one Store() did.
struct StoreResult {
  size_t blocks = 0;               // full blocks covered by the tokens
  size_t blocks_written = 0;       // blocks that were not cached and were put
  size_t blocks_deduplicated = 0;  // blocks already cached, left as they were
  BlockKey tip;                    // the last full block; zero when none
  bool tip_state_stored = false;   // tip-only layers landed in the tip, real
  bool tip_rewritten = false;      // an existing placeholder tip got the real state
  BlockKey stripped_tip;           // grandparent tip stripped; zero when none
  std::string note;                // why tip-only state was not stored, if so
  // Written blocks the hot tier took ReuseHint::kUnlikely for (0 without the
  // hint, or without a hot tier).
  size_t blocks_hinted_unlikely = 0;
};

// The longest cached prefix of a prompt.
struct MatchResult {
  Namespace ns;
  std::vector<BlockKey> keys;    // matched blocks, in chain order
  std::vector<TierLevel> tiers;  // where each block was found
  std::vector<int32_t> tokens;   // the matched tokens (keys.size() * block_tokens)
  uint64_t matched_tokens() const { return tokens.size(); }
};

// The blocks a match found after one of its blocks, for a read of that block
// alone (Engine::GetBlock: a served restore's PKV.GET). When the block holds
// other shapes than the spec's they are refused with it, as Restore ends
// before such a block and drops the matched blocks after it.
struct BlocksAfter {
  std::span<const BlockKey> keys;  // in chain order
  uint64_t tokens = 0;             // their tokens
};

// Rotating layers seen in block metadata: what window the restored caches use.
struct WindowPadding {
  std::vector<int64_t> window_tokens;  // per layer: max_size of rotating layers, else 0
  int64_t max_window_tokens = 0;       // largest window (0: no rotating layer)
  bool has_rotating_layers() const { return max_window_tokens > 0; }
};

// Per-layer caches ready to continue decoding at position restored_tokens.
struct RestoreResult {
  // One per namespace layer (empty when restored_tokens == 0). Sliceable
  // layers: the blocks' slices concatenated along the token axis, meta of the
  // newest block. Rotating layers: the tip's tensors with meta
  // (keep, max_size, offset = restored_tokens, idx), type kRestoredRotatingType.
  // Arrays/composite layers: the tip's state as stored.
  std::vector<LayerState> layers;
  uint64_t restored_tokens = 0;
  size_t restored_blocks = 0;
  size_t blocks_from_hot = 0;    // zero-copy reads
  size_t blocks_from_ssd = 0;    // verified reads
  uint64_t tokens_from_hot = 0;  // tokens of the blocks read from RAM
  uint64_t tokens_from_ssd = 0;  // tokens of the blocks read from SSD
  // Blocks Match fetched from the remote tier (another node computed them),
  // not counted in the two above.
  size_t blocks_from_remote = 0;
  uint64_t tokens_from_remote = 0;
  WindowPadding window;  // from the tip's metadata
  // Empty when every matched token was restored; otherwise why not (a block
  // vanished or failed validation, or walk-back dropped trailing blocks).
  std::string reason;
};

// The dtype and shape of one tensor a RestoreInto wrote: the tensor Restore
// would have returned in its place.
struct RestoredTensorShape {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  bool operator==(const RestoredTensorShape&) const = default;
};

// RestoreInto's value.
struct RestoreIntoResult {
  // Exactly what Restore returns, except that layers[l].tensors are empty:
  // their bytes are in the caller's destinations (cache_type, meta and
  // placeholder are set as Restore sets them).
  RestoreResult result;
  // Per layer, per tensor: what was written (empty when nothing was restored).
  std::vector<std::vector<RestoredTensorShape>> written;
};

// Told that layer `layer` is completely written (RestoreInto calls it once
// per layer, in layer order, on the calling thread, holding no lock).
using LayerRestoredCallback = std::function<void(size_t layer)>;

// RestorePlan: where a restore's bytes already are, for a copy engine to
// gather them with no CPU copy (Engine::PlanRestore).
//
// Each restored layer gets a contiguous layout: its tensors one after the
// other, each at a 64-byte aligned offset, each exactly as Restore returns
// it (row-major). The plan lists, per layer, the host ranges holding those
// bytes, each with where it goes in that layout; applying every range of a
// layer fills its tensors byte for byte as Restore would. A range is 2-D
// (cudaMemcpy2D's width and height): `count` chunks of `bytes`, chunk i read
// at src + i * src_stride_bytes and written at dst_offset + i *
// dst_stride_bytes, because a block holds a slice of each tensor's token
// axis and the axis is not the outermost one (keys [1, heads, tokens, dim]).
//
// Every range lies inside a region of the engine's memory resource, which
// EngineOptions::on_region reported (registered memory, for DMA). Hot blocks
// are pinned in the hot tier (never evicted, counted in pinned_bytes) until
// the plan is released; SSD and remote hits and decompressed tensors are
// staged in the resource first and held by the plan.
//
//   RestorePlan plan = engine->PlanRestore(match).value();
//   for (size_t l = 0; l < plan.layers.size(); ++l)
//     for (const PlanRange& r : plan.layers[l].ranges)
//       cudaMemcpy2DAsync(dev[l] + r.dst_offset, r.dst_stride_bytes, r.src,
//                         r.src_stride_bytes, r.bytes, r.count,
//                         cudaMemcpyHostToDevice, stream);
//   cudaStreamSynchronize(stream);
//   plan.Release();  // or let it go

// One strided piece of a layer: `count` chunks of `bytes` bytes.
struct PlanRange {
  const uint8_t* src = nullptr;   // inside a reported region
  uint64_t bytes = 0;             // one chunk
  uint64_t count = 1;             // chunks
  uint64_t src_stride_bytes = 0;  // between chunks in the source (>= bytes)
  uint64_t dst_offset = 0;        // of the first chunk, in the layer's layout
  uint64_t dst_stride_bytes = 0;  // between chunks in the layout (>= bytes)
};

// One restored tensor's place in its layer's layout.
struct PlannedTensor {
  RestoredTensorShape shape;  // dtype and shape, as Restore returns it
  uint64_t offset = 0;        // in the layer's layout; 64-byte aligned
  uint64_t nbytes = 0;        // row-major and contiguous from `offset`
};

// One restored layer: its contiguous layout and the ranges that fill it.
// The gaps between tensors (64-byte alignment) are covered by no range.
struct PlannedLayer {
  uint64_t bytes = 0;                  // the layout's size
  std::vector<PlannedTensor> tensors;  // in the layer's tensor order
  std::vector<PlanRange> ranges;       // cover every tensor's bytes once
};

// Engine::PlanRestore's value. Copies share one hold: the blocks stay
// pinned, and the ranges valid, until every copy is released or destroyed.
// It may outlive the Engine (the hold keeps the RAM budget and the memory
// resource alive). Not thread-safe itself; its ranges may be read from any
// thread while it is held.
struct RestorePlan {
  // What Restore returns, except that layers carry no tensors (cache type,
  // meta and placeholder flag only): their bytes are in the ranges.
  RestoreResult result;
  std::vector<PlannedLayer> layers;  // one per layer of `result`
  // Keeps the pins and the staged buffers; null once released.
  std::shared_ptr<const void> hold;

  // Unpins the blocks and frees the staging now. The ranges dangle after.
  void Release() { hold.reset(); }
};

// Applies `layer`'s ranges with memcpy into `dst` (layer.bytes writable
// bytes): what a copy engine would do, for CPU callers and tests.
// REQUIRES: the plan `layer` belongs to is held.
void CopyPlannedLayer(const PlannedLayer& layer, void* dst);

}  // namespace prefixkv
