// The block codec: canonical round trips, zero-copy decode, and Corruption (never
// a different record, never a crash) for every kind of damaged input.
#include "prefixkv/codec.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <optional>
#include <random>

#include "prefixkv/advanced/hash.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

using testing::SampleRecord;

Status DecodeCopy(const std::string& bytes) {
  return DecodeBlock(SharedBytes::Copy(bytes)).status();
}

TEST(Codec, RoundTripsRandomRecords) {
  std::mt19937_64 rng(testing::TestSeed("Codec.RoundTripsRandomRecords"));
  for (uint64_t i = 0, n = testing::Iterations(2000, 200000); i < n; ++i) {
    bool compress = rng() % 2;
    BlockRecord r = testing::RandomRecord(rng, /*compressible=*/compress);
    EncodeOptions opt;
    opt.compress = compress;
    opt.min_compress_bytes = 64;
    SharedBytes enc = EncodeBlock(r, opt).value();
    StatusOr<BlockRecord> back = DecodeBlock(enc);
    ASSERT_OK(back) << "iteration " << i;
    ASSERT_EQ(*back, r) << "iteration " << i;
    // Canonical: encoding the decoded record again gives the same bytes.
    ASSERT_EQ(EncodeBlock(*back, opt).value().view(), enc.view()) << "iteration " << i;
  }
}

TEST(Codec, DecodedRawTensorsViewTheEncodedBuffer) {
  SharedBytes enc = EncodeBlock(SampleRecord()).value();
  BlockRecord back = DecodeBlock(enc).value();
  const Tensor& k = back.layers[0].tensors[0];
  EXPECT_GE(k.data(), enc.data());
  EXPECT_LE(k.data() + k.nbytes(), enc.data() + enc.size());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(k.data()) % kRecordTensorAlignment, 0u);
  long before = enc.use_count();
  {
    Tensor keep = k;
    EXPECT_GT(enc.use_count(), before);
  }
}

TEST(Codec, CompressesOnlyWhenSmaller) {
  BlockRecord r = SampleRecord();
  r.layers[0].tensors[0] = Tensor::Filled(DType::kFloat16, {1, 2, 256, 8}, 0);
  r.layers[0].tensors[1] = Tensor::Filled(DType::kFloat16, {1, 2, 256, 8}, 7);
  std::mt19937_64 rng(1);
  r.layers.push_back(LayerState{
      "KVCache", {"4"}, false, {testing::RandomTensor(rng, DType::kUInt8, {8192})}});
  EncodeOptions opt;
  opt.compress = true;
  SharedBytes plain = EncodeBlock(r).value();
  SharedBytes packed = EncodeBlock(r, opt).value();
  EXPECT_LT(packed.size() + 2 * 8192 - 256, plain.size());  // constant tensors shrank
  EXPECT_EQ(DecodeBlock(packed).value(), r);
  // The random tensor stayed raw: its bytes are visible in the record verbatim.
  const Tensor& random = r.layers[2].tensors[0];
  EXPECT_NE(packed.view().find(std::string_view(
                reinterpret_cast<const char*>(random.data()), random.nbytes())),
            std::string_view::npos);
}

TEST(Codec, EverySingleByteFlipIsCorruptionOrTheIdenticalRecord) {
  BlockRecord r = SampleRecord();
  for (bool compress : {false, true}) {
    EncodeOptions opt;
    opt.compress = compress;
    opt.min_compress_bytes = 16;
    if (compress)
      r.layers[0].tensors[1] = Tensor::Filled(DType::kFloat16, {1, 2, 4, 8}, 3);
    std::string enc(EncodeBlock(r, opt).value().view());
    for (size_t i = 0; i < enc.size(); ++i) {
      for (uint8_t mask : {0x01, 0x80, 0xFF}) {
        std::string bad = enc;
        bad[i] = static_cast<char>(bad[i] ^ mask);
        StatusOr<BlockRecord> got = DecodeBlock(SharedBytes::Copy(bad));
        if (got.ok()) {
          ASSERT_EQ(*got, r) << "byte " << i << " mask " << int(mask)
                             << " decoded differently";
        } else {
          ASSERT_TRUE(got.status().IsCorruption()) << got.status().ToString();
        }
      }
    }
  }
}

