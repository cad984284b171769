// Block keys are deterministic, documented and versioned: these golden vectors
// are published in docs/format.md and were computed independently with
// `xxh128sum` over the byte strings the format defines.
#include "prefixkv/block_key.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <numeric>
#include <random>
#include <set>

#include "prefixkv/namespace_spec.h"
#include "tests/support/namespace_fields.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

NamespaceSpec LlamaSpec(std::string salt = "") {
  return NamespaceSpec{.model = "llama-3-8b",
                       .block_tokens = 4,
                       .dtype = DType::kFloat16,
                       .layer_types = {"KVCache", "KVCache"},
                       .salt = std::move(salt)};
}

std::vector<std::string> Hex(const std::vector<BlockKey>& keys) {
  std::vector<std::string> out;
  for (const BlockKey& k : keys) out.push_back(k.ToHex());
  return out;
}

TEST(BlockKey, FingerprintIsTheDocumentedString) {
  EXPECT_EQ(
      LlamaSpec().Fingerprint().value(),
      "prefixkv/v1|model=llama-3-8b|layers=2|block=4|dtype=float16|layout=KK|salt=");
  NamespaceSpec gemma{.model = "gemma-3",
                      .block_tokens = 256,
                      .dtype = DType::kBFloat16,
                      .layer_types = {"RotatingKVCache", "PrefillReadyRotatingKVCache",
                                      "BufferedRotatingKVCache", "KVCache"}};
  EXPECT_EQ(
      gemma.Fingerprint().value(),
      "prefixkv/v1|model=gemma-3|layers=4|block=256|dtype=bfloat16|layout=RRRK|salt=");
  EXPECT_EQ(NamespaceRoot(gemma).value().ToHex(), "8be3da931375132043c627fb6cbba3c3");
}

TEST(BlockKey, GoldenVectorsMatchTheFormatDocument) {
  BlockKey root = NamespaceRoot(LlamaSpec()).value();
  EXPECT_EQ(root.ToHex(), "6f828d1889caa729c5ea8fe48f971694");
  std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_EQ(Hex(ChainKeys(root, tokens, 4)),
            (std::vector<std::string>{"4318939ae50e8a4bba3c7fbddb9ef5f1",
                                      "a5d879a11747f8fc66ddac58ba87a6c3"}));
  std::vector<int32_t> extremes = {-1, 2147483647, -2147483647 - 1, 0};
  EXPECT_EQ(ChainKey(root, extremes).ToHex(), "ef59754c8effe2d654cf8e9691c1730d");
  std::vector<std::string> extra = {"img:abc"};
  EXPECT_EQ(ChainKey(root, std::span(tokens).first(4), extra).ToHex(),
            "2840ac670465581dc4b5bf24e1f0b172");
}

TEST(BlockKey, GoldenVectorForAFullSizeBlock) {
  NamespaceSpec gemma{.model = "gemma-3",
                      .block_tokens = 256,
                      .dtype = DType::kBFloat16,
                      .layer_types = {"RotatingKVCache", "RotatingKVCache",
                                      "RotatingKVCache", "KVCache"}};
  std::vector<int32_t> tokens(256);
  std::iota(tokens.begin(), tokens.end(), 0);
  EXPECT_EQ(Hex(ChainKeys(NamespaceRoot(gemma).value(), tokens, 256)),
            std::vector<std::string>{"bd6c190963458c206e4bd493cd912195"});
}

TEST(BlockKey, SaltSeparatesTenants) {
  BlockKey a = NamespaceRoot(LlamaSpec()).value();
  BlockKey b = NamespaceRoot(LlamaSpec("tenant-a")).value();
  EXPECT_EQ(b.ToHex(), "c0fe03d26f74f68258fd11d05c55e7b0");
  std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_EQ(Hex(ChainKeys(b, tokens, 4)),
            (std::vector<std::string>{"de0291d93003ffcc7a70625af83b4dc1",
                                      "8c7c34375908679a4727f3d4efb689f2"}));
  EXPECT_NE(ChainKeys(a, tokens, 4), ChainKeys(b, tokens, 4));
}

