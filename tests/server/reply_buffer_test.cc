// ReplyBuffer: RESP2 encoding, and large bulk payloads referenced, not copied.
#include "reply_buffer.h"

#include <gtest/gtest.h>

namespace prefixkv::server {
namespace {

TEST(ReplyBuffer, EncodesEveryReplyType) {
  ReplyBuffer r;
  r.Simple("OK");
  r.Error("ERR bad\r\nthing");
  r.Integer(-42);
  r.Bulk("hi");
  r.Null();
  r.ArrayHeader(2);
  EXPECT_EQ(r.ToString(), "+OK\r\n-ERR bad  thing\r\n:-42\r\n$2\r\nhi\r\n$-1\r\n*2\r\n");
  EXPECT_EQ(r.bytes(), r.ToString().size());
}

TEST(ReplyBuffer, ReferencesLargePayloadsInsteadOfCopyingThem) {
  SharedBytes big = SharedBytes::Copy(std::string(ReplyBuffer::kReferenceBytes, 'x'));
  ReplyBuffer r;
  r.Simple("A");
  r.Bulk(big);
  r.Simple("B");
  EXPECT_EQ(big.use_count(), 2);  // held by the reply, not copied
  std::vector<std::pair<const void*, size_t>> pieces;
  r.ForEachPiece([&](const void* p, size_t n) { pieces.emplace_back(p, n); });
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[1].first, big.data());
  EXPECT_EQ(r.ToString(), "+A\r\n$16384\r\n" + std::string(big.view()) + "\r\n+B\r\n");
  r.Clear();
  EXPECT_EQ(big.use_count(), 1);
  EXPECT_TRUE(r.empty());
}

TEST(ReplyBuffer, CopiesSmallPayloads) {
  SharedBytes small = SharedBytes::Copy("tiny");
  ReplyBuffer r;
  r.Bulk(small);
  EXPECT_EQ(small.use_count(), 1);
  EXPECT_EQ(r.ToString(), "$4\r\ntiny\r\n");
}

TEST(ReplyBuffer, StopsCopyingRepeatedPayloadsOnceItsCopyBudgetIsSpent) {
  SharedBytes value = SharedBytes::Copy(std::string(4096, 'v'));
  ReplyBuffer r;
  const size_t n = 2 * ReplyBuffer::kCopyBudgetBytes / value.size();
  for (size_t i = 0; i < n; ++i) r.Bulk(value);
  // About half were copied (up to the budget); the rest share the stored buffer.
  EXPECT_GT(value.use_count(), static_cast<long>(n / 3));
  EXPECT_EQ(r.bytes(), n * (value.size() + 9));  // "$4096\r\n" + payload + "\r\n"
  std::string all = r.ToString();
  EXPECT_EQ(all.size(), r.bytes());
  EXPECT_EQ(all.substr(all.size() - 4098), std::string(value.view()) + "\r\n");
}

// errors() counts error replies only, and Clear (a sent reply) keeps the
// count: the dispatcher compares it before and after a command.
TEST(ReplyBuffer, CountsErrorRepliesAcrossClears) {
  ReplyBuffer r;
  r.Simple("OK");
  r.Bulk("-not an error");
  r.Integer(-1);
  r.Null();
  EXPECT_EQ(r.errors(), 0u);
  r.Error("ERR one");
  r.ArrayHeader(2);
  r.Integer(1);
  r.Error("ERR two");
  EXPECT_EQ(r.errors(), 2u);
  r.Clear();
  EXPECT_EQ(r.errors(), 2u);
  r.Error("ERR three");
  EXPECT_EQ(r.errors(), 3u);
}

// A connection's reply buffer is reused; one grown for a large reply is
// freed when cleared, so an idle connection does not keep it.
TEST(ReplyBuffer, ClearFreesALargeBufferAndReleaseEveryBuffer) {
  ReplyBuffer r;
  r.Bulk(std::string(1000, 'x'));
  r.Clear();
  EXPECT_GT(r.buffer_bytes(), 1000u);  // kept for the next replies
  EXPECT_TRUE(r.empty());
  r.Bulk(std::string(100000, 'x'));
  EXPECT_GT(r.buffer_bytes(), 100000u);
  r.Clear();
  EXPECT_EQ(r.buffer_bytes(), 0u);
  r.Bulk(std::string(1000, 'x'));
  r.Release();
  EXPECT_EQ(r.buffer_bytes(), 0u);
  EXPECT_TRUE(r.empty());
  r.Simple("OK");
  EXPECT_EQ(r.ToString(), "+OK\r\n");
}

}  // namespace
}  // namespace prefixkv::server
