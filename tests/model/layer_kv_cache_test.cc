// LayerKvCache: shape checks, growth, rotating windows, truncation, export/restore.
#include "prefixkv/layer_kv_cache.h"

#include <gtest/gtest.h>

#include <cstring>

#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

// float32 [heads, tokens, dim] whose element (h, t, d) is base + 100*h + t + d/100.
Tensor Chunk(int64_t heads, int64_t tokens, int64_t dim, float base = 0) {
  uint8_t* out = nullptr;
  SharedBytes bytes =
      SharedBytes::Allocate(static_cast<size_t>(heads * tokens * dim) * 4, &out);
  float* f = reinterpret_cast<float*>(out);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t d = 0; d < dim; ++d)
        f[(h * tokens + t) * dim + d] = base + 100.0f * h + t + d / 100.0f;
  return Tensor(DType::kFloat32, {heads, tokens, dim}, std::move(bytes));
}

TEST(LayerKvCache, LayerKvCacheRejectsWrongShape) {
  LayerKvCache cache({0, 4, 8, 0});
  Status wrong_heads = cache.Append(Chunk(3, 1, 8), Chunk(3, 1, 8));
  EXPECT_TRUE(wrong_heads.IsInvalidArgument()) << wrong_heads.ToString();
  EXPECT_TRUE(cache.Append(Chunk(4, 1, 7), Chunk(4, 1, 7)).IsInvalidArgument());
  EXPECT_TRUE(cache.Append(Chunk(4, 2, 8), Chunk(4, 1, 8)).IsInvalidArgument());
  Tensor f16 = Tensor::Filled(DType::kFloat16, {4, 1, 8}, 0);
  EXPECT_TRUE(cache.Append(f16, f16).IsInvalidArgument());
  EXPECT_EQ(cache.length(), 0);
  ASSERT_OK(cache.Append(Chunk(4, 2, 8), Chunk(4, 2, 8)));
  EXPECT_EQ(cache.length(), 2);
}

TEST(LayerKvCache, FullLayerKeepsEveryPositionAcrossGrowth) {
  LayerKvCache cache({3, 2, 4, 0});
  for (int t = 0; t < 40; ++t) {  // crosses several capacity doublings
    ASSERT_OK(cache.Append(Chunk(2, 1, 4, 1000.0f * t), Chunk(2, 1, 4, -1000.0f * t)));
  }
  EXPECT_EQ(cache.length(), 40);
  EXPECT_EQ(cache.payload_bytes(), 40u * 2 * 2 * 4 * 4);
  EXPECT_EQ(cache.KeyRow(1, 17)[2], 17000.0f + 100.0f + 0.02f);
  EXPECT_EQ(cache.ValueRow(0, 39)[0], -39000.0f);
}

TEST(LayerKvCache, RotatingLayerHoldsOnlyTheLastWindow) {
  LayerKvCache cache({1, 1, 2, 4});
  ASSERT_OK(cache.Append(Chunk(1, 6, 2), Chunk(1, 6, 2)));        // positions 0..5
  ASSERT_OK(cache.Append(Chunk(1, 1, 2, 6), Chunk(1, 1, 2, 6)));  // position 6
  EXPECT_EQ(cache.length(), 7);
  EXPECT_EQ(cache.held_tokens(), 4);
  EXPECT_EQ(cache.payload_bytes(), 4u * 2 * 1 * 2 * 4);
  for (int64_t pos = 3; pos < 7; ++pos) EXPECT_EQ(cache.KeyRow(0, pos)[0], pos);
  RotatingMeta meta = cache.rotating_meta();
  EXPECT_EQ(meta, (RotatingMeta{0, 4, 7, 3}));
}

TEST(LayerKvCache, TruncateRollsBackFullLayersAndUnwrappedRings) {
  LayerKvCache full({0, 1, 2, 0});
  ASSERT_OK(full.Append(Chunk(1, 5, 2), Chunk(1, 5, 2)));
  ASSERT_OK(full.Truncate(2));
  EXPECT_EQ(full.length(), 2);
  EXPECT_TRUE(full.Truncate(3).IsInvalidArgument());  // cannot grow by truncating

  LayerKvCache ring({0, 1, 2, 4});
  ASSERT_OK(ring.Append(Chunk(1, 3, 2), Chunk(1, 3, 2)));
  EXPECT_OK(ring.Truncate(1));  // never wrapped: every position is still there
  ASSERT_OK(ring.Append(Chunk(1, 5, 2, 1), Chunk(1, 5, 2, 1)));  // now wrapped
  EXPECT_FALSE(ring.CanTruncate(5));
  EXPECT_TRUE(ring.Truncate(5).IsInvalidArgument());
  EXPECT_EQ(ring.length(), 6);  // unchanged by the refused truncate
}