TEST(BlockKey, EveryNamespaceFieldChangesTheRoot) {
  std::set<BlockKey> roots;
  NamespaceSpec base = LlamaSpec();
  roots.insert(NamespaceRoot(base).value());
  NamespaceSpec s = base;
  s.model = "llama-3-70b";
  roots.insert(NamespaceRoot(s).value());
  s = base;
  s.block_tokens = 8;
  roots.insert(NamespaceRoot(s).value());
  s = base;
  s.dtype = DType::kBFloat16;
  roots.insert(NamespaceRoot(s).value());
  s = base;
  s.layer_types = {"KVCache", "RotatingKVCache"};
  roots.insert(NamespaceRoot(s).value());
  s = base;
  s.layer_types = {"KVCache", "KVCache", "KVCache"};
  roots.insert(NamespaceRoot(s).value());
  s = base;
  s.salt = "x";
  roots.insert(NamespaceRoot(s).value());
  EXPECT_EQ(roots.size(), 7u);
}

TEST(BlockKey, FamilyNotExactNameDeterminesTheLayout) {
  NamespaceSpec a = LlamaSpec();
  a.layer_types = {"KVCache", "RotatingKVCache"};
  NamespaceSpec b = a;
  b.layer_types = {"KVCache", "PrefillReadyRotatingKVCache"};
  EXPECT_EQ(NamespaceRoot(a).value(), NamespaceRoot(b).value());
}

TEST(BlockKey, InvalidNamespacesAreRejected) {
  NamespaceSpec s = LlamaSpec();
  s.model = "";
  EXPECT_TRUE(s.Fingerprint().status().IsInvalidArgument());
  s = LlamaSpec();
  s.model = "a|b";
  EXPECT_TRUE(s.Fingerprint().status().IsInvalidArgument());
  s = LlamaSpec("evil\nsalt");
  EXPECT_TRUE(s.Fingerprint().status().IsInvalidArgument());
  s = LlamaSpec();
  s.block_tokens = 0;
  EXPECT_TRUE(s.Fingerprint().status().IsInvalidArgument());
  s = LlamaSpec();
  s.layer_types.clear();
  EXPECT_TRUE(s.Fingerprint().status().IsInvalidArgument());
  s = LlamaSpec();
  s.layer_types = {"KVCache", "NoSuchCache"};
  Status st = s.Fingerprint().status();
  EXPECT_TRUE(st.IsInvalidArgument()) << st.ToString();  // as documented
  EXPECT_NE(st.message().find("NoSuchCache"), std::string::npos);
}

TEST(BlockKey, OnlyFullBlocksGetKeysAndPrefixesShareThem) {
  BlockKey root = NamespaceRoot(LlamaSpec()).value();
  std::vector<int32_t> ten = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  std::vector<int32_t> eight(ten.begin(), ten.begin() + 8);
  EXPECT_EQ(ChainKeys(root, ten, 4).size(), 2u);
  EXPECT_EQ(ChainKeys(root, ten, 4), ChainKeys(root, eight, 4));
  std::vector<int32_t> three = {1, 2, 3};
  EXPECT_TRUE(ChainKeys(root, three, 4).empty());
}

TEST(BlockKey, ADifferentEarlierBlockChangesEveryLaterKey) {
  BlockKey root = NamespaceRoot(LlamaSpec()).value();
  std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<int32_t> b = {1, 2, 3, 9, 5, 6, 7, 8};
  auto ka = ChainKeys(root, a, 4), kb = ChainKeys(root, b, 4);
  EXPECT_NE(ka[0], kb[0]);
  EXPECT_NE(ka[1], kb[1]);
}

