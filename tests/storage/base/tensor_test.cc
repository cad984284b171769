// Tensors: zero-copy slicing where the layout allows it, exact concatenation;
// and copies into caller-described strided memory (TensorDestination).
#include "prefixkv/tensor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

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

// Random shapes copied into random padded, permuted, unaligned layouts, with
// and without streaming stores, against an element-by-element reference:
// every element lands at its strided offset and no other byte changes.
TEST(TensorDestination, StridedCopiesPutEveryElementAtItsOffsetAndNothingElsewhere) {
  std::mt19937_64 rng(testing::TestSeed("TensorDestination"));
  const size_t kElementBytes[] = {1, 2, 4, 8};
  const DType kDTypes[] = {DType::kUInt8, DType::kFloat16, DType::kFloat32,
                           DType::kInt64};
  for (int trial = 0; trial < 300; ++trial) {
    const size_t e = rng() % 4, ndim = 1 + rng() % 4;
    std::vector<int64_t> shape(ndim);
    for (int64_t& d : shape) d = 1 + static_cast<int64_t>(rng() % 6);
    shape[rng() % ndim] = 1 + static_cast<int64_t>(rng() % 300);  // long runs to stream
    // Destination layout: dimensions in a random order, each padded.
    std::vector<size_t> order(ndim);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<int64_t> strides(ndim);
    int64_t extent = static_cast<int64_t>(kElementBytes[e]);
    for (size_t k = ndim; k-- > 0;) {
      strides[order[k]] = extent + static_cast<int64_t>(kElementBytes[e] * (rng() % 3));
      extent = strides[order[k]] * shape[order[k]];
    }
    const size_t offset = rng() % 16;  // an unaligned base
    std::vector<uint8_t> dst(offset + static_cast<size_t>(extent) + 64, 0xEE);
    const Tensor src = testing::RandomTensor(rng, kDTypes[e], shape);
    TensorDestination dest{dst.data() + offset, dst.size() - offset, kDTypes[e], strides};
    ASSERT_OK_AND_ASSIGN(std::vector<int64_t> checked,
                         CheckTensorDestination(dest, kDTypes[e], shape));
    ASSERT_EQ(checked, strides);
    std::vector<uint8_t> want = dst;
    std::vector<int64_t> index(ndim, 0);
    for (int64_t n = 0; n < NumElements(shape); ++n) {
      int64_t at = static_cast<int64_t>(offset);
      for (size_t i = 0; i < ndim; ++i) at += index[i] * strides[i];
      std::memcpy(want.data() + at, src.data() + n * kElementBytes[e], kElementBytes[e]);
      for (size_t i = ndim; i-- > 0 && ++index[i] == shape[i];) index[i] = 0;
    }
    const bool stream = rng() % 2 == 0;
    CopyToStrided(src.data(), shape, kElementBytes[e], dst.data() + offset, strides,
                  stream);
    ASSERT_TRUE(dst == want) << "trial " << trial << " stream " << stream << " "
                             << src.DebugString();
  }
}

}  // namespace
}  // namespace prefixkv
