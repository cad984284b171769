// `prefixkv demo`: until the end-to-end session demo lands, an honest small
// example of what exists: a namespace, a chain of block keys, and a block
// record encoded, decoded and verified.
#include <cstdio>

#include "prefixkv/block_key.h"
#include "prefixkv/codec.h"
#include "tools/cli/command.h"
#include "tools/cli/flags.h"

namespace prefixkv::cli {
namespace {

int RunDemo(const std::vector<std::string>& args) {
  Flags flags("prefixkv demo", {});
  std::string error;
  if (!flags.Parse(args, &error)) return UsageError(flags, error);
  if (flags.help_requested()) {
    std::printf("%s", flags.HelpText().c_str());
    return 0;
  }
  NamespaceSpec spec{.model = "demo-llama", .block_tokens = 4, .dtype = DType::kFloat16,
                     .layer_types = {"KVCache", "RotatingKVCache"}, .salt = ""};
  std::string fp = spec.Fingerprint().value();
  BlockKey root = NamespaceRoot(spec).value();
  std::printf("namespace fingerprint: %s\nroot key:              %s\n\n", fp.c_str(),
              root.ToHex().c_str());
  std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  std::vector<BlockKey> keys = ChainKeys(root, tokens, spec.block_tokens);
  std::printf("tokens 1..10 in blocks of 4 -> %zu full blocks (the partial tail gets no key)\n",
              keys.size());
  for (size_t i = 0; i < keys.size(); ++i) std::printf("  block %zu key %s\n", i, keys[i].ToHex().c_str());

  BlockRecord rec;
  rec.key = keys[1];
  rec.parent = keys[0];
  rec.namespace_id = root;
  rec.token_count = 4;
  rec.tokens = {5, 6, 7, 8};
  LayerState kv{"KVCache", {"4"}, false,
                {Tensor::Filled(DType::kFloat16, {1, 2, 4, 8}, 0x11),
                 Tensor::Filled(DType::kFloat16, {1, 2, 4, 8}, 0x22)}};
  rec.layers = {kv, MakePlaceholder("RotatingKVCache")};
  SharedBytes enc = EncodeBlock(rec).value();
  StatusOr<BlockRecord> back = DecodeBlock(enc);
  std::printf("\nblock 1 record: %zu payload bytes, %zu encoded bytes, decode %s, equal %s\n",
              rec.PayloadBytes(), enc.size(), back.status().ToString().c_str(),
              back.ok() && *back == rec ? "yes" : "NO");
  std::string damaged(enc.view());
  damaged[damaged.size() - 1] ^= 0x40;
  Status bad = DecodeBlock(SharedBytes::Copy(damaged)).status();
  std::printf("same record with one flipped payload bit: %s\n", bad.ToString().c_str());
  return back.ok() && *back == rec && bad.IsCorruption() ? 0 : 1;
}

}  // namespace

PKV_REGISTER_COMMAND("demo", "show what prefixkv does on a small example", RunDemo);

}  // namespace prefixkv::cli
