// BlockKey's hex and byte encodings and the small helpers of LayerState and
// BlockRecord (payload sizes, equality, tip-only placeholders). The 16-byte
// form is little-endian, low half first (the codec's and the journal's field
// order); the on-disk keys that must sort are built big-endian elsewhere
// (ssd_layout.cc). FromHex accepts exactly 32 hex digits and answers
// InvalidArgument otherwise, so a key typed into a tool is checked, not guessed.
#include "prefixkv/block.h"

#include <cstring>

namespace prefixkv {
namespace {

void PutLE64(uint8_t* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t GetLE64(const uint8_t* in) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | in[i];
  return v;
}
int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string BlockKey::ToHex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(32, '0');
  for (int i = 0; i < 16; ++i) {
    out[15 - i] = kDigits[(hi >> (4 * i)) & 0xF];
    out[31 - i] = kDigits[(lo >> (4 * i)) & 0xF];
  }
  return out;
}

StatusOr<BlockKey> BlockKey::FromHex(std::string_view hex) {
  if (hex.size() != 32) return Status::InvalidArgument("a block key is 32 hex digits");
  BlockKey k;
  for (size_t i = 0; i < 32; ++i) {
    int v = HexValue(hex[i]);
    if (v < 0) return Status::InvalidArgument("not a hex digit in block key");
    uint64_t& half = i < 16 ? k.hi : k.lo;
    half = (half << 4) | static_cast<uint64_t>(v);
  }
  return k;
}

void BlockKey::EncodeTo(uint8_t out[16]) const {
  PutLE64(out, lo);
  PutLE64(out + 8, hi);
}

BlockKey BlockKey::DecodeFrom(const uint8_t in[16]) {
  return BlockKey{GetLE64(in + 8), GetLE64(in)};
}

size_t LayerState::PayloadBytes() const {
  size_t n = 0;
  for (const Tensor& t : tensors) n += t.nbytes();
  return n;
}

bool LayerState::operator==(const LayerState& o) const {
  return cache_type == o.cache_type && meta == o.meta && placeholder == o.placeholder &&
         tensors == o.tensors;
}

LayerState MakePlaceholder(const std::string& cache_type) {
  LayerState s;
  s.cache_type = cache_type;
  s.placeholder = true;
  return s;
}

size_t BlockRecord::PayloadBytes() const {
  size_t n = 0;
  for (const LayerState& l : layers) n += l.PayloadBytes();
  return n;
}

bool BlockRecord::operator==(const BlockRecord& o) const {
  return key == o.key && parent == o.parent && namespace_id == o.namespace_id &&
         token_count == o.token_count && partial == o.partial && tokens == o.tokens &&
         layers == o.layers;
}

}  // namespace prefixkv
