// `prefixkv bench core`: chain-key hashing and the block codec, each against the
// limit measured in the same run (raw XXH3-128, memcpy).

#include <cstring>
#include <random>

// The raw limit is measured with xxHash itself, as the library uses it.
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>
#if defined(__x86_64__)
#include <xxh_x86dispatch.h>
#endif

#include "prefixkv/block_key.h"
#include "prefixkv/codec.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/suite.h"
#include "tools/cli/flags.h"
#include "tools/cli/json.h"

namespace prefixkv::cli {
namespace {

constexpr int kBlocks = 64;
constexpr int kBlockTokens = 256;

struct CoreResult {
  double key_hash_ratio = 0, keys_per_s = 0;
  double decode_ratio = 0, encode_ratio = 0, memcpy_gb_s = 0;
};

void MeasureKeyHash(int repeats, CoreResult* r) {
  std::vector<int32_t> tokens(kBlocks * kBlockTokens);
  std::mt19937 rng(1);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % 128000);
  BlockKey root = NamespaceRootFromFingerprint("bench");
  constexpr int kInner = 200;
  double chain = MedianSeconds(repeats, [&] {
    for (int i = 0; i < kInner; ++i) DoNotOptimize(ChainKeys(root, tokens, kBlockTokens));
  });
  // The limit: raw XXH3-128 of the same bytes, block by block (16-byte parent
  // plus the block's tokens), without chaining or key bookkeeping.
  std::vector<uint8_t> raw(16 + kBlockTokens * 4);
  double xxh = MedianSeconds(repeats, [&] {
    for (int i = 0; i < kInner; ++i) {
      for (int b = 0; b < kBlocks; ++b) {
        std::memcpy(raw.data() + 16, tokens.data() + b * kBlockTokens, kBlockTokens * 4);
        DoNotOptimize(XXH3_128bits(raw.data(), raw.size()));
      }
    }
  });
  r->key_hash_ratio = xxh / chain;
  r->keys_per_s = kBlocks * kInner / chain;
}

BlockRecord IncompressibleRecord(size_t bytes) {
  std::vector<uint8_t> data(bytes);
  std::mt19937_64 rng(7);
  for (size_t i = 0; i + 8 <= bytes; i += 8) {
    uint64_t v = rng();
    std::memcpy(&data[i], &v, 8);
  }
  BlockRecord rec;
  rec.key = BlockKey{1, 2};
  rec.namespace_id = BlockKey{3, 4};
  rec.token_count = kBlockTokens;
  // Two layers of K and V, like a block of a small model.
  size_t per = bytes / 4;
  for (int l = 0; l < 2; ++l) {
    LayerState s;
    s.cache_type = "KVCache";
    s.meta = {std::to_string(kBlockTokens)};
    for (int kv = 0; kv < 2; ++kv) {
      size_t off = (l * 2 + kv) * per;
      s.tensors.emplace_back(DType::kUInt8,
                             std::vector<int64_t>{static_cast<int64_t>(per)},
                             SharedBytes::Copy(data.data() + off, per));
    }
    rec.layers.push_back(std::move(s));
  }
  return rec;
}

void MeasureCodec(int repeats, CoreResult* r) {
  constexpr size_t kBytes = 4 << 20;
  BlockRecord rec = IncompressibleRecord(kBytes);
  SharedBytes encoded = EncodeBlock(rec).value();
  std::vector<uint8_t> src(kBytes, 1), dst(kBytes);
  constexpr int kInner = 20;
  double copy = MedianSeconds(repeats, [&] {
    for (int i = 0; i < kInner; ++i) {
      std::memcpy(dst.data(), src.data(), kBytes);
      DoNotOptimize(dst.data());
    }
  });
  double decode = MedianSeconds(repeats, [&] {
    for (int i = 0; i < kInner; ++i) DoNotOptimize(DecodeBlock(encoded).ok());
  });
  double encode = MedianSeconds(repeats, [&] {
    for (int i = 0; i < kInner; ++i) DoNotOptimize(EncodeBlock(rec).ok());
  });
  r->memcpy_gb_s = kBytes * kInner / copy / 1e9;
  r->decode_ratio = copy / decode;
  r->encode_ratio = copy / encode;
}

int RunCoreBench(const std::vector<std::string>& args) {
  BenchArgs bench;
  if (std::optional<int> done = ParseBenchArgs("core", 9, args, &bench)) return *done;
  CoreResult r;
  MeasureKeyHash(bench.repeats, &r);
  MeasureCodec(bench.repeats, &r);
  if (bench.json) {
    SuiteJson out("core");
    JsonWriter& j = out.j();
    j.Field("key_hash_ratio_vs_xxh3", r.key_hash_ratio)
        .Field("chain_keys_per_second", r.keys_per_s)
        .Field("decode_ratio_vs_memcpy", r.decode_ratio)
        .Field("encode_ratio_vs_memcpy", r.encode_ratio)
        .Field("memcpy_gb_per_s", r.memcpy_gb_s);
    out.Print();
  } else {
    std::printf("core benchmark (medians of %d runs)\n", bench.repeats);
    std::printf(
        "  chain-key hashing vs raw XXH3-128   %.2fx  (%.0f keys/s, goal >= 0.8)\n",
        r.key_hash_ratio, r.keys_per_s);
    std::printf("  decode 4 MiB vs memcpy              %.2fx  (goal >= 0.5)\n",
                r.decode_ratio);
    std::printf("  encode 4 MiB vs memcpy              %.2fx  (goal >= 0.4)\n",
                r.encode_ratio);
    std::printf("  memcpy                              %.1f GB/s\n", r.memcpy_gb_s);
  }
  return 0;
}

}  // namespace

PKV_REGISTER_BENCH("core", "chain-key hashing and block codec vs XXH3 and memcpy",
                   RunCoreBench);

}  // namespace prefixkv::cli
