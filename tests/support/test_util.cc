// Test support implementation.
#include "tests/support/test_util.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace prefixkv::testing {

::testing::AssertionResult IsOkFormat(const char* expr_text, const Status& status) {
  if (status.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "Expected: " << expr_text << " is OK\n  Actual: " << status.ToString();
}

uint64_t TestSeed(const std::string& test_name) {
  uint64_t seed;
  if (const char* env = std::getenv("PREFIXKV_SEED"); env != nullptr && *env) {
    seed = std::strtoull(env, nullptr, 10);
  } else {
    seed = std::random_device{}();
    seed = (seed << 32) ^ std::random_device{}();
  }
  std::printf("[seed] %s: PREFIXKV_SEED=%llu\n", test_name.c_str(),
              static_cast<unsigned long long>(seed));
  std::fflush(stdout);
  return seed;
}

uint64_t Iterations(uint64_t ci, uint64_t long_run) {
  const char* env = std::getenv("PREFIXKV_LONG");
  return env != nullptr && std::strcmp(env, "1") == 0 ? long_run : ci;
}

bool WaitUntil(const std::function<bool()>& done, std::chrono::milliseconds bound) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return done();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

TempDir::TempDir() {
  std::string tmpl =
      (std::filesystem::temp_directory_path() / "prefixkv-test-XXXXXX").string();
  char* made = mkdtemp(tmpl.data());
  if (made == nullptr) std::abort();
  path_ = made;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

Tensor RandomTensor(std::mt19937_64& rng, DType dtype, std::vector<int64_t> shape) {
  size_t n = static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype);
  uint8_t* out = nullptr;
  SharedBytes bytes = SharedBytes::Allocate(n, &out);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(rng());
  return Tensor(dtype, std::move(shape), std::move(bytes));
}

namespace {

Tensor CompressibleTensor(std::mt19937_64& rng, DType dtype, std::vector<int64_t> shape) {
  size_t n = static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype);
  uint8_t* out = nullptr;
  SharedBytes bytes = SharedBytes::Allocate(n, &out);
  for (size_t i = 0; i < n;) {
    size_t run = std::min<size_t>(n - i, 1 + rng() % 300);
    std::memset(out + i, static_cast<int>(rng() % 4), run);
    i += run;
  }
  return Tensor(dtype, std::move(shape), std::move(bytes));
}

BlockKey RandomKey(std::mt19937_64& rng) { return BlockKey{rng(), rng()}; }

}  // namespace

BlockRecord SampleRecord() {
  BlockRecord r;
  r.key = BlockKey{0x1111, 0x2222};
  r.parent = BlockKey{0x3333, 0x4444};
  r.namespace_id = BlockKey{0x5555, 0x6666};
  r.token_count = 4;
  r.tokens = {10, 20, 30, 40};
  std::mt19937_64 rng(42);
  r.layers.push_back(LayerState{"KVCache",
                                {"4"},
                                false,
                                {RandomTensor(rng, DType::kFloat16, {1, 2, 4, 8}),
                                 RandomTensor(rng, DType::kFloat16, {1, 2, 4, 8})}});
  r.layers.push_back(MakePlaceholder("RotatingKVCache"));
  return r;
}

BlockRecord RandomRecord(std::mt19937_64& rng, bool compressible) {
  static const char* kTypes[] = {"KVCache", "RotatingKVCache", "ArraysCache",
                                 "QuantizedKVCache", "PrefillReadyRotatingKVCache"};
  static const DType kDTypes[] = {DType::kFloat16, DType::kFloat32, DType::kBFloat16,
                                  DType::kInt8, DType::kUInt32};
  BlockRecord r;
  r.key = RandomKey(rng);
  r.parent = RandomKey(rng);
  r.namespace_id = RandomKey(rng);
  r.token_count = static_cast<uint32_t>(1 + rng() % 64);
  r.partial = rng() % 4 == 0;
  if (rng() % 2) {
    for (uint32_t i = 0; i < r.token_count; ++i)
      r.tokens.push_back(static_cast<int32_t>(rng()));
  }
  size_t layers = rng() % 6;
  for (size_t l = 0; l < layers; ++l) {
    LayerState s;
    s.cache_type = kTypes[rng() % 5];
    for (size_t m = rng() % 5; m > 0; --m)
      s.meta.push_back(std::to_string(rng() % 100000));
    if (rng() % 4 == 0) {
      s.placeholder = true;
    } else {
      for (size_t t = rng() % 3; t > 0; --t) {
        std::vector<int64_t> shape;
        for (size_t d = 1 + rng() % 4; d > 0; --d)
          shape.push_back(static_cast<int64_t>(rng() % 9));
        if (compressible) shape.push_back(256);
        DType dt = kDTypes[rng() % 5];
        s.tensors.push_back(compressible ? CompressibleTensor(rng, dt, shape)
                                         : RandomTensor(rng, dt, shape));
      }
    }
    r.layers.push_back(std::move(s));
  }
  return r;
}

}  // namespace prefixkv::testing
