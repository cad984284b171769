// PrefixCache::PlanRestore: a restore described as host ranges instead of
// copied (RestorePlan, prefix_types.h). The blocks are loaded exactly as Restore loads
// them (restore.cc: validation, walk-back, the partial tip beside the
// chain); each restored tensor is then the same parts RestoreInto copies
// (GatherTensorParts), and each part becomes one 2-D range into the layer's
// layout. A part whose bytes are not in the memory resource (an SSD or
// remote read, a decompressed tensor) is staged there first, so every range
// lies in a region the embedder registered. The plan holds the loaded
// records (their bytes), the staging and the pins the caller's `pin` gave.
#include <cstring>
#include <string>

#include "prefixkv/advanced/prefix_cache.h"
#include "prefixkv/prefix_types.h"
#include "restore_blocks.h"

namespace prefixkv {
namespace {

using cache::LoadedBlock;

constexpr uint64_t kTensorAlign = 64;

// What a plan keeps alive until it is released. Pins are released first
// (member order, reversed), while the records still hold the bytes.
struct PlanHold {
  std::vector<LoadedBlock> blocks;
  std::vector<SharedBytes> staged;
  std::vector<std::shared_ptr<const void>> pins;
};

// Where the plan reads `part` from: its own bytes when they lie in
// `memory`, else a staged copy there.
StatusOr<const uint8_t*> Hosted(const Tensor& part,
                                const std::shared_ptr<MemoryResource>& memory,
                                PlanHold* hold) {
  if (part.nbytes() == 0 || memory->Contains(part.data(), part.nbytes()))
    return part.data();
  SharedBytes staged = SharedBytes::CopyIn(memory, part.data(), part.nbytes());
  if (staged.data() == nullptr) {
    return Status::NoSpace("restore plan: the memory resource has no room to stage " +
                           std::to_string(part.nbytes()) + " bytes");
  }
  hold->staged.push_back(std::move(staged));
  return hold->staged.back().data();
}

uint64_t Product(const std::vector<int64_t>& shape, size_t from, size_t to) {
  uint64_t n = 1;
  for (size_t i = from; i < to; ++i) n *= static_cast<uint64_t>(shape[i]);
  return n;
}

// Adds tensor `t` at the end of `layer`'s layout, one range per part. A
// part holds `tokens` rows of the token axis for each of the `outer` index
// combinations before it: `outer` chunks, each landing one restored row
// block apart. A chunk that spans the whole restored axis makes the range
// contiguous (one chunk).
Status AddTensor(const cache::TensorParts& t,
                 const std::shared_ptr<MemoryResource>& memory, PlanHold* hold,
                 PlannedLayer* layer) {
  PlannedTensor planned;
  planned.shape = t.restored;
  planned.offset = (layer->bytes + kTensorAlign - 1) / kTensorAlign * kTensorAlign;
  const std::vector<int64_t>& shape = t.restored.shape;
  planned.nbytes = Product(shape, 0, shape.size()) * DTypeSize(t.restored.dtype);
  layer->bytes = planned.offset + planned.nbytes;
  layer->tensors.push_back(planned);
  const bool stacked = t.parts.size() > 1 || !shape.empty();
  const uint64_t row =
      stacked ? Product(shape, t.axis + 1, shape.size()) * DTypeSize(t.restored.dtype)
              : planned.nbytes;
  const uint64_t outer = stacked ? Product(shape, 0, t.axis) : 1;
  const uint64_t restored_rows = stacked ? static_cast<uint64_t>(shape[t.axis]) : 1;
  uint64_t rows_before = 0;
  for (const Tensor* part : t.parts) {
    const uint64_t rows = stacked ? static_cast<uint64_t>(part->dim(t.axis)) : 1;
    PKV_ASSIGN_OR_RETURN(const uint8_t* src, Hosted(*part, memory, hold));
    PlanRange r{.src = src,
                .bytes = rows * row,
                .count = outer,
                .src_stride_bytes = rows * row,
                .dst_offset = planned.offset + rows_before * row,
                .dst_stride_bytes = restored_rows * row};
    if (r.count == 1 || r.bytes == r.dst_stride_bytes) {
      r.bytes *= r.count;
      r.count = 1;
      r.src_stride_bytes = r.dst_stride_bytes = r.bytes;
    }
    if (r.bytes > 0) layer->ranges.push_back(r);
    rows_before += rows;
  }
  return Status::OK();
}

}  // namespace

void CopyPlannedLayer(const PlannedLayer& layer, void* dst) {
  auto* out = static_cast<uint8_t*>(dst);
  for (const PlanRange& r : layer.ranges) {
    for (uint64_t i = 0; i < r.count; ++i) {
      std::memcpy(out + r.dst_offset + i * r.dst_stride_bytes,
                  r.src + i * r.src_stride_bytes, r.bytes);
    }
  }
}

StatusOr<RestorePlan> PrefixCache::PlanRestore(
    const MatchResult& match, const std::shared_ptr<MemoryResource>& memory,
    const PlanPinner& pin) {
  if (memory == nullptr)
    return Status::InvalidArgument("restore plan: no memory resource");
  PKV_ASSIGN_OR_RETURN(cache::NamespaceState * ns, Find(match.ns));
  RestorePlan plan;
  auto hold = std::make_shared<PlanHold>();
  PKV_ASSIGN_OR_RETURN(
      hold->blocks,
      cache::LoadRestoreBlocks(*ns, match, options_.decode_limits, &plan.result));
  if (hold->blocks.empty()) {
    plan.hold = std::move(hold);  // nothing to hold, but not released
    return plan;
  }
  if (pin) {
    for (const LoadedBlock& block : hold->blocks) {
      if (std::shared_ptr<const void> p = pin(block.record))
        hold->pins.push_back(std::move(p));
    }
  }
  for (size_t l = 0; l < ns->families.size(); ++l) {
    plan.result.layers.push_back(cache::RestoredLayerHead(*ns, hold->blocks, l));
    PlannedLayer& layer = plan.layers.emplace_back();
    const size_t tensors = hold->blocks.back().record.layers[l].tensors.size();
    for (size_t t = 0; t < tensors; ++t) {
      PKV_ASSIGN_OR_RETURN(
          cache::TensorParts parts,
          cache::GatherTensorParts(hold->blocks, IsSliceable(ns->families[l]), l, t));
      PKV_RETURN_IF_ERROR(AddTensor(parts, memory, hold.get(), &layer));
    }
  }
  plan.hold = std::move(hold);
  return plan;
}

}  // namespace prefixkv