TEST(Codec, EveryTruncationIsCorruption) {
  std::string enc(EncodeBlock(SampleRecord()).value().view());
  for (size_t len = 0; len < enc.size(); ++len) {
    ASSERT_TRUE(DecodeCopy(enc.substr(0, len)).IsCorruption()) << "length " << len;
  }
  ASSERT_TRUE(DecodeCopy(enc + std::string(1, '\0')).IsCorruption());
}

TEST(Codec, ErrorsSayWhatWasWrong) {
  std::string enc(EncodeBlock(SampleRecord()).value().view());
  std::string bad = enc;
  bad[0] = 'X';
  EXPECT_NE(DecodeCopy(bad).message().find("magic"), std::string::npos);
  bad = enc;
  bad[4] = 9;
  EXPECT_NE(DecodeCopy(bad).message().find("version 9"), std::string::npos);
  bad = enc;
  bad[bad.size() - 1] ^= 1;
  EXPECT_EQ(DecodeCopy(bad).message(), "checksum mismatch");
  EXPECT_NE(DecodeCopy(enc.substr(0, 10)).message().find("truncated"), std::string::npos);
}

TEST(Codec, LimitsAreCheckedBeforeAllocating) {
  BlockRecord r = SampleRecord();
  SharedBytes enc = EncodeBlock(r).value();
  DecodeLimits tight;
  tight.max_layers = 1;
  EXPECT_TRUE(DecodeBlock(enc, tight).status().IsCorruption());
  tight = DecodeLimits{};
  tight.max_tensor_bytes = 64;  // each tensor is 128 bytes
  EXPECT_TRUE(DecodeBlock(enc, tight).status().IsCorruption());
  tight = DecodeLimits{};
  tight.max_record_bytes = enc.size() - 1;
  EXPECT_TRUE(DecodeBlock(enc, tight).status().IsCorruption());
  tight = DecodeLimits{};
  tight.max_tokens = 3;
  EXPECT_TRUE(DecodeBlock(enc, tight).status().IsCorruption());
}

TEST(Codec, HugeDeclaredDimensionsAreRejectedNotAllocated) {
  // A descriptor claiming a 2^40-element tensor must fail on the limit check.
  BlockRecord r = SampleRecord();
  std::string enc(EncodeBlock(r).value().view());
  // The first tensor descriptor follows the tokens and the layer's strings.
  size_t desc = kRecordFixedHeaderBytes + 16 + 2 + 7 + 2 + 2 + 1 + 1 + 1;
  ASSERT_EQ(static_cast<uint8_t>(enc[desc]), static_cast<uint8_t>(DType::kFloat16));
  std::string bad = enc;
  bad[desc + 4 + 8 * 2 + 5] = 1;  // dims[2] |= 1 << 40
  EXPECT_TRUE(DecodeCopy(bad).IsCorruption());
}

TEST(Codec, InvalidRecordsAreNotEncoded) {
  BlockRecord r = SampleRecord();
  r.layers[1].tensors.push_back(
      Tensor::Filled(DType::kUInt8, {4}, 1));  // placeholder + tensor
  EXPECT_TRUE(EncodeBlock(r).status().IsInvalidArgument());
  r = SampleRecord();
  r.tokens.pop_back();  // tokens no longer match token_count
  EXPECT_TRUE(EncodeBlock(r).status().IsInvalidArgument());
  r = SampleRecord();
  r.layers[0].tensors[0] = Tensor(DType::kFloat32, {3}, SharedBytes::Copy("abc"));
  EXPECT_TRUE(EncodeBlock(r).status().IsInvalidArgument());
  r = SampleRecord();
  r.layers[0].cache_type = std::string(5000, 'x');
  EXPECT_TRUE(EncodeBlock(r).status().IsInvalidArgument());
}

// A record whose tensors are whole [a, b, T, d] tensors, and the token rows
// of them a block takes; `compressible` tensors repeat a short pattern.
struct RowsCase {
  BlockRecord whole;
  std::vector<std::optional<TokenRows>> rows;
};

