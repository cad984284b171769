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
// every layer, so all blocks are read before layer 0 can complete. Blocks
// read from SSD or the remote tier are copied as each one arrives, while the
// read-ahead threads read the next ones (EarlyCopy); hot blocks are copied
// at the end, layer by layer, and the callback tells the caller each
// finished layer while the next ones are copied.
#include <algorithm>
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

// Copies `copy`'s parts but those `skip` says are in place already (a
// sliceable tensor's part b is block b's slice; may be null).
void Copy(const TensorCopy& copy, bool stream, const std::vector<bool>* skip) {
  const size_t element_bytes = DTypeSize(copy.restored.dtype);
  uint8_t* dst = copy.data;
  for (size_t b = 0; b < copy.parts.size(); ++b) {
    const Tensor* part = copy.parts[b];
    if (skip == nullptr || !(*skip)[b]) {
      CopyToStrided(part->data(), part->shape(), element_bytes, dst, copy.strides,
                    stream);
    }
    if (copy.parts.size() > 1) dst += part->dim(copy.axis) * copy.strides[copy.axis];
  }
}

// Copies each block a restore reads from SSD or the remote tier into the
// caller's memory as soon as it is loaded and valid (LoadedBlockSink), so a
// cold restore's copy runs while the next blocks are read instead of after
// the last one. Hot blocks are left to the final copy, which goes layer by
// layer so that a hot restore's layer 0 completes first.
//
// It lays the blocks out where a restore of the whole match puts them, and
// only in namespaces whose layers are all sliceable: there a destination
// that fits the whole match fits any shorter restore too (checked, with the
// block-0 shapes, before the first byte moves; a destination that does not
// fit turns early copying off and is judged by Plan as before), and blocks
// that passed validation agree on every shape with block 0. When the restore
// ends up other than the blocks copied (a block failed: fewer tokens, so
// other row-major strides), CopiedInPlace is false for every block and the
// final copy writes everything again.
class EarlyCopy {
 public:
  EarlyCopy(const cache::NamespaceState& ns, const MatchResult& match,
            std::span<const LayerDestination> destinations)
      : destinations_(destinations),
        total_tokens_(static_cast<int64_t>(match.tokens.size())),
        blocks_(match.keys.size()),
        on_(match.keys.size() > 1 && destinations.size() == ns.families.size() &&
            std::all_of(ns.families.begin(), ns.families.end(),
                        [](CacheFamily f) { return IsSliceable(f); })) {}

  cache::LoadedBlockSink Sink() {
    if (!on_) return {};
    return [this](size_t i, const LoadedBlock& block) { OnBlock(i, block); };
  }

  // Whether every part of `blocks` not from the hot tier is in place for a
  // restore of exactly these blocks; `copied` then says which.
  bool CopiedInPlace(const std::vector<LoadedBlock>& blocks,
                     std::vector<bool>* copied) const {
    if (!on_ || seen_.size() < blocks.size()) return false;
    int64_t tokens = 0;
    for (size_t b = 0; b < blocks.size(); ++b) {
      if (blocks[b].record.key != seen_[b]) return false;
      tokens += blocks[b].record.token_count;
    }
    if (tokens != total_tokens_) return false;
    *copied = copied_;
    copied->resize(blocks.size());
    return true;
  }

 private:
  struct Target {
    uint8_t* data = nullptr;
    std::vector<int64_t> strides;  // checked for the whole match's shape
    DType dtype = DType::kFloat32;
    std::vector<int64_t> across;  // block 0's shape with 0 tokens
  };

