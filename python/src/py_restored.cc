// Restored and RestoredBlock: numpy views of a PinnedRestore (py_types.h).
#include <utility>

#include "convert.h"
#include "py_types.h"

namespace prefixkv::python {
namespace {

// The pin of the restored block whose payload holds `tensor`'s bytes; null
// for a tensor in a buffer of its own (a concatenation of several blocks).
std::shared_ptr<const void> PinOf(const PinnedRestore& r, const Tensor& tensor) {
  for (const RestoredBlock& block : r.blocks) {
    const uint8_t* begin = block.payload.data();
    if (tensor.data() >= begin && tensor.data() < begin + block.payload.size()) {
      return block.pin;
    }
  }
  return nullptr;
}

PyLayer ToPyLayer(const LayerState& layer, const PinnedRestore& r,
                  const std::shared_ptr<const void>& block_pin, bool per_block) {
  PyLayer out;
  out.cache_type = layer.cache_type;
  out.meta = layer.meta;
  out.placeholder = layer.placeholder;
  for (const Tensor& t : layer.tensors) {
    out.tensors.append(ViewTensor(t, per_block ? block_pin : PinOf(r, t)));
  }
  return out;
}

}  // namespace

PyRestored MakeRestored(PinnedRestore restore) {
  PyRestored out;
  auto r = ReleasedInThisProcessOnly(
      std::make_shared<const PinnedRestore>(std::move(restore)));
  for (const LayerState& layer : r->result.layers) {
    out.layers.append(ToPyLayer(layer, *r, nullptr, /*per_block=*/false));
  }
  out.counters = std::shared_ptr<const RestoreResult>(r, &r->result);
  out.restore = std::move(r);
  out.blocks = py::none();
  return out;
}

py::list PyRestored::Blocks() {
  if (!blocks.is_none()) return blocks;
  py::list list;
  for (const RestoredBlock& block : restore->blocks) {
    PyRestoredBlock b;
    b.key = block.key.ToHex();
    b.level = std::string(TierLevelName(block.level));
    b.pinned = block.pin != nullptr;
    b.token_count = block.record.token_count;
    b.partial = block.record.partial;
    b.payload_address = reinterpret_cast<uintptr_t>(block.payload.data());
    b.payload_size = block.payload.size();
    for (const LayerState& layer : block.record.layers) {
      b.layers.append(ToPyLayer(layer, *restore, block.pin, /*per_block=*/true));
    }
    list.append(std::move(b));
  }
  blocks = list;
  return list;
}

}  // namespace prefixkv::python