TEST(LayerKvCache, ExportThenRestoreReproducesTheState) {
  for (int64_t window : {0, 4}) {
    LayerKvCache cache({2, 2, 4, window});
    ASSERT_OK(cache.Append(Chunk(2, 7, 4), Chunk(2, 7, 4, 0.5f)));
    LayerKvExport exported = cache.Export();
    EXPECT_EQ(exported.keys.shape(), (std::vector<int64_t>{2, window ? 4 : 7, 4}));
    EXPECT_EQ(exported.cache_type, window ? "RotatingKVCache" : "KVCache");
    auto restored = LayerKvCache::Restore(cache.geometry(), exported.keys,
                                          exported.values, exported.rotating_meta);
    ASSERT_OK(restored);
    EXPECT_EQ(restored->length(), 7);
    for (int64_t pos = window ? 3 : 0; pos < 7; ++pos) {
      EXPECT_EQ(std::memcmp(restored->KeyRow(1, pos), cache.KeyRow(1, pos), 16), 0)
          << pos;
      EXPECT_EQ(std::memcmp(restored->ValueRow(0, pos), cache.ValueRow(0, pos), 16), 0)
          << pos;
    }
  }
}

TEST(LayerKvCache, RestoreRejectsInconsistentRotatingMeta) {
  LayerKvGeometry ring{0, 1, 2, 4};
  Tensor four = Chunk(1, 4, 2);
  EXPECT_OK(LayerKvCache::Restore(ring, four, four, RotatingMeta{0, 4, 9, 1}));
  EXPECT_TRUE(LayerKvCache::Restore(ring, four, four, RotatingMeta{0, 4, 9, 3})
                  .status()
                  .IsInvalidArgument());  // idx disagrees with offset
  EXPECT_TRUE(LayerKvCache::Restore(ring, four, four, RotatingMeta{0, 8, 9, 1})
                  .status()
                  .IsInvalidArgument());  // another window
  EXPECT_TRUE(
      LayerKvCache::Restore(ring, four, four, std::nullopt).status().IsInvalidArgument());
  EXPECT_TRUE(LayerKvCache::Restore({0, 1, 2, 0}, four, four, RotatingMeta{0, 4, 4, 0})
                  .status()
                  .IsInvalidArgument());  // full layer with ring meta
}

// A recurrent layer: 3 conv inputs of 6 channels, 2 heads of 2x2 state.
LayerKvGeometry Recurrent() { return {5, 1, 1, 0, {3, 6, 2, 2}}; }

TEST(LayerKvCache, RecurrentLayerKeepsTheLastConvInputsAndTheNewestState) {
  LayerKvCache cache(Recurrent());
  EXPECT_TRUE(cache.is_recurrent());
  EXPECT_TRUE(cache.Append(Chunk(1, 2, 6), Chunk(1, 2, 6)).IsInvalidArgument());
  EXPECT_TRUE(cache.Append(Chunk(1, 2, 5), Chunk(2, 2, 2)).IsInvalidArgument());
  ASSERT_OK(cache.Append(Chunk(1, 5, 6), Chunk(2, 2, 2, 7)));
  ASSERT_OK(cache.Append(Chunk(1, 1, 6, 50), Chunk(2, 2, 2, 9)));
  EXPECT_EQ(cache.length(), 6);
  EXPECT_EQ(cache.held_tokens(), 3);
  EXPECT_EQ(cache.payload_bytes(), (3 * 6 + 8) * 4u);
  EXPECT_EQ(cache.ConvRow(5)[0], 50.0f);  // the decoded token's input
  EXPECT_EQ(cache.ConvRow(4)[1], 4.01f);  // the prefill's last input
  EXPECT_EQ(cache.State()[0], 9.0f);      // the state after the newest append
  EXPECT_TRUE(cache.CanTruncate(6));
  EXPECT_FALSE(cache.CanTruncate(5));  // a state cannot be rewound
  EXPECT_TRUE(cache.Truncate(5).IsInvalidArgument());
}

TEST(LayerKvCache, RecurrentExportThenRestoreReproducesTheState) {
  LayerKvCache cache(Recurrent());
  ASSERT_OK(cache.Append(Chunk(1, 7, 6), Chunk(2, 2, 2, 0.5f)));
  LayerKvExport exported = cache.Export();
  EXPECT_EQ(exported.cache_type, "ArraysCache");
  EXPECT_EQ(exported.length, 7);
  EXPECT_EQ(exported.keys.shape(), (std::vector<int64_t>{1, 3, 6}));
  EXPECT_EQ(exported.values.shape(), (std::vector<int64_t>{2, 2, 2}));
  ASSERT_TRUE(exported.rotating_meta.has_value());
  auto restored = LayerKvCache::Restore(cache.geometry(), exported.keys, exported.values,
                                        exported.rotating_meta);
  ASSERT_OK(restored);
  EXPECT_EQ(restored->length(), 7);
  for (int64_t pos = 4; pos < 7; ++pos)
    EXPECT_EQ(std::memcmp(restored->ConvRow(pos), cache.ConvRow(pos), 24), 0) << pos;
  EXPECT_EQ(std::memcmp(restored->State(), cache.State(), 32), 0);
  // A state claimed for another position, a missing meta, a wrong state shape.
  RotatingMeta wrong = *exported.rotating_meta;
  wrong.offset = 8;
  EXPECT_TRUE(
      LayerKvCache::Restore(cache.geometry(), exported.keys, exported.values, wrong)
          .status()
          .IsInvalidArgument());
  EXPECT_TRUE(LayerKvCache::Restore(cache.geometry(), exported.keys, exported.values,
                                    std::nullopt)
                  .status()
                  .IsInvalidArgument());
  EXPECT_TRUE(LayerKvCache::Restore(cache.geometry(), exported.keys, exported.keys,
                                    exported.rotating_meta)
                  .status()
                  .IsInvalidArgument());
}

}  // namespace
}  // namespace prefixkv
