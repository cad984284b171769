// Test support for fail-closed namespaces: a spec that sets every
// NamespaceSpec field, and one mutation per field that changes the bytes,
// each with the field name DiffSpecs gives it.
#pragma once

#include <string>

#include "prefixkv/block_key.h"
#include "prefixkv/namespace_spec.h"

namespace prefixkv::testing {

// `base` with every later field set (revision, tokenizer, shapes for each
// layer, quantization, a tensor-parallel position and a salt).
inline NamespaceSpec WithEveryField(NamespaceSpec base) {
  base.salt = "tenant-a";
  base.revision = "rev1";
  base.tokenizer_hash = "abc";
  base.layer_shapes.assign(base.layer_types.size(), {.kv_heads = 8, .head_dim = 128});
  base.quantization = "int8";
  base.tp_rank = 0;
  base.tp_size = 2;
  return base;
}

// One field changed. REQUIRES: a spec from WithEveryField with >= 2 layers.
struct SpecFieldCase {
  const char* field;  // ManifestDifference::field
  void (*mutate)(NamespaceSpec*);
};

inline const SpecFieldCase kSpecFieldCases[] = {
    {"model", [](NamespaceSpec* s) { s->model += "-instruct"; }},
    {"revision", [](NamespaceSpec* s) { s->revision = "rev2"; }},
    {"tokenizer hash", [](NamespaceSpec* s) { s->tokenizer_hash = "def"; }},
    {"layer 1 cache type",
     [](NamespaceSpec* s) { s->layer_types[1] = "QuantizedKVCache"; }},
    {"layer count",
     [](NamespaceSpec* s) {
       s->layer_types.push_back(s->layer_types[0]);
       s->layer_shapes.push_back(s->layer_shapes[0]);
     }},
    {"layer 0 shape", [](NamespaceSpec* s) { s->layer_shapes[0].kv_heads = 4; }},
    {"layer 1 shape", [](NamespaceSpec* s) { s->layer_shapes[1].head_dim = 64; }},
    {"layer 1 shape", [](NamespaceSpec* s) { s->layer_shapes[1].window_tokens = 512; }},
    {"layer 0 shape", [](NamespaceSpec* s) { s->layer_shapes[0].state_dim = 8; }},
    {"layer shapes", [](NamespaceSpec* s) { s->layer_shapes.clear(); }},
    {"dtype", [](NamespaceSpec* s) { s->dtype = DType::kBFloat16; }},
    {"quantization", [](NamespaceSpec* s) { s->quantization = "int4"; }},
    {"block tokens", [](NamespaceSpec* s) { s->block_tokens *= 2; }},
    {"tensor-parallel rank/size", [](NamespaceSpec* s) { s->tp_rank = 1; }},
    {"tensor-parallel rank/size", [](NamespaceSpec* s) { s->tp_size = 4; }},
    {"pipeline-parallel rank/size", [](NamespaceSpec* s) { s->pp_size = 2; }},
    {"salt", [](NamespaceSpec* s) { s->salt = "tenant-b"; }},
};

}  // namespace prefixkv::testing