RowsCase RandomRowsCase(std::mt19937_64& rng, bool compressible) {
  RowsCase c;
  c.whole.key = BlockKey{rng(), rng()};
  c.whole.token_count = 4;
  for (size_t l = 1 + rng() % 4; l > 0; --l) {
    LayerState layer;
    layer.cache_type = "KVCache";
    const int64_t tokens = 1 + static_cast<int64_t>(rng() % 40);
    // Outer dimensions of 1 (one contiguous run) and of more (one run per row).
    const std::vector<int64_t> shape{1 + static_cast<int64_t>(rng() % 2),
                                     1 + static_cast<int64_t>(rng() % 3), tokens,
                                     1 + static_cast<int64_t>(rng() % 24)};
    for (size_t t = 1 + rng() % 2; t > 0; --t) {
      layer.tensors.push_back(
          compressible
              ? Tensor::Filled(DType::kFloat16, shape, static_cast<uint8_t>(rng()))
              : testing::RandomTensor(rng, DType::kFloat16, shape));
    }
    c.whole.layers.push_back(std::move(layer));
    if (rng() % 4 == 0) {
      c.rows.push_back(std::nullopt);  // this layer is encoded whole
    } else {
      const int64_t start = static_cast<int64_t>(rng() % (tokens + 1));
      c.rows.push_back(
          TokenRows{start, static_cast<int64_t>(rng() % (tokens - start + 1))});
    }
  }
  return c;
}

// The record EncodeBlockRows encodes, sliced the slow way.
BlockRecord Sliced(const RowsCase& c) {
  BlockRecord r = c.whole;
  for (size_t l = 0; l < r.layers.size(); ++l) {
    if (!c.rows[l].has_value()) continue;
    for (Tensor& t : r.layers[l].tensors) {
      t = t.SliceAxis(t.ndim() - 2, c.rows[l]->start, c.rows[l]->length).value();
    }
  }
  return r;
}

TEST(Codec, EncodingTokenRowsIsEncodingTheSlicedRecord) {
  std::mt19937_64 rng(testing::TestSeed("Codec.EncodingTokenRows"));
  for (uint64_t i = 0, n = testing::Iterations(300, 30000); i < n; ++i) {
    const bool compress = rng() % 2;
    const RowsCase c = RandomRowsCase(rng, compress);
    EncodeOptions opt;
    opt.compress = compress;
    opt.min_compress_bytes = 64;
    ASSERT_OK_AND_ASSIGN(SharedBytes rows, EncodeBlockRows(c.whole, c.rows, opt));
    ASSERT_OK_AND_ASSIGN(SharedBytes sliced, EncodeBlock(Sliced(c), opt));
    ASSERT_EQ(rows.view(), sliced.view()) << "iteration " << i;
    ASSERT_OK(DecodeBlock(rows)) << "iteration " << i;
  }
}

TEST(Codec, EncodingHashesEachByteOnce) {
  std::mt19937_64 rng(testing::TestSeed("Codec.EncodingHashesEachByteOnce"));
  const RowsCase c = RandomRowsCase(rng, /*compressible=*/false);
  const BlockRecord sliced = Sliced(c);
  uint64_t tensor_bytes = 0;
  for (const LayerState& l : sliced.layers) {
    for (const Tensor& t : l.tensors) tensor_bytes += t.nbytes();
  }
  const uint64_t before = ThreadHashedBytes();
  ASSERT_OK_AND_ASSIGN(SharedBytes enc, EncodeBlockRows(c.whole, c.rows));
  const uint64_t hashed = ThreadHashedBytes() - before;
  // The header (less its checksum field) and every tensor byte, once.
  const uint64_t header_len = enc.data()[8] | enc.data()[9] << 8;  // u32 at 8
  EXPECT_EQ(hashed, header_len - 8 + tensor_bytes);
}

