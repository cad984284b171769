// DecodeTrustedBlock (the hot-tier restore path) skips only the checksum pass:
// layout damage is still caught, and bytes from elsewhere keep DecodeBlock.
#include <gtest/gtest.h>

#include "prefixkv/codec.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

using testing::SampleRecord;

TEST(TrustedDecode, DecodesTheSameRecordAsTheVerifyingDecoder) {
  SharedBytes enc = EncodeBlock(SampleRecord()).value();
  EXPECT_EQ(DecodeTrustedBlock(enc).value(), DecodeBlock(enc).value());
  EXPECT_EQ(DecodeTrustedBlock(enc).value(), SampleRecord());
}

TEST(TrustedDecode, SkipsOnlyTheChecksum) {
  std::string bytes(EncodeBlock(SampleRecord()).value().view());
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
