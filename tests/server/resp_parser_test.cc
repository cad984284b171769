// The RESP2 request parser: split input, pipelining, inline commands, and every
// malformed or over-limit case.
#include "resp_parser.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace prefixkv::server {
namespace {

using Result = RespParser::Result;
using Words = std::vector<std::string>;

Words ToWords(const RespArgs& args) {
  Words out;
  for (const SharedBytes& a : args) out.emplace_back(a.view());
  return out;
}

// Feeds `input` in pieces of `step` bytes; collects every command until an
// error. Returns the error text (empty when none).
std::string ParseAll(RespParser& parser, std::string_view input, size_t step,
                     std::vector<Words>* commands) {
  RespArgs args;
  for (size_t pos = 0; pos < input.size(); pos += step) {
    std::string_view piece = input.substr(pos, step);
    while (true) {
      Result r = parser.Parse(&piece, &args);
      if (r == Result::kError) return parser.error();
      if (r == Result::kNeedMore) {
        EXPECT_TRUE(piece.empty());
        break;
      }
      commands->push_back(ToWords(args));
    }
  }
  return "";
}

std::string FirstError(std::string_view input, RespLimits limits = {}) {
  RespParser parser(limits);
  std::vector<Words> commands;
  return ParseAll(parser, input, input.size(), &commands);
}

TEST(RespParser, ParsesOneArrayCommand) {
  RespParser parser({});
  std::vector<Words> commands;
  EXPECT_EQ(ParseAll(parser, "*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n", 1000, &commands), "");
  ASSERT_EQ(commands.size(), 1u);
  EXPECT_EQ(commands[0], (Words{"GET", "key"}));
  EXPECT_TRUE(parser.AtCommandBoundary());
}

TEST(RespParser, ParsesTheSameCommandsWhenFedByteByByte) {
  using namespace std::string_literals;
  // The value holds CR, LF and NUL: bulk bodies are binary-safe.
  const std::string value = "a\r\n\0b"s;
  const std::string input = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\n"s + value +
                            "\r\n*1\r\n$4\r\nPING\r\nECHO hi\r\n";
  for (size_t step : {size_t{1}, size_t{2}, size_t{3}, size_t{7}, input.size()}) {
    RespParser parser({});
    std::vector<Words> commands;
    EXPECT_EQ(ParseAll(parser, input, step, &commands), "") << "step " << step;
    ASSERT_EQ(commands.size(), 3u) << "step " << step;
    EXPECT_EQ(commands[0], (Words{"SET", "k", value})) << "step " << step;
    EXPECT_EQ(commands[1], (Words{"PING"}));
    EXPECT_EQ(commands[2], (Words{"ECHO", "hi"}));
    EXPECT_TRUE(parser.AtCommandBoundary());
  }
}

TEST(RespParser, ReturnsPipelinedCommandsOneAtATimeLeavingTheRest) {
  RespParser parser({});
  std::string_view input = "*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPING\r\n*1\r\n$4";
  RespArgs args;
  ASSERT_EQ(parser.Parse(&input, &args), Result::kCommand);
  EXPECT_EQ(input.size(), 14u + 6u);
  ASSERT_EQ(parser.Parse(&input, &args), Result::kCommand);
  EXPECT_EQ(parser.Parse(&input, &args), Result::kNeedMore);
  EXPECT_TRUE(input.empty());
  EXPECT_FALSE(parser.AtCommandBoundary());
}

TEST(RespParser, SkipsEmptyArraysAndBlankInlineLines) {
  RespParser parser({});
  std::vector<Words> commands;
  EXPECT_EQ(ParseAll(parser, "*0\r\n\r\n  \r\n*1\r\n$4\r\nPING\r\n", 100, &commands), "");
  ASSERT_EQ(commands.size(), 1u);
  EXPECT_EQ(commands[0], (Words{"PING"}));
}

TEST(RespParser, SplitsInlineCommandsOnSpacesAndTabsWithOrWithoutCr) {
  RespParser parser({});
  std::vector<Words> commands;
  EXPECT_EQ(ParseAll(parser, "SET  a\tb\r\nGET a\n", 100, &commands), "");
  ASSERT_EQ(commands.size(), 2u);
  EXPECT_EQ(commands[0], (Words{"SET", "a", "b"}));
  EXPECT_EQ(commands[1], (Words{"GET", "a"}));
}

// Inline words are read as Redis reads them (sdssplitargs): quotes group and
// are not part of the word, with Redis's escapes. They used to be bytes of
// their word: `SET k "v"` stored "v" with its quotes, where Redis stores v.
TEST(RespParser, SplitsQuotedInlineWordsAsRedisDoes) {
  using namespace std::string_literals;
  const std::string input =
      "SET k \"a b\"\r\n"
      "SET k \"v\"\r\n"
      "ECHO 'it\\'s'\r\n"
      "ECHO \"\\x41\\n\\\"\\\\\\xZZ\"\r\n"
      "ECHO a\"b c\"\r\n"
      "ECHO \"\" 'a\\nb'\r\n"
      "ECHO \"a\"\tb\vc\r\n"
      "ECHO a\0b\r\n"s;
  const std::vector<Words> expected = {{"SET", "k", "a b"},   {"SET", "k", "v"},
                                       {"ECHO", "it's"},      {"ECHO", "A\n\"\\xZZ"},
                                       {"ECHO", "ab c"},      {"ECHO", "", "a\\nb"},
                                       {"ECHO", "a", "b\vc"}, {"ECHO", "a\0b"s}};
  for (size_t step : {size_t{1}, size_t{3}, input.size()}) {
    RespParser parser({});
    std::vector<Words> commands;
    EXPECT_EQ(ParseAll(parser, input, step, &commands), "") << "step " << step;
    EXPECT_EQ(commands, expected) << "step " << step;
  }
  for (const char* unbalanced : {"SET k \"a\r\n", "SET k \"a\"b\r\n", "SET k 'a\r\n",
                                 "SET k 'a'b\r\n", "SET k \"a\\\"\r\n"}) {
    EXPECT_EQ(FirstError(unbalanced), "Protocol error: unbalanced quotes in request")
        << unbalanced;
  }
}

TEST(RespParser, AcceptsAnEmptyBulkArgument) {
  RespParser parser({});
  std::vector<Words> commands;
  EXPECT_EQ(ParseAll(parser, "*2\r\n$4\r\nECHO\r\n$0\r\n\r\n", 1, &commands), "");
  ASSERT_EQ(commands.size(), 1u);
  EXPECT_EQ(commands[0], (Words{"ECHO", ""}));
}

TEST(RespParser, RejectsNegativeArrayAndBulkLengths) {
  EXPECT_EQ(FirstError("*-1\r\n"), "Protocol error: invalid multibulk length");
  EXPECT_EQ(FirstError("*1\r\n$-1\r\n"), "Protocol error: invalid bulk length");
  EXPECT_EQ(FirstError("*1\r\n$-5\r\n"), "Protocol error: invalid bulk length");
}

TEST(RespParser, RejectsLengthsThatAreNotPlainDecimalNumbers) {
  for (const char* bad : {"*\r\n", "*x\r\n", "*+1\r\n", "* 1\r\n", "*1 \r\n",
                          "*99999999999999999999\r\n", "*1\n"}) {
    EXPECT_EQ(FirstError(bad), "Protocol error: invalid multibulk length") << bad;
  }
  for (const char* bad : {"*1\r\n$\r\n", "*1\r\n$1x\r\n", "*1\r\n$1\n"}) {
    EXPECT_EQ(FirstError(bad), "Protocol error: invalid bulk length") << bad;
  }
}

TEST(RespParser, RejectsHeaderLinesThatNeverEnd) {
  EXPECT_EQ(FirstError("*" + std::string(100, '1')),
            "Protocol error: invalid multibulk length");
  EXPECT_EQ(FirstError("*1\r\n$" + std::string(100, '1')),
            "Protocol error: invalid bulk length");
}

TEST(RespParser, RejectsAnArrayElementThatIsNotABulkString) {
  EXPECT_EQ(FirstError("*2\r\n$4\r\nPING\r\n:1\r\n"),
            "Protocol error: expected '$', got ':'");
  EXPECT_EQ(FirstError("*1\r\n+PING\r\n"), "Protocol error: expected '$', got '+'");
}

TEST(RespParser, RejectsABulkNotFollowedByCrlf) {
  EXPECT_EQ(FirstError("*1\r\n$4\r\nPINGxx"),
            "Protocol error: expected CRLF after a bulk argument");
  EXPECT_EQ(FirstError("*1\r\n$4\r\nPING\rx"),
            "Protocol error: expected CRLF after a bulk argument");
}

TEST(RespParser, RejectsTooManyArrayElementsBeforeReadingThem) {
  RespLimits limits;
  limits.max_array_elements = 3;
  EXPECT_EQ(FirstError("*3\r\n", limits), "");
  EXPECT_EQ(FirstError("*4\r\n", limits), "Protocol error: invalid multibulk length");
  EXPECT_EQ(FirstError("*1048577\r\n"), "Protocol error: invalid multibulk length");
}

TEST(RespParser, RejectsABulkOverTheRequestLimitBeforeAllocatingIt) {
  RespLimits limits;
  limits.max_request_bytes = 10;
  EXPECT_EQ(FirstError("*1\r\n$10\r\n", limits), "");
  EXPECT_EQ(FirstError("*1\r\n$11\r\n", limits), "Protocol error: invalid bulk length");
  EXPECT_EQ(FirstError("*1\r\n$999999999999999999\r\n"),
            "Protocol error: invalid bulk length");
}

TEST(RespParser, CountsEveryArgumentAgainstTheRequestLimit) {
  RespLimits limits;
  limits.max_request_bytes = 10;
  EXPECT_EQ(FirstError("*2\r\n$5\r\naaaaa\r\n$5\r\nbbbbb\r\n", limits), "");
  EXPECT_EQ(FirstError("*2\r\n$5\r\naaaaa\r\n$6\r\n", limits),
            "Protocol error: invalid bulk length");
  // The budget is per command: the next command starts from zero.
  EXPECT_EQ(FirstError("*1\r\n$9\r\naaaaaaaaa\r\n*1\r\n$9\r\naaaaaaaaa\r\n", limits), "");
}

TEST(RespParser, RejectsAnInlineLineOverTheLimit) {
  RespLimits limits;
  limits.max_inline_bytes = 8;
  EXPECT_EQ(FirstError("PING abc\r\n", limits), "Protocol error: too big inline request");
  EXPECT_EQ(FirstError("PING ab\n", limits), "");
  EXPECT_EQ(FirstError(std::string(9, 'x'), limits),
            "Protocol error: too big inline request");
}

TEST(RespParser, StaysFailedAfterAnError) {
  RespParser parser({});
  std::string_view bad = "*-3\r\n";
  RespArgs args;
  ASSERT_EQ(parser.Parse(&bad, &args), Result::kError);
  std::string_view good = "*1\r\n$4\r\nPING\r\n";
  EXPECT_EQ(parser.Parse(&good, &args), Result::kError);
}

TEST(RespParser, ParseRespLengthAcceptsOnlyCanonicalIntegers) {
  int64_t v = 0;
  EXPECT_TRUE(ParseRespLength("0", &v));
  EXPECT_EQ(v, 0);
  EXPECT_TRUE(ParseRespLength("-12", &v));
  EXPECT_EQ(v, -12);
  EXPECT_TRUE(ParseRespLength("999999999999999999", &v));
  for (const char* bad :
       {"", "-", "+1", "1.0", " 1", "1 ", "0x10", "9999999999999999999"}) {
    EXPECT_FALSE(ParseRespLength(bad, &v)) << bad;
  }
}

TEST(RespParser, OffersALargeBulkBodyForDirectReads) {
  RespParser parser({});
  std::string_view header = "*2\r\n$3\r\nSET\r\n$100\r\nabc";
  RespArgs args;
  ASSERT_EQ(parser.Parse(&header, &args), Result::kNeedMore);
  EXPECT_TRUE(parser.DirectTarget(98).empty());  // only 97 bytes remain
  std::span<uint8_t> target = parser.DirectTarget(10);
  ASSERT_EQ(target.size(), 97u);
  std::fill(target.begin(), target.end(), 'z');
  parser.CommitDirect(97);
  std::string_view tail = "\r\n";
  ASSERT_EQ(parser.Parse(&tail, &args), Result::kCommand);
  EXPECT_EQ(args[1].view(), "abc" + std::string(97, 'z'));
}

// A declared length is a promise, not bytes: the buffer of a large bulk starts
// small and doubles as bytes arrive (it used to be allocated whole at the
// header, so one header could ask for 60 GB).
TEST(RespParser, GrowsALargeBulkAsItsBytesArriveInsteadOfReservingIt) {
  RespLimits limits;
  limits.max_request_bytes = size_t{1} << 40;
  RespParser parser(limits);
  constexpr size_t kDeclared = size_t{3} << 20;
  std::string header = "*2\r\n$4\r\nECHO\r\n$" + std::to_string(kDeclared) + "\r\n";
  std::string_view in = header;
  RespArgs args;
  ASSERT_EQ(parser.Parse(&in, &args), Result::kNeedMore);
  EXPECT_EQ(parser.DirectTarget(1).size(), kInitialBodyBytes);
  EXPECT_EQ(parser.body_capacity(), kInitialBodyBytes);
  std::string body(kDeclared, '\0');
  for (size_t i = 0; i < body.size(); ++i) body[i] = static_cast<char>(i * 131);
  // 1 MiB arrives through Parse, 1 MiB through direct reads, then the rest.
  std::string_view first(body.data(), 1 << 20);
  ASSERT_EQ(parser.Parse(&first, &args), Result::kNeedMore);
  EXPECT_TRUE(first.empty());
  EXPECT_LE(parser.body_capacity(), size_t{2} << 20);
  EXPECT_GE(parser.body_capacity(), size_t{1} << 20);
  size_t filled = 1 << 20;
  while (filled < (size_t{2} << 20)) {
    std::span<uint8_t> target = parser.DirectTarget(1);
    ASSERT_FALSE(target.empty());
    const size_t n = std::min(target.size(), (size_t{2} << 20) - filled);
    std::memcpy(target.data(), body.data() + filled, n);
    parser.CommitDirect(n);
    filled += n;
    EXPECT_LE(parser.body_capacity(), 2 * filled);
  }
  std::string rest = body.substr(filled) + "\r\n";
  std::string_view tail = rest;
  ASSERT_EQ(parser.Parse(&tail, &args), Result::kCommand);
  ASSERT_EQ(args.size(), 2u);
  EXPECT_EQ(args[1].size(), kDeclared);
  EXPECT_TRUE(args[1].view() == body);
}

TEST(RespParser, DetachedSmallArgumentsNoLongerShareTheParsersBuffer) {
  RespParser parser({});
  std::string_view input = "*2\r\n$4\r\nECHO\r\n$5\r\nhello\r\n";
  RespArgs args;
  ASSERT_EQ(parser.Parse(&input, &args), Result::kCommand);
  SharedBytes kept = DetachArg(args[1]);
  EXPECT_EQ(kept.view(), "hello");
  EXPECT_NE(kept.data(), args[1].data());
  long before = args[0].use_count();
  args.clear();
  EXPECT_EQ(kept.use_count(), 1);  // owns its own buffer
  EXPECT_GT(before, 1);            // the small arguments did share one
}

}  // namespace
}  // namespace prefixkv::server