  void OnBlock(size_t i, const LoadedBlock& block) {
    if (!on_ || i != seen_.size() || (i == 0 && !Setup(block.record)) ||
        block.record.layers.size() != targets_.size()) {
      on_ = false;
      return;
    }
    const bool copy = block.level != TierLevel::kHot;
    for (size_t l = 0; l < targets_.size() && on_; ++l) {
      const std::vector<Tensor>& parts = block.record.layers[l].tensors;
      if (parts.size() != targets_[l].size()) on_ = false;
      for (size_t t = 0; t < parts.size() && on_; ++t) {
        const Tensor& part = parts[t];
        const Target& to = targets_[l][t];
        const size_t axis = cache::TokenAxis(part);
        std::vector<int64_t> shape = part.shape();
        const int64_t n = shape.size() == to.across.size() ? shape[axis] : -1;
        if (n >= 0) shape[axis] = 0;
        if (part.dtype() != to.dtype || shape != to.across ||
            n != static_cast<int64_t>(block.record.token_count) ||
            tokens_ + n > total_tokens_) {
          on_ = false;  // validation should have refused it; Plan will say why
          break;
        }
        if (copy) {
          CopyToStrided(part.data(), part.shape(), DTypeSize(part.dtype()),
                        to.data + tokens_ * to.strides[axis], to.strides, stream_);
        }
      }
    }
    seen_.push_back(block.record.key);
    copied_.push_back(copy);
    tokens_ += block.record.token_count;
  }

  // The destinations checked for the shapes a restore of the whole match
  // has, from block 0's.
  bool Setup(const BlockRecord& first) {
    if (first.layers.size() != destinations_.size()) return false;
    targets_.resize(first.layers.size());
    for (size_t l = 0; l < first.layers.size(); ++l) {
      const std::vector<Tensor>& tensors = first.layers[l].tensors;
      if (tensors.size() != destinations_[l].tensors.size()) return false;
      for (size_t t = 0; t < tensors.size(); ++t) {
        const Tensor& part = tensors[t];
        if (part.ndim() < 2) return false;
        Target to;
        to.dtype = part.dtype();
        to.across = part.shape();
        to.across[cache::TokenAxis(part)] = 0;
        std::vector<int64_t> whole = part.shape();
        whole[cache::TokenAxis(part)] = total_tokens_;
        StatusOr<std::vector<int64_t>> strides =
            CheckTensorDestination(destinations_[l].tensors[t], to.dtype, whole);
        if (!strides.ok()) return false;
        to.strides = std::move(strides).value();
        to.data = static_cast<uint8_t*>(destinations_[l].tensors[t].data);
        targets_[l].push_back(std::move(to));
      }
    }
    stream_ = first.PayloadBytes() * blocks_ >= kStreamingRestoreBytes;
    return true;
  }

  const std::span<const LayerDestination> destinations_;
  const int64_t total_tokens_;  // of the whole match
  const size_t blocks_;         // of the whole match
  bool on_;
  bool stream_ = false;
  std::vector<std::vector<Target>> targets_;  // [layer][tensor]
  int64_t tokens_ = 0;                        // of the blocks seen
  std::vector<BlockKey> seen_;                // the blocks heard of, in order
  std::vector<bool> copied_;                  // ... and whether each was copied
};

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
  EarlyCopy early(*ns, match, destinations);
  PKV_ASSIGN_OR_RETURN(std::vector<LoadedBlock> blocks,
                       cache::LoadRestoreBlocks(*ns, match, options_.decode_limits,
                                                &out.result, early.Sink()));
  if (blocks.empty()) return out;
  PKV_ASSIGN_OR_RETURN(std::vector<std::vector<TensorCopy>> plan,
                       Plan(*ns, blocks, destinations));
  std::vector<bool> copied;
  const bool in_place = early.CopiedInPlace(blocks, &copied);
  uint64_t bytes = 0;
  for (const LoadedBlock& block : blocks) bytes += block.record.PayloadBytes();
  const bool stream = bytes >= kStreamingRestoreBytes;
  for (size_t l = 0; l < plan.size(); ++l) {
    out.result.layers.push_back(cache::RestoredLayerHead(*ns, blocks, l));
    out.written.emplace_back();
    for (const TensorCopy& copy : plan[l]) {
      Copy(copy, stream,
           in_place && copy.parts.size() == blocks.size() ? &copied : nullptr);
      out.written.back().push_back(copy.restored);
    }
    if (on_layer) on_layer(l);
  }
  return out;
}

}  // namespace prefixkv
