// TipLineage (tip_lineage.h): the map from each recorded tip to the tip it
// extended, which supersede-on-extend needs to find the grandparent tip to
// strip, and its persistent form. The map is stored as an ordinary block record
// under a reserved key, so the block codec checksums it and every tier keeps it
// like any block; FromRecord checks the record's shape, magic, version, size
// against the count and every entry's flags, and answers Corruption otherwise.
#include "prefixkv/advanced/tip_lineage.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "prefixkv/block_key.h"

namespace prefixkv {
namespace {

constexpr uint32_t kMagic = 0x4C564B50;  // "PKVL" read as little-endian u32
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 16;
constexpr size_t kEntryBytes = 64;

void PutU64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t GetU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace

BlockKey TipLineage::RecordKey(const BlockKey& root) {
  const std::string extra[] = {"prefixkv/tip-lineage/v1"};
  return ChainKey(root, {}, extra);
}

BlockKey TipLineage::PreviousOf(const BlockKey& tip) const {
  auto it = tips_.find(tip);
  return it == tips_.end() ? BlockKey{} : it->second.previous;
}

void TipLineage::Record(const BlockKey& tip, const BlockKey& previous,
                        const TipPlace& place) {
  tips_[tip] = Entry{previous, place, next_seq_++};
}

void TipLineage::Forget(const BlockKey& tip) { tips_.erase(tip); }

std::vector<std::pair<BlockKey, BlockKey>> TipLineage::Entries() const {
  std::vector<std::pair<uint64_t, std::pair<BlockKey, BlockKey>>> ordered;
  ordered.reserve(tips_.size());
  for (const auto& [tip, e] : tips_) ordered.push_back({e.seq, {tip, e.previous}});
  std::sort(ordered.begin(), ordered.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::pair<BlockKey, BlockKey>> out;
  out.reserve(ordered.size());
  for (const auto& o : ordered) out.push_back(o.second);
  return out;
}

BlockRecord TipLineage::ToRecord(const BlockKey& root) const {
  const size_t size = kHeaderBytes + kEntryBytes * tips_.size();
  uint8_t* out = nullptr;
  SharedBytes bytes = SharedBytes::Allocate(size, &out);
  PutU64(out, uint64_t{kMagic} | (uint64_t{kVersion} << 32));
  PutU64(out + 8, tips_.size());
  uint8_t* p = out + kHeaderBytes;
  for (const auto& [tip, e] : tips_) {
    tip.EncodeTo(p);
    e.previous.EncodeTo(p + 16);
    e.place.parent.EncodeTo(p + 32);
    PutU64(p + 48, e.seq);
    PutU64(p + 56, uint64_t{e.place.token_count} | (uint64_t{e.place.partial} << 32));
    p += kEntryBytes;
  }
  BlockRecord rec;
  rec.key = RecordKey(root);
  rec.parent = root;
  rec.namespace_id = root;
  LayerState layer;
  layer.cache_type = kLineageLayerType;
  layer.tensors.emplace_back(
      DType::kUInt8, std::vector<int64_t>{static_cast<int64_t>(size)}, std::move(bytes));
  rec.layers.push_back(std::move(layer));
  return rec;
}

StatusOr<TipLineage> TipLineage::FromRecord(const BlockRecord& rec,
                                            const BlockKey& root) {
  if (rec.key != RecordKey(root) || rec.namespace_id != root || rec.layers.size() != 1 ||
      rec.layers[0].cache_type != kLineageLayerType ||
      rec.layers[0].tensors.size() != 1) {
    return Status::Corruption("not a tip lineage record of namespace " + root.ToHex());
  }
  const SharedBytes& b = rec.layers[0].tensors[0].bytes();
  if (b.size() < kHeaderBytes ||
      GetU64(b.data()) != (uint64_t{kMagic} | uint64_t{kVersion} << 32)) {
    return Status::Corruption("tip lineage record: bad magic or version");
  }
  const uint64_t count = GetU64(b.data() + 8);
  if (count > (b.size() - kHeaderBytes) / kEntryBytes ||
      b.size() != kHeaderBytes + count * kEntryBytes) {
    return Status::Corruption("tip lineage record: size does not match count");
  }
  TipLineage lineage;
  const uint8_t* p = b.data() + kHeaderBytes;
  for (uint64_t i = 0; i < count; ++i, p += kEntryBytes) {
    const uint64_t seq = GetU64(p + 48);
    const uint64_t count_flags = GetU64(p + 56);
    if ((count_flags >> 32) > 1)
      return Status::Corruption("tip lineage record: bad flags");
    const TipPlace place{BlockKey::DecodeFrom(p + 32), static_cast<uint32_t>(count_flags),
                         (count_flags >> 32) == 1};
    lineage.tips_[BlockKey::DecodeFrom(p)] =
        Entry{BlockKey::DecodeFrom(p + 16), place, seq};
    lineage.next_seq_ = std::max(lineage.next_seq_, seq + 1);
  }
  return lineage;
}

}  // namespace prefixkv
