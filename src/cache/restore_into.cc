// PrefixCache::RestoreInto: a restore assembled straight into the caller's
// memory. The blocks are loaded exactly as Restore loads them (hot hits are
// views of the hot tier's own bytes), then each block's slice of each layer
// is copied once, from the tier's bytes to its place in the destination: no
// intermediate concatenated tensor, so the only copy of a hot hit is the one
// the caller asked for.
//
// Nothing is written until everything is checked: the restored shapes are
// computed from the loaded blocks and every destination is checked against
// its tensor (TensorDestination, tensor.h) before the first byte moves, so a bad
// destination is an error with the caller's memory untouched. A block holds
// every layer, so all blocks are read before layer 0 can complete; the copy
// then runs layer by layer, and the callback tells the caller each finished
// layer while the next ones are copied.
#include <string>

#include "block_builder.h"
#include "prefixkv/advanced/prefix_cache.h"
#include "restore_blocks.h"

namespace prefixkv {
namespace {

using cache::LoadedBlock;

// One tensor of the restore: its pieces and where they go.
struct TensorCopy : cache::TensorParts {
  uint8_t* data = nullptr;
  std::vector<int64_t> strides;  // checked destination strides
};

std::string Where(size_t l, size_t t) {
  return "layer " + std::to_string(l) + " tensor " + std::to_string(t) + ": ";
}

// Every tensor of the restore, each checked against its destination.
StatusOr<std::vector<std::vector<TensorCopy>>> Plan(
    const cache::NamespaceState& ns, const std::vector<LoadedBlock>& blocks,
    std::span<const LayerDestination> destinations) {
  std::vector<std::vector<TensorCopy>> plan(ns.families.size());
  for (size_t l = 0; l < plan.size(); ++l) {
    const size_t tensors = blocks.back().record.layers[l].tensors.size();
    if (destinations[l].tensors.size() != tensors) {
      return Status::InvalidArgument("layer " + std::to_string(l) + ": " +
                                     std::to_string(destinations[l].tensors.size()) +
                                     " destinations for " + std::to_string(tensors) +
                                     " restored tensors");
    }
    for (size_t t = 0; t < tensors; ++t) {
      TensorCopy copy;
      PKV_ASSIGN_OR_RETURN(
          static_cast<cache::TensorParts&>(copy),
          cache::GatherTensorParts(blocks, IsSliceable(ns.families[l]), l, t));
      const TensorDestination& dest = destinations[l].tensors[t];
      StatusOr<std::vector<int64_t>> strides =
          CheckTensorDestination(dest, copy.restored.dtype, copy.restored.shape);
      if (!strides.ok()) {
        return Status::InvalidArgument(Where(l, t) + strides.status().message());
      }
      copy.strides = std::move(strides).value();
      copy.data = static_cast<uint8_t*>(dest.data);
      plan[l].push_back(std::move(copy));
    }
  }
  return plan;
}

// Restores at least this large are copied with non-temporal stores: they
// exceed the CPU caches, so plain stores would only add a read of every
// destination line (measured in docs/benchmarks.md, "RestoreInto").
constexpr uint64_t kStreamingRestoreBytes = uint64_t{16} << 20;

void Copy(const TensorCopy& copy, bool stream) {
  const size_t element_bytes = DTypeSize(copy.restored.dtype);
  uint8_t* dst = copy.data;
  for (const Tensor* part : copy.parts) {
    CopyToStrided(part->data(), part->shape(), element_bytes, dst, copy.strides, stream);
    if (copy.parts.size() > 1) dst += part->dim(copy.axis) * copy.strides[copy.axis];
  }
}

}  // namespace

StatusOr<RestoreIntoResult> PrefixCache::RestoreInto(
    const MatchResult& match, std::span<const LayerDestination> destinations,
    const LayerRestoredCallback& on_layer) {
  PKV_ASSIGN_OR_RETURN(cache::NamespaceState * ns, Find(match.ns));
  if (destinations.size() != ns->families.size()) {
    return Status::InvalidArgument(std::to_string(destinations.size()) +
                                   " layer destinations for a namespace of " +
                                   std::to_string(ns->families.size()) + " layers");
  }
  RestoreIntoResult out;
  PKV_ASSIGN_OR_RETURN(
      std::vector<LoadedBlock> blocks,
      cache::LoadRestoreBlocks(*ns, match, options_.decode_limits, &out.result));
  if (blocks.empty()) return out;
  PKV_ASSIGN_OR_RETURN(std::vector<std::vector<TensorCopy>> plan,
                       Plan(*ns, blocks, destinations));
  uint64_t bytes = 0;
  for (const LoadedBlock& block : blocks) bytes += block.record.PayloadBytes();
  const bool stream = bytes >= kStreamingRestoreBytes;
  for (size_t l = 0; l < plan.size(); ++l) {
    out.result.layers.push_back(cache::RestoredLayerHead(*ns, blocks, l));
    out.written.emplace_back();
    for (const TensorCopy& copy : plan[l]) {
      Copy(copy, stream);
      out.written.back().push_back(copy.restored);
    }
    if (on_layer) on_layer(l);
  }
  return out;
}

}  // namespace prefixkv