TEST(BlockKey, StreamingPathHashesTheDefinedBytes) {
  // Blocks larger than the stack buffer are hashed in streaming mode; both paths
  // must hash exactly: parent (16 bytes LE) || tokens (int32 LE).
  std::mt19937_64 rng(testing::TestSeed("StreamingPathHashesTheDefinedBytes"));
  BlockKey root{rng(), rng()};
  for (size_t n : {size_t{4}, size_t{256}, size_t{2044}, size_t{2045}, size_t{5000}}) {
    std::vector<int32_t> tokens(n);
    for (int32_t& t : tokens) t = static_cast<int32_t>(rng());
    std::vector<uint8_t> bytes(16 + 4 * n);
    root.EncodeTo(bytes.data());
    std::memcpy(bytes.data() + 16, tokens.data(), 4 * n);
    XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
    EXPECT_EQ(ChainKey(root, tokens), (BlockKey{h.high64, h.low64})) << n << " tokens";
  }
}

TEST(BlockKey, ExtraKeysAreLengthPrefixed) {
  BlockKey root = NamespaceRoot(LlamaSpec()).value();
  std::vector<int32_t> tokens = {1, 2, 3, 4};
  std::vector<std::string> one = {"ab"}, two = {"a", "b"}, none;
  EXPECT_NE(ChainKey(root, tokens, one), ChainKey(root, tokens, two));
  EXPECT_NE(ChainKey(root, tokens, one), ChainKey(root, tokens, none));
  EXPECT_EQ(ChainKey(root, tokens, none), ChainKey(root, tokens));
}

TEST(BlockKey, HexRoundTripsAndRejectsGarbage) {
  BlockKey k{0x0123456789abcdefull, 0xfedcba9876543210ull};
  EXPECT_EQ(k.ToHex(), "0123456789abcdeffedcba9876543210");
  EXPECT_EQ(BlockKey::FromHex(k.ToHex()).value(), k);
  EXPECT_EQ(BlockKey::FromHex("0123456789ABCDEFFEDCBA9876543210").value(), k);
  EXPECT_TRUE(BlockKey::FromHex("0123").status().IsInvalidArgument());
  EXPECT_TRUE(
      BlockKey::FromHex("g123456789abcdeffedcba9876543210").status().IsInvalidArgument());
  uint8_t bytes[16];
  k.EncodeTo(bytes);
  EXPECT_EQ(bytes[0], 0x10);   // lo, little-endian, first
  EXPECT_EQ(bytes[15], 0x01);  // hi's top byte last
  EXPECT_EQ(BlockKey::DecodeFrom(bytes), k);
}

// The later fields (revision, tokenizer, shapes, quantization, parallel
// position) enter the fingerprint only when set: a spec that leaves them unset
// keeps the fingerprint and root every data directory was written with.
TEST(NamespaceFingerprint, AnOldSpecKeepsItsFingerprint) {
  NamespaceSpec spec = LlamaSpec();
  spec.tp_size = 1;  // unsharded is unset
  spec.pp_size = 1;
  EXPECT_EQ(
      spec.Fingerprint().value(),
      "prefixkv/v1|model=llama-3-8b|layers=2|block=4|dtype=float16|layout=KK|salt=");
  EXPECT_EQ(NamespaceRoot(spec).value().ToHex(), "6f828d1889caa729c5ea8fe48f971694");
}

TEST(NamespaceFingerprint, SetLaterFieldsAreAppendedInOrder) {
  NamespaceSpec spec = LlamaSpec("t");
  spec.revision = "abc123";
  spec.tokenizer_hash = "tok9";
  spec.layer_shapes = {{.kv_heads = 8, .head_dim = 128},
                       {.kv_heads = 8, .head_dim = 128, .window_tokens = 4096}};
  spec.quantization = "int8/group64";
  spec.tp_rank = 1;
  spec.tp_size = 4;
  spec.pp_rank = 0;
  spec.pp_size = 2;
  EXPECT_EQ(spec.Fingerprint().value(),
            "prefixkv/v1|model=llama-3-8b|layers=2|block=4|dtype=float16|layout=KK|salt=t"
            "|rev=abc123|tokenizer=tok9|shapes=8x128,8x128w4096|quant=int8/group64"
            "|tp=1/4|pp=0/2");
  // docs/format.md's vector (computed with libxxhash's XXH3_128bits directly).
  EXPECT_EQ(NamespaceRoot(spec).value().ToHex(), "b2d919b69cca94fb02cf7dcca887b770");
}

