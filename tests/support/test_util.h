// Test support: status assertions that print the status, seeded randomness
// that prints its seed, temporary directories, and random block records for
// property tests.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "prefixkv/block.h"
#include "prefixkv/status.h"

// ASSERT_OK(expr) / EXPECT_OK(expr): `expr` (a Status or any StatusOr<T>) is OK;
// a failure prints the expression and the status ("IOError: disk full"). Extra
// context may be streamed: EXPECT_OK(tier->Get(key)) << "chain " << c;
#define EXPECT_OK(expr) EXPECT_PRED_FORMAT1(::prefixkv::testing::IsOkFormat, expr)
#define ASSERT_OK(expr) ASSERT_PRED_FORMAT1(::prefixkv::testing::IsOkFormat, expr)

// ASSERT_OK_AND_ASSIGN(lhs, expr): evaluates the StatusOr `expr`; when OK, moves
// its value into `lhs` (a declaration such as `auto x` or an existing variable),
// otherwise fails the test (returning from the enclosing void function) with
// the expression and the status printed.
#define ASSERT_OK_AND_ASSIGN(lhs, expr)                                                  \
  PKV_ASSERT_OK_AND_ASSIGN_IMPL_(PKV_TEST_CONCAT_(pkv_test_or_, __COUNTER__), lhs, expr, \
                                 #expr)
#define PKV_ASSERT_OK_AND_ASSIGN_IMPL_(var, lhs, expr, text)      \
  auto var = (expr);                                              \
  ASSERT_PRED_FORMAT1(::prefixkv::testing::IsOkNamed{text}, var); \
  lhs = std::move(var).value()
#define PKV_TEST_CONCAT_INNER_(a, b) a##b
#define PKV_TEST_CONCAT_(a, b) PKV_TEST_CONCAT_INNER_(a, b)

namespace prefixkv::testing {

// The predicate-formatters behind ASSERT_OK and EXPECT_OK: success when the
// status is OK, else "Expected: <expr> is OK\n  Actual: <status>".
::testing::AssertionResult IsOkFormat(const char* expr_text, const Status& status);
template <typename T>
::testing::AssertionResult IsOkFormat(const char* expr_text,
                                      const StatusOr<T>& status_or) {
  return IsOkFormat(expr_text, status_or.status());
}

// IsOkFormat under a given expression text (ASSERT_OK_AND_ASSIGN checks a
// temporary but names the expression it came from).
struct IsOkNamed {
  const char* expr_text;
  template <typename T>
  ::testing::AssertionResult operator()(const char* /*var_text*/, const T& value) const {
    return IsOkFormat(expr_text, value);
  }
};

// The seed for a randomized test: $PREFIXKV_SEED when set, else a fresh one.
// Always printed (to stdout) so a failure can be replayed.
uint64_t TestSeed(const std::string& test_name);

// How many iterations a randomized test runs: `ci` normally, `long_run` when
// PREFIXKV_LONG=1.
uint64_t Iterations(uint64_t ci, uint64_t long_run);

// Polls `done` every millisecond until it holds or `bound` of real time
// passes; its last answer. (For background work with no event to wait on;
// a wait that holds returns at once, so the bound only delays a failure.)
bool WaitUntil(const std::function<bool()>& done,
               std::chrono::milliseconds bound = std::chrono::seconds(30));

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

// A small valid BlockRecord for codec tests: 4 tokens, one KVCache layer of two
// random float16 tensors [1, 2, 4, 8] (128 bytes each, a fixed seed) and a
// RotatingKVCache placeholder. Tests rely on this exact layout: change nothing.
BlockRecord SampleRecord();

// A random but valid BlockRecord: 0-5 layers of mixed types, placeholders, random
// dtypes and shapes, optional tokens; `compressible` fills tensors with runs.
BlockRecord RandomRecord(std::mt19937_64& rng, bool compressible = false);

// A tensor of `shape` whose bytes come from `rng`.
Tensor RandomTensor(std::mt19937_64& rng, DType dtype, std::vector<int64_t> shape);

// Collects log lines (thread-safe) so tests can check what was said, once.
struct LogLines {
  std::mutex mu;
  std::vector<std::string> lines;
  std::function<void(std::string_view)> Sink() {
    return [this](std::string_view l) {
      std::lock_guard<std::mutex> lock(mu);
      lines.emplace_back(l);
    };
  }
  int Count(std::string_view needle) {
    std::lock_guard<std::mutex> lock(mu);
    int n = 0;
    for (const std::string& l : lines) n += l.find(needle) != std::string::npos ? 1 : 0;
    return n;
  }
};

}  // namespace prefixkv::testing
