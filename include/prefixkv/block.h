// LayerState and BlockRecord: what one cached token block is.
//
// A block holds `token_count` tokens' worth of cache for every layer of a model.
// Its key is the chain hash of its whole prefix (see block_key.h), so equal keys
// mean equal prefixes. Sliceable layers carry their own slice in every block;
// rotating and arrays layers are real only in a chain tip and a placeholder
// (zero tensors, `placeholder` set) everywhere else.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "prefixkv/block_key.h"
#include "prefixkv/tensor.h"

namespace prefixkv {

// One layer's cache inside one block.
struct LayerState {
  std::string cache_type;         // e.g. "KVCache", "RotatingKVCache"
  std::vector<std::string> meta;  // the cache type's meta state, as strings
  bool placeholder = false;       // true: a stand-in that carries no state
  std::vector<Tensor> tensors;    // e.g. {keys, values}; empty for placeholders

  // Sum of tensor byte lengths.
  size_t PayloadBytes() const;
  bool operator==(const LayerState& other) const;
};

// The standard placeholder for a non-sliceable layer in a non-tip block.
LayerState MakePlaceholder(const std::string& cache_type);

struct BlockRecord {
  BlockKey key;           // chain hash of this block's whole prefix
  BlockKey parent;        // key of the previous block; the namespace root for the first
  BlockKey namespace_id;  // root of the chain (fingerprint of model + layout)
  uint32_t token_count = 0;     // tokens this block covers
  bool partial = false;         // true: fewer than block_tokens tokens (a marked tail)
  std::vector<int32_t> tokens;  // optional: the token ids (empty when not stored)
  std::vector<LayerState> layers;

  size_t PayloadBytes() const;  // sum over layers
  bool operator==(const BlockRecord& other) const;
};

}  // namespace prefixkv
