// Test support: seeded randomness that prints its seed, temporary directories,
// and random block records for property tests.
#pragma once

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>

#include "prefixkv/block.h"

namespace prefixkv::testing {

// The seed for a randomized test: $PREFIXKV_SEED when set, else a fresh one.
// Always printed (to stdout) so a failure can be replayed.
uint64_t TestSeed(const std::string& test_name);

// How many iterations a randomized test runs: `ci` normally, `long_run` when
// PREFIXKV_LONG=1.
uint64_t Iterations(uint64_t ci, uint64_t long_run);

// A fresh empty directory under $TMPDIR, removed when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// A random but valid BlockRecord: 0-5 layers of mixed types, placeholders, random
// dtypes and shapes, optional tokens; `compressible` fills tensors with runs.
BlockRecord RandomRecord(std::mt19937_64& rng, bool compressible = false);

// A tensor of `shape` whose bytes come from `rng`.
Tensor RandomTensor(std::mt19937_64& rng, DType dtype, std::vector<int64_t> shape);

}  // namespace prefixkv::testing
