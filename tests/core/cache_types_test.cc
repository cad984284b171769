// The cache type registry: family matching by family, never by exact name.
#include <gtest/gtest.h>

#include "prefixkv/namespace_spec.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

// Seed: test_registry_rotating_family.
TEST(CacheTypeRegistry, RegistryRotatingFamily) {
  EXPECT_TRUE(CacheTypeRegistry::IsRotatingFamily("RotatingKVCache"));
  EXPECT_TRUE(CacheTypeRegistry::IsRotatingFamily("PrefillReadyRotatingKVCache"));
  EXPECT_TRUE(CacheTypeRegistry::IsRotatingFamily("BufferedRotatingKVCache"));
  EXPECT_TRUE(CacheTypeRegistry::IsRotatingFamily("BatchRotatingKVCache"));
  EXPECT_FALSE(CacheTypeRegistry::IsRotatingFamily("KVCache"));
  EXPECT_FALSE(CacheTypeRegistry::IsRotatingFamily("TurboQuantKVCache"));
  EXPECT_FALSE(CacheTypeRegistry::IsRotatingFamily("ArraysCache"));
  EXPECT_FALSE(CacheTypeRegistry::IsRotatingFamily("SomethingElse"));
}

TEST(CacheTypeRegistry, EveryFamilyHasItsBuiltinNames) {
  EXPECT_EQ(CacheTypeRegistry::Lookup("KVCache").value(), CacheFamily::kSliceableKV);
  EXPECT_EQ(CacheTypeRegistry::Lookup("QuantizedKVCache").value(),
            CacheFamily::kQuantizedKV);
  EXPECT_EQ(CacheTypeRegistry::Lookup("ArraysCache").value(), CacheFamily::kArrays);
  EXPECT_EQ(CacheTypeRegistry::Lookup("MambaCache").value(), CacheFamily::kArrays);
  EXPECT_EQ(CacheTypeRegistry::Lookup("CacheList").value(), CacheFamily::kComposite);
  EXPECT_TRUE(CacheTypeRegistry::IsArraysFamily("ArraysCache"));
  EXPECT_TRUE(CacheTypeRegistry::IsSliceableFamily("QuantizedKVCache"));
  EXPECT_FALSE(CacheTypeRegistry::IsSliceableFamily("RotatingKVCache"));
}

TEST(CacheTypeRegistry, UnknownNameIsAnErrorNotADefault) {
  StatusOr<CacheFamily> f = CacheTypeRegistry::Lookup("MysteryCache");
  ASSERT_FALSE(f.ok());
  EXPECT_TRUE(f.status().IsNotFound());
  EXPECT_NE(f.status().message().find("MysteryCache"), std::string::npos);
  EXPECT_FALSE(CacheTypeRegistry::IsSliceableFamily("MysteryCache"));
  EXPECT_FALSE(CacheTypeRegistry::IsArraysFamily("MysteryCache"));
}

TEST(CacheTypeRegistry, RegisteredNamesJoinTheirFamilyAndNeverChangeIt) {
  ASSERT_OK(
      CacheTypeRegistry::Register("ChunkedRotatingKVCache", CacheFamily::kRotating));
  EXPECT_TRUE(CacheTypeRegistry::IsRotatingFamily("ChunkedRotatingKVCache"));
  EXPECT_OK(
      CacheTypeRegistry::Register("ChunkedRotatingKVCache", CacheFamily::kRotating));
  EXPECT_TRUE(
      CacheTypeRegistry::Register("ChunkedRotatingKVCache", CacheFamily::kSliceableKV)
          .IsInvalidArgument());
  EXPECT_TRUE(
      CacheTypeRegistry::Register("KVCache", CacheFamily::kArrays).IsInvalidArgument());
  EXPECT_TRUE(CacheTypeRegistry::Register("", CacheFamily::kArrays).IsInvalidArgument());
}

TEST(CacheFamily, SliceableAndTipOnlyPartitionTheFamilies) {
  for (CacheFamily f :
       {CacheFamily::kSliceableKV, CacheFamily::kQuantizedKV, CacheFamily::kRotating,
        CacheFamily::kArrays, CacheFamily::kComposite}) {
    EXPECT_NE(IsSliceable(f), IsTipOnly(f)) << CacheFamilyName(f);
  }
  EXPECT_TRUE(IsTipOnly(CacheFamily::kRotating));
  EXPECT_TRUE(IsSliceable(CacheFamily::kQuantizedKV));
}

TEST(RotatingMeta, ParsesKeepMaxSizeOffsetIdx) {
  RotatingMeta m = RotatingMeta::Parse({"0", "4", "8", "4"}).value();
  EXPECT_EQ(m, (RotatingMeta{0, 4, 8, 4}));
  EXPECT_EQ(m.FilledTokens(), 4);
  EXPECT_EQ(m.ToStrings(), (std::vector<std::string>{"0", "4", "8", "4"}));
  EXPECT_EQ(RotatingMeta::Parse({"0", "16", "3", "3"}).value().FilledTokens(), 3);
}

TEST(RotatingMeta, RejectsInconsistentOrMalformedMeta) {
  // The name of the status code Parse returns ("OK" when it accepts the meta).
  auto parse_code = [](std::vector<std::string> meta) {
    return std::string(StatusCodeName(RotatingMeta::Parse(meta).status().code()));
  };
  const std::string kInvalid = "InvalidArgument";
  EXPECT_EQ(parse_code({"0", "4", "8"}), kInvalid);
  EXPECT_EQ(parse_code({"0", "4", "8", "4", "1"}), kInvalid);
  EXPECT_EQ(parse_code({"0", "0", "8", "0"}), kInvalid);   // no window
  EXPECT_EQ(parse_code({"5", "4", "8", "0"}), kInvalid);   // keep > max_size
  EXPECT_EQ(parse_code({"0", "4", "8", "5"}), kInvalid);   // idx > max_size
  EXPECT_EQ(parse_code({"0", "4", "-8", "0"}), kInvalid);  // negative
  EXPECT_EQ(parse_code({"0", "4x", "8", "0"}), kInvalid);  // not a number
  EXPECT_EQ(parse_code({"0", "", "8", "0"}), kInvalid);
}

}  // namespace
}  // namespace prefixkv