TEST(NamespaceFingerprint, BadLaterFieldsAreRefused) {
  NamespaceSpec spec = LlamaSpec();
  spec.tokenizer_hash = "a|b";
  EXPECT_TRUE(spec.Fingerprint().status().IsInvalidArgument());
  spec = LlamaSpec();
  spec.layer_shapes = {{.kv_heads = 8, .head_dim = 128}};  // 1 shape, 2 layers
  EXPECT_TRUE(spec.Fingerprint().status().IsInvalidArgument());
  spec = LlamaSpec();
  spec.tp_rank = 4;
  spec.tp_size = 4;
  EXPECT_TRUE(spec.Fingerprint().status().IsInvalidArgument());
  spec = LlamaSpec();
  spec.pp_rank = 1;  // a rank without a size
  EXPECT_TRUE(spec.Fingerprint().status().IsInvalidArgument());
}

NamespaceSpec FullSpec() { return testing::WithEveryField(LlamaSpec()); }

// One mutation per field that changes the bytes: each gives another root, and
// DiffSpecs names exactly that field.
TEST(NamespaceFingerprint, EveryFieldSeparatesNamespacesAndIsNamed) {
  const NamespaceSpec stored = FullSpec();
  const BlockKey stored_root = NamespaceRoot(stored).value();
  for (const testing::SpecFieldCase& c : testing::kSpecFieldCases) {
    NamespaceSpec asked = stored;
    c.mutate(&asked);
    SCOPED_TRACE(c.field);
    EXPECT_NE(NamespaceRoot(asked).value(), stored_root);
    std::vector<ManifestDifference> diff = DiffSpecs(stored, asked);
    ASSERT_EQ(diff.size(), 1u);
    EXPECT_EQ(diff[0].field, c.field);
  }
  EXPECT_TRUE(DiffSpecs(stored, stored).empty());
  NamespaceSpec same_family = stored;
  same_family.layer_types[0] = "PrefillReadyRotatingKVCache";
  NamespaceSpec rotating = stored;
  rotating.layer_types[0] = "RotatingKVCache";
  EXPECT_TRUE(DiffSpecs(rotating, same_family).empty());  // keyed by family
}

TEST(NamespaceFingerprint, DifferencesReadAsSentences) {
  NamespaceSpec stored = LlamaSpec(), asked = LlamaSpec();
  stored.tokenizer_hash = "abc";
  asked.tokenizer_hash = "def";
  asked.revision = "r2";
  std::vector<ManifestDifference> diff = DiffSpecs(stored, asked);
  ASSERT_EQ(diff.size(), 2u);
  EXPECT_EQ(diff[0].ToString(), "revision differs: stored unset, asked r2");
  EXPECT_EQ(diff[1].ToString(), "tokenizer hash differs: stored abc, asked def");
}

TEST(NamespaceManifest, RoundTripsEveryField) {
  NamespaceSpec spec = FullSpec();
  spec.layer_shapes[1] = {.kv_heads = 0,
                          .head_dim = 0,
                          .conv_tokens = 3,
                          .channels = 32,
                          .state_heads = 4,
                          .state_dim = 8};
  spec.layer_types[1] = "ArraysCache";
  spec.pp_rank = 1;
  spec.pp_size = 3;
  const std::string text = EncodeManifest(spec).value();
  EXPECT_TRUE(text.starts_with("prefixkv-manifest/1\nfingerprint=prefixkv/v1|model="));
  EXPECT_NE(text.find("\nlayer_shapes=8x128,0x0r3x32:4x8\n"), std::string::npos) << text;
  NamespaceManifest m = DecodeManifest(text).value();
  EXPECT_EQ(m.fingerprint, spec.Fingerprint().value());
  EXPECT_TRUE(DiffSpecs(m.spec, spec).empty());
  EXPECT_EQ(EncodeManifest(m.spec).value(), text);
}

