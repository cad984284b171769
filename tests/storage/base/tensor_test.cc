// Tensors: zero-copy slicing where the layout allows it, exact concatenation.
#include "prefixkv/tensor.h"

#include <gtest/gtest.h>

#include <random>

#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

TEST(Tensor, MakeChecksTheByteLength) {
  EXPECT_OK(Tensor::Make(DType::kFloat16, {2, 3}, SharedBytes::Copy("123456789012")));
  EXPECT_TRUE(Tensor::Make(DType::kFloat16, {2, 3}, SharedBytes::Copy("12345"))
                  .status()
                  .IsInvalidArgument());
  EXPECT_TRUE(
      Tensor::Make(DType::kFloat16, {-1, 3}, SharedBytes()).status().IsInvalidArgument());
  EXPECT_TRUE(Tensor::Make(static_cast<DType>(99), {1}, SharedBytes::Copy("x"))
                  .status()
                  .IsInvalidArgument());
}

TEST(Tensor, SliceAlongALeadingAxisSharesTheBytes) {
  std::mt19937_64 rng(3);
  Tensor t = testing::RandomTensor(rng, DType::kFloat32, {1, 1, 16, 8});
  Tensor s = t.SliceAxis(2, 4, 8).value();
  EXPECT_EQ(s.shape(), (std::vector<int64_t>{1, 1, 8, 8}));
  EXPECT_EQ(s.data(), t.data() + 4 * 8 * 4);  // same memory, no copy
}

TEST(Tensor, SliceThenConcatRestoresTheOriginal) {
  std::mt19937_64 rng(testing::TestSeed("Tensor.SliceThenConcatRestoresTheOriginal"));
  for (int iter = 0; iter < 200; ++iter) {
    std::vector<int64_t> shape = {1 + int64_t(rng() % 3), 1 + int64_t(rng() % 4),
                                  1 + int64_t(rng() % 20), 1 + int64_t(rng() % 5)};
    Tensor t = testing::RandomTensor(rng, DType::kFloat16, shape);
    size_t axis = rng() % 4;
    std::vector<Tensor> parts;
    for (int64_t start = 0; start < shape[axis];) {
      int64_t len = std::min<int64_t>(shape[axis] - start, 1 + int64_t(rng() % 4));
      parts.push_back(t.SliceAxis(axis, start, len).value());
      start += len;
    }
    ASSERT_EQ(Tensor::Concat(parts, axis).value(), t)
        << t.DebugString() << " axis " << axis;
  }
}

TEST(Tensor, BadSlicesAndConcatsAreInvalidArguments) {
  Tensor t = Tensor::Filled(DType::kFloat16, {1, 2, 4, 8}, 1);
  EXPECT_TRUE(t.SliceAxis(4, 0, 1).status().IsInvalidArgument());
  EXPECT_TRUE(t.SliceAxis(2, 3, 2).status().IsInvalidArgument());
  EXPECT_TRUE(t.SliceAxis(2, -1, 1).status().IsInvalidArgument());
  Tensor other = Tensor::Filled(DType::kFloat16, {1, 3, 4, 8}, 1);
  EXPECT_TRUE(Tensor::Concat({t, other}, 2).status().IsInvalidArgument());
  Tensor f32 = Tensor::Filled(DType::kFloat32, {1, 2, 4, 8}, 1);
  EXPECT_TRUE(Tensor::Concat({t, f32}, 2).status().IsInvalidArgument());
  EXPECT_TRUE(Tensor::Concat({}, 0).status().IsInvalidArgument());
}

TEST(Tensor, DTypeNamesRoundTrip) {
  for (uint8_t raw = 1; raw <= 9; ++raw) {
    DType d = static_cast<DType>(raw);
    EXPECT_EQ(ParseDType(DTypeName(d)).value(), d);
    EXPECT_GT(DTypeSize(d), 0u);
  }
  EXPECT_EQ(ParseDType("fp16").value(), DType::kFloat16);
  EXPECT_TRUE(ParseDType("float8").status().IsInvalidArgument());
}

TEST(Status, CarriesCodeMessageAndContext) {
  Status s = Status::Corruption("bad magic").WithContext("block 12");
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_EQ(s.ToString(), "Corruption: block 12: bad magic");
  EXPECT_EQ(Status::OK().ToString(), "OK");
  StatusOr<int> v = 3;
  EXPECT_EQ(*v, 3);
  StatusOr<int> e = Status::NotFound("x");
  EXPECT_TRUE(e.status().IsNotFound());
}

}  // namespace
}  // namespace prefixkv
