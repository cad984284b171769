// The block record codec in Python (include/prefixkv/codec.h, docs/format.md):
// BlockRecord, encode_block, decode_block, and the key functions a RESP client
// needs to build and check PKV.PUT records (namespace_root, chain_key).
// prefixkv/resp.py builds PKV.* commands on top of them (docs/python.md,
// "Records and RESP").
#include <string>
#include <utility>
#include <vector>

#include "convert.h"
#include "prefixkv/block_key.h"
#include "prefixkv/codec.h"
#include "prefixkv/namespace_spec.h"
#include "py_types.h"

namespace prefixkv::python {
namespace {

// A BlockRecord as Python sees it: keys as 32 hex digits, layers as Layer.
struct PyBlockRecord {
  std::string key;
  std::string parent;
  std::string namespace_id;
  uint32_t token_count = 0;
  bool partial = false;
  std::vector<int32_t> tokens;
  py::list layers;  // PyLayer
};

BlockKey KeyOf(const std::string& hex, const char* what) {
  StatusOr<BlockKey> key = BlockKey::FromHex(hex);
  if (!key.ok())
    Raise(Status::InvalidArgument(std::string(what) + ": " + key.status().message()));
  return *key;
}

// The C++ record of `r`: tensors copied out of their arrays (with the GIL: a
// record is small next to the socket send that follows).
BlockRecord ToRecord(const PyBlockRecord& r) {
  BlockRecord out;
  out.key = KeyOf(r.key, "key");
  out.parent = KeyOf(r.parent, "parent");
  out.namespace_id = KeyOf(r.namespace_id, "namespace_id");
  out.token_count = r.token_count;
  out.partial = r.partial;
  out.tokens = r.tokens;
  for (size_t l = 0; l < r.layers.size(); ++l) {
    py::object item = r.layers[l];
    if (!py::isinstance<PyLayer>(item)) {
      Raise(Status::InvalidArgument("layer " + std::to_string(l) +
                                    ": a prefixkv.Layer is needed"));
    }
    const PyLayer& layer = item.cast<const PyLayer&>();
    LayerState state{layer.cache_type, layer.meta, layer.placeholder, {}};
    for (size_t i = 0; i < layer.tensors.size(); ++i) {
      const std::string what =
          "layer " + std::to_string(l) + " tensor " + std::to_string(i);
      py::array array = AsArray(layer.tensors[i], what);
      const DType dtype = ValueOr(DTypeOfArray(array, what));
      state.tensors.push_back(
          CopyToTensor(ValueOr(CheckArray(array, dtype, what, 0)), dtype));
    }
    out.layers.push_back(std::move(state));
  }
  return out;
}

// The Python record of a decoded one; its arrays view `record`'s tensors.
PyBlockRecord FromRecord(const BlockRecord& record) {
  PyBlockRecord out{
      record.key.ToHex(), record.parent.ToHex(), record.namespace_id.ToHex(),
      record.token_count, record.partial,        record.tokens,
      py::list()};
  for (const LayerState& layer : record.layers) {
    PyLayer l{layer.cache_type, layer.meta, py::list(), layer.placeholder};
    for (const Tensor& t : layer.tensors) l.tensors.append(ViewTensor(t, nullptr));
    out.layers.append(std::move(l));
  }
  return out;
}

py::bytes EncodeRecord(const PyBlockRecord& r, bool compress) {
  const BlockRecord record = ToRecord(r);
  const SharedBytes encoded = ValueOr(EncodeBlock(record, {.compress = compress}));
  return py::bytes(reinterpret_cast<const char*>(encoded.data()), encoded.size());
}

PyBlockRecord DecodeRecord(const py::bytes& data) {
  // One copy into an aligned buffer the record's tensors then view.
  const SharedBytes bytes = SharedBytes::Copy(std::string_view(data));
  return FromRecord(ValueOr(DecodeBlock(bytes)));
}

std::string ChainKeyHex(const std::string& parent, const py::object& tokens) {
  const std::vector<int32_t> ids = TokenIds(tokens);
  return ChainKey(KeyOf(parent, "parent"), ids).ToHex();
}

std::string NamespaceRootHex(const std::string& model,
                             const std::vector<std::string>& layer_types,
                             uint32_t block_tokens, const std::string& dtype,
                             const std::string& salt) {
  const NamespaceSpec spec{model, block_tokens, ValueOr(ParseDType(dtype)), layer_types,
                           salt};
  return ValueOr(NamespaceRoot(spec)).ToHex();
}

}  // namespace

void BindRecords(py::module_& m) {
  py::class_<PyBlockRecord>(
      m, "BlockRecord",
      R"doc(One cached block as the block codec encodes it (docs/format.md): what
PKV.PUT takes and PKV.GET returns. Keys are 32 lowercase hex digits. A
decoded record's arrays are read-only views of its bytes.)doc")
      .def(py::init([](std::string key, std::string parent, std::string namespace_id,
                       uint32_t token_count, py::list layers, const py::object& tokens,
                       bool partial) {
             return PyBlockRecord{
                 std::move(key),
                 std::move(parent),
                 std::move(namespace_id),
                 token_count,
                 partial,
                 tokens.is_none() ? std::vector<int32_t>{} : TokenIds(tokens),
                 std::move(layers)};
           }),
           py::arg("key"), py::arg("parent"), py::arg("namespace_id"),
           py::arg("token_count"), py::arg("layers"), py::arg("tokens") = py::none(),
           py::arg("partial") = false,
           "A record: its key (the chain hash of parent and tokens), its parent's key\n"
           "(the namespace root for a chain's first block), the namespace root, how\n"
           "many tokens it covers, one Layer per model layer, the token ids\n"
           "(optional) and whether it is a marked partial tail.")
      .def_readwrite("key", &PyBlockRecord::key, "chain hash of the block's whole prefix")
      .def_readwrite("parent", &PyBlockRecord::parent,
                     "key of the previous block; the namespace root for the first")
      .def_readwrite("namespace_id", &PyBlockRecord::namespace_id, "the namespace root")
      .def_readwrite("token_count", &PyBlockRecord::token_count,
                     "tokens the block covers")
      .def_readwrite("partial", &PyBlockRecord::partial,
                     "True: fewer than block_tokens tokens (a marked tail)")
      .def_readwrite("tokens", &PyBlockRecord::tokens,
                     "the token ids (empty when not stored)")
      .def_readwrite("layers", &PyBlockRecord::layers, "one Layer per model layer")
      .def("__repr__", [](const PyBlockRecord& r) {
        return "BlockRecord(key=" + r.key + ", tokens=" + std::to_string(r.token_count) +
               ", layers=" + std::to_string(r.layers.size()) + ")";
      });

  m.def("encode_block", &EncodeRecord, py::arg("record"), py::kw_only(),
        py::arg("compress") = false,
        "EncodeBlock: the record's canonical encoding (bytes), checksummed.\n"
        "Each tensor's element type is its array's dtype (uint16 or a\n"
        "torch.bfloat16 tensor: bfloat16). compress: zstd per tensor when it\n"
        "saves 5%. InvalidArgument for a record that cannot be encoded.");
  m.def("decode_block", &DecodeRecord, py::arg("data"),
        "DecodeBlock: decodes and verifies an encoded record (PKV.GET's reply).\n"
        "Corruption for damaged or malformed bytes.");
  m.def("chain_key", &ChainKeyHex, py::arg("parent"), py::arg("tokens"),
        "ChainKey: the key of the block holding `tokens` after block `parent`\n"
        "(32 hex digits each; docs/format.md).");
  m.def("namespace_root", &NamespaceRootHex, py::arg("model"), py::arg("layer_types"),
        py::kw_only(), py::arg("block_tokens") = 256, py::arg("dtype") = "float16",
        py::arg("salt") = "",
        "NamespaceRoot: the root key of a model's namespace, the same in every\n"
        "process (what Namespace.root and PKV.REGISTER give).");
}

}  // namespace prefixkv::python
