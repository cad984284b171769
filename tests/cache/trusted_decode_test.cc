// DecodeTrustedBlock (the hot-tier restore path) skips only the checksum pass:
// layout damage is still caught, and bytes from elsewhere keep DecodeBlock.
#include <gtest/gtest.h>

#include "prefixkv/codec.h"
#include "tests/cache/cache_test_util.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

BlockRecord SmallRecord() {
  BlockRecord rec;
  rec.key = BlockKey{1, 2};
  rec.parent = BlockKey{3, 4};
  rec.namespace_id = BlockKey{3, 4};
  rec.token_count = testing::kBlockTokens;
  rec.tokens = {1, 2, 3, 4};
  rec.layers = {testing::KvLayer(testing::kBlockTokens),
                MakePlaceholder("RotatingKVCache")};
  return rec;
}

TEST(TrustedDecode, DecodesTheSameRecordAsTheVerifyingDecoder) {
  SharedBytes enc = EncodeBlock(SmallRecord()).value();
  EXPECT_EQ(DecodeTrustedBlock(enc).value(), DecodeBlock(enc).value());
  EXPECT_EQ(DecodeTrustedBlock(enc).value(), SmallRecord());
}

TEST(TrustedDecode, SkipsOnlyTheChecksum) {
  std::string bytes(EncodeBlock(SmallRecord()).value().view());
  bytes[bytes.size() - 1] ^= 0x40;  // a tensor byte
  EXPECT_TRUE(DecodeBlock(SharedBytes::Copy(bytes)).status().IsCorruption());
  EXPECT_OK(DecodeTrustedBlock(SharedBytes::Copy(bytes)));
  // Structural damage is still refused.
  bytes.resize(bytes.size() - 8);
  EXPECT_TRUE(DecodeTrustedBlock(SharedBytes::Copy(bytes)).status().IsCorruption());
  EXPECT_TRUE(DecodeTrustedBlock(SharedBytes::Copy(std::string(40, 'x')))
                  .status()
                  .IsCorruption());
}

}  // namespace
}  // namespace prefixkv
