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
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "prefixkv/prefix_types.h"
#include "prefixkv/tensor.h"

namespace prefixkv {

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