TEST(NamespaceManifest, SetSpecFieldTakesManifestValuesAndNamesBadOnes) {
  NamespaceSpec spec = LlamaSpec();
  ASSERT_OK(SetSpecField(&spec, "tp", "1/4"));
  ASSERT_OK(SetSpecField(&spec, "layer_shapes", "8x128,8x128w64"));
  EXPECT_EQ(spec.tp_rank, 1u);
  EXPECT_EQ(spec.layer_shapes[1].window_tokens, 64u);
  EXPECT_TRUE(SetSpecField(&spec, "colour", "red").IsInvalidArgument());
  Status bad = SetSpecField(&spec, "tp", "4");
  EXPECT_EQ(bad.message(), "spec field tp is malformed: '4'");
  EXPECT_TRUE(SetSpecField(&spec, "block_tokens", "-1").IsInvalidArgument());
}

TEST(NamespaceManifest, DamagedManifestsAreRefusedWithAReason) {
  const std::string text = EncodeManifest(FullSpec()).value();
  EXPECT_TRUE(DecodeManifest("prefixkv-manifest/2\n").status().code() ==
              StatusCode::kNotSupported);
  EXPECT_TRUE(DecodeManifest("hello").status().IsCorruption());
  EXPECT_TRUE(DecodeManifest("").status().IsCorruption());
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    t.replace(t.find(from), from.size(), to);
    return DecodeManifest(t).status();
  };
  EXPECT_TRUE(replaced("tokenizer_hash=abc", "tokenizer_hash=abd").IsCorruption());
  EXPECT_TRUE(replaced("block_tokens=4", "block_tokens=4x").IsCorruption());
  EXPECT_TRUE(replaced("\ntp=0/2", "\ntp=0-2").IsCorruption());
  EXPECT_TRUE(replaced("\nsalt=tenant-a", "\nsalt=tenant-b").IsCorruption());
  EXPECT_TRUE(replaced("layer_shapes=8x128", "layer_shapes=8y128").IsCorruption());
  EXPECT_TRUE(replaced("\ndtype=float16", "\ndtype=float17").IsCorruption());
  EXPECT_TRUE(replaced("salt=tenant-a\n", "").IsCorruption());
  EXPECT_TRUE(replaced("\nsalt=", "\nmodel=x\nsalt=").IsCorruption());
  Status unknown = replaced("\nsalt=", "\ncolour=red\nsalt=");
  EXPECT_TRUE(unknown.IsCorruption()) << unknown.ToString();
}

TEST(NamespaceManifest, ShapesRecordedLaterKeepTheFingerprintWithoutThem) {
  const NamespaceSpec spec = FullSpec();
  const std::string text = EncodeManifest(spec, /*shapes_recorded_later=*/true).value();
  EXPECT_TRUE(text.ends_with("\nsalt=tenant-a\nkeys_without=layer_shapes\n")) << text;
  NamespaceManifest m = DecodeManifest(text).value();
  EXPECT_TRUE(m.shapes_recorded_later);
  EXPECT_EQ(m.fingerprint, WithoutLayerShapes(spec).Fingerprint().value());
  EXPECT_EQ(m.spec.layer_shapes, spec.layer_shapes);
  EXPECT_EQ(EncodeManifest(m.spec, true).value(), text);
  EXPECT_FALSE(DecodeManifest(EncodeManifest(spec).value())->shapes_recorded_later);
  EXPECT_TRUE(
      EncodeManifest(WithoutLayerShapes(spec), true).status().IsInvalidArgument());
  auto replaced = [&](std::string t, const std::string& from, const std::string& to) {
    t.replace(t.find(from), from.size(), to);
    return DecodeManifest(t).status();
  };
  EXPECT_TRUE(
      replaced(text, "keys_without=layer_shapes", "keys_without=salt").IsCorruption());
  // The line only says how the fingerprint was made: it must still match.
  EXPECT_TRUE(replaced(EncodeManifest(spec).value(), "salt=tenant-a\n",
                       "salt=tenant-a\nkeys_without=layer_shapes\n")
                  .IsCorruption());
}