TEST(Codec, TokenRowsOutsideATensorAreInvalid) {
  RowsCase c;
  LayerState layer;
  layer.cache_type = "KVCache";
  layer.tensors.push_back(Tensor::Filled(DType::kFloat16, {1, 2, 8, 4}, 1));
  c.whole.layers.push_back(layer);
  for (TokenRows bad :
       {TokenRows{-1, 2}, TokenRows{7, 2}, TokenRows{9, 0}, TokenRows{0, -1}}) {
    EXPECT_TRUE(EncodeBlockRows(c.whole, {bad}).status().IsInvalidArgument())
        << bad.start << " +" << bad.length;
  }
  EXPECT_OK(EncodeBlockRows(c.whole, {TokenRows{8, 0}}));
  // One entry per layer, and a token axis to cut.
  EXPECT_TRUE(EncodeBlockRows(c.whole, {TokenRows{0, 1}, std::nullopt})
                  .status()
                  .IsInvalidArgument());
  c.whole.layers[0].tensors[0] = Tensor::Filled(DType::kFloat16, {8}, 1);
  EXPECT_TRUE(EncodeBlockRows(c.whole, {TokenRows{0, 1}}).status().IsInvalidArgument());
}

TEST(Codec, TokensAreOptionalAndPartialTailsAreMarked) {
  BlockRecord r = SampleRecord();
  r.partial = true;
  EncodeOptions no_tokens;
  no_tokens.store_tokens = false;
  BlockRecord back = DecodeBlock(EncodeBlock(r, no_tokens).value()).value();
  EXPECT_TRUE(back.tokens.empty());
  EXPECT_TRUE(back.partial);
  EXPECT_EQ(back.token_count, 4u);
  EXPECT_EQ(back.layers, r.layers);
}

TEST(Codec, PeekAndVerifyAgreeWithDecode) {
  BlockRecord r = SampleRecord();
  SharedBytes enc = EncodeBlock(r).value();
  RecordIdentity id = PeekBlockIdentity(enc.view()).value();
  EXPECT_EQ(id.key, r.key);
  EXPECT_EQ(id.parent, r.parent);
  EXPECT_EQ(id.namespace_id, r.namespace_id);
  EXPECT_EQ(id.token_count, 4u);
  EXPECT_OK(VerifyBlock(enc));
  std::string bad(enc.view());
  bad[bad.size() - 3] ^= 4;
  EXPECT_TRUE(VerifyBlock(SharedBytes::Copy(bad)).IsCorruption());
  EXPECT_TRUE(PeekBlockIdentity("short").status().IsCorruption());
}

}  // namespace
}  // namespace prefixkv

namespace prefixkv {
namespace {

// Reads the hex dump of docs/format.md section 2.6 (the first 39 columns of each
// line of the code block after "### 2.6").
std::string GoldenBytesFromFormatDoc() {
  std::ifstream doc(std::string(PREFIXKV_SOURCE_DIR) + "/docs/format.md");
  std::string line, bytes;
  bool in_section = false, in_block = false;
  while (std::getline(doc, line)) {
    if (line.rfind("### 2.6", 0) == 0) in_section = true;
    if (!in_section || line.rfind("```", 0) != 0) {
      if (in_block) {
        std::string hex;
        for (char c : line.substr(0, 39)) {
          if (c != ' ') hex += c;
        }
        for (size_t i = 0; i + 1 < hex.size(); i += 2) {
          bytes += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
        }
      }
      continue;
    }
    if (in_block) break;
    in_block = true;
  }
  return bytes;
}

// The complete record printed in docs/format.md section 2.6.
TEST(Codec, GoldenRecordMatchesTheFormatDocument) {
  BlockRecord r;
  r.key = BlockKey{0x0102030405060708ull, 0x1112131415161718ull};
  r.parent = BlockKey{0, 0x21};
  r.namespace_id = BlockKey{0, 0x31};
  r.token_count = 2;
  r.tokens = {7, -1};
  r.layers.push_back(LayerState{
      "KVCache",
      {"2"},
      false,
      {Tensor(DType::kFloat16, {1, 2}, SharedBytes::Copy("\x01\x02\x03\x04", 4))}});
  r.layers.push_back(MakePlaceholder("RotatingKVCache"));
  std::string golden = GoldenBytesFromFormatDoc();
  ASSERT_EQ(golden.size(), 180u);
  EXPECT_EQ(EncodeBlock(r).value().view(), golden);
  EXPECT_EQ(DecodeBlock(SharedBytes::Copy(golden)).value(), r);
}

}  // namespace
}  // namespace prefixkv