LayerState StoredLayer(std::string type, std::vector<int64_t> keys,
                       std::vector<int64_t> values, std::vector<std::string> meta) {
  LayerState l;
  l.cache_type = std::move(type);
  l.meta = std::move(meta);
  l.tensors = {Tensor::Filled(DType::kFloat16, std::move(keys), 0),
               Tensor::Filled(DType::kFloat16, std::move(values), 0)};
  return l;
}

TEST(NamespaceManifest, CheckLayerShapesComparesAStoredBlockWithTheShapes) {
  BlockRecord rec;
  rec.layers = {StoredLayer("KVCache", {8, 4, 128}, {8, 4, 128}, {"4"}),
                StoredLayer("RotatingKVCache", {1, 8, 4, 128}, {1, 8, 4, 128},
                            {"0", "4096", "10", "10"}),
                StoredLayer("ArraysCache", {1, 3, 32}, {4, 8, 8}, {"0", "3", "5", "2"}),
                MakePlaceholder("RotatingKVCache")};
  const std::vector<LayerShape> shapes =
      ParseLayerShapes("8x128,8x128w4096,0x0r3x32:4x8,8x128w4096").value();
  EXPECT_OK(CheckLayerShapes(rec, shapes));
  auto refused = [&](size_t layer, const std::string& shape) {
    std::vector<LayerShape> asked = shapes;
    asked[layer] = ParseLayerShapes(shape).value()[0];
    return CheckLayerShapes(rec, asked);
  };
  EXPECT_EQ(refused(0, "8x64").message(), "layer 0 holds 8x128, not 8x64");
  EXPECT_EQ(refused(0, "4x128").message(), "layer 0 holds 8x128, not 4x128");
  EXPECT_EQ(refused(1, "8x128w2048").message(),
            "layer 1 holds 8x128w4096, not 8x128w2048");
  EXPECT_EQ(refused(1, "8x128").message(), "layer 1 holds 8x128w4096, not 8x128");
  EXPECT_EQ(refused(2, "0x0r2x32:4x8").message(),
            "layer 2 holds 0x0r3x32:4x8, not 0x0r2x32:4x8");
  EXPECT_TRUE(refused(2, "0x0r3x32:4x4").IsInvalidArgument());
  EXPECT_TRUE(refused(2, "0x0r3x16:4x8").IsInvalidArgument());
  EXPECT_OK(refused(3, "1x1w1"));  // a placeholder carries no state
  EXPECT_TRUE(CheckLayerShapes(rec, {shapes[0]}).IsInvalidArgument());
  // Keys without a heads axis, [tokens, head_dim], are one head's.
  rec.layers[0] = StoredLayer("KVCache", {4, 128}, {4, 128}, {"4"});
  EXPECT_EQ(refused(0, "8x128").message(), "layer 0 holds 1x128, not 8x128");
  EXPECT_OK(refused(0, "1x128"));
  // Values may have another head dim than the keys, never other heads.
  rec.layers[0] = StoredLayer("KVCache", {8, 4, 128}, {8, 4, 64}, {"4"});
  EXPECT_OK(CheckLayerShapes(rec, shapes));
  rec.layers[0] = StoredLayer("KVCache", {8, 4, 128}, {1, 4, 128}, {"4"});
  EXPECT_EQ(refused(0, "8x128").message(),
            "layer 0 holds 8x128 with values of 1 heads, not 8x128");
  rec.layers[0] = StoredLayer("KVCache", {8, 4, 128}, {8, 4, 128}, {"4"});
  rec.layers[1] = StoredLayer("RotatingKVCache", {1, 8, 4, 128}, {1, 4, 4, 128},
                              {"0", "4096", "10", "10"});
  EXPECT_EQ(refused(1, "8x128w4096").message(),
            "layer 1 holds 8x128w4096 with values of 4 heads, not 8x128w4096");
  // A composite layer's later tensors are its other caches', not values.
  rec.layers[1] = StoredLayer("CacheList", {1, 8, 4, 128}, {1, 3, 32}, {});
  EXPECT_OK(refused(1, "8x128"));
}

}  // namespace
}  // namespace prefixkv
