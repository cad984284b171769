// The strict exposition-format checker the metrics tests rely on
// (exposition_check.h): it accepts a well-formed text and returns its
// samples, and rejects each kind of malformed one, so a renderer bug cannot
// slip through a checker that accepts everything.
#include <gtest/gtest.h>

#include "tests/server/exposition_check.h"
#include "tests/support/test_util.h"

namespace prefixkv::testing {
namespace {

const char* const kValid = R"(# HELP a_total Things, with a \\ and a \n in the help
# TYPE a_total counter
a_total{x="1",y="q\"\\\n"} 3
a_total{x="2"} 4e3
# TYPE g gauge
# HELP g A gauge
g -1.5 1700000000000
# HELP h_seconds Latency
# TYPE h_seconds histogram
h_seconds_bucket{o="a",le="0.1"} 1
h_seconds_bucket{o="a",le="1"} 2
h_seconds_bucket{o="a",le="+Inf"} 3
h_seconds_sum{o="a"} 1.5
h_seconds_count{o="a"} 3
)";

TEST(ExpositionCheck, AcceptsAWellFormedTextAndReturnsItsSamples) {
  ASSERT_OK_AND_ASSIGN(PromExposition e, ParseExposition(kValid));
  ASSERT_EQ(e.families.size(), 3u);
  EXPECT_EQ(e.families[0].help, "Things, with a \\ and a \n in the help");
  EXPECT_EQ(e.Value("a_total", {{"x", "1"}, {"y", "q\"\\\n"}}), 3);
  EXPECT_EQ(e.Value("a_total", {{"x", "2"}}), 4000);
  EXPECT_EQ(e.Value("g"), -1.5);
  EXPECT_EQ(e.Value("h_seconds_bucket", {{"le", "1"}, {"o", "a"}}), 2);
  EXPECT_EQ(e.Value("h_seconds_count", {{"o", "a"}}), 3);
  EXPECT_EQ(e.Value("a_total", {{"x", "3"}}), std::nullopt);
}

struct BadCase {
  const char* why;
  const char* reason;  // in the error message
  const char* text;
};

TEST(ExpositionCheck, RejectsEachKindOfMalformedText) {
  const BadCase cases[] = {
      {"no final line feed", "line feed", "# HELP g x\n# TYPE g gauge\ng 1"},
      {"blank line", "blank line", "# HELP g x\n# TYPE g gauge\n\ng 1\n"},
      {"carriage return", "carriage return", "# HELP g x\r\n# TYPE g gauge\ng 1\n"},
      {"free comment", "other than HELP/TYPE",
       "# hello\n# HELP g x\n# TYPE g gauge\ng 1\n"},
      {"no HELP", "before both HELP and TYPE", "# TYPE g gauge\ng 1\n"},
      {"no TYPE", "before both HELP and TYPE", "# HELP g x\ng 1\n"},
      {"HELP twice", "second HELP", "# HELP g x\n# HELP g y\n# TYPE g gauge\ng 1\n"},
      {"TYPE after samples", "before both HELP and TYPE",
       "# HELP g x\ng 1\n# TYPE g gauge\n"},
      {"unknown type", "unknown type", "# HELP g x\n# TYPE g meter\ng 1\n"},
      {"family without samples", "lacks HELP, TYPE or samples",
       "# HELP g x\n# TYPE g gauge\n"},
      {"family repeated", "repeated",
       "# HELP g x\n# TYPE g gauge\ng 1\n# HELP f x\n# TYPE f gauge\nf 1\n"
       "# HELP g x\n# TYPE g gauge\ng{a=\"1\"} 1\n"},
      {"sample of another family", "outside its family",
       "# HELP g x\n# TYPE g gauge\nf 1\n"},
      {"bad metric name", "bad metric name", "# HELP 1g x\n# TYPE 1g gauge\n1g 1\n"},
      {"bad label name", "bad label name", "# HELP g x\n# TYPE g gauge\ng{1a=\"x\"} 1\n"},
      {"reserved label name", "bad label name",
       "# HELP g x\n# TYPE g gauge\ng{__a=\"x\"} 1\n"},
      {"unquoted label value", "unquoted", "# HELP g x\n# TYPE g gauge\ng{a=x} 1\n"},
      {"bad escape", "bad escape", "# HELP g x\n# TYPE g gauge\ng{a=\"\\t\"} 1\n"},
      {"unterminated label", "unterminated", "# HELP g x\n# TYPE g gauge\ng{a=\"x} 1\n"},
      {"repeated label", "repeated label",
       "# HELP g x\n# TYPE g gauge\ng{a=\"x\",a=\"y\"} 1\n"},
      {"repeated series", "repeated series",
       "# HELP g x\n# TYPE g gauge\ng{a=\"x\"} 1\ng{a=\"x\"} 2\n"},
      {"bad value", "bad value", "# HELP g x\n# TYPE g gauge\ng 0x10\n"},
      {"two spaces", "bad value", "# HELP g x\n# TYPE g gauge\ng  1\n"},
      {"bad timestamp", "bad timestamp", "# HELP g x\n# TYPE g gauge\ng 1 1.5\n"},
      {"counter not _total", "_total", "# HELP c x\n# TYPE c counter\nc 1\n"},
      {"gauge named _total", "only counters",
       "# HELP g_total x\n# TYPE g_total gauge\ng_total 1\n"},
      {"negative counter", "negative",
       "# HELP c_total x\n# TYPE c_total counter\nc_total -1\n"},
      {"le outside a bucket", "le outside",
       "# HELP g x\n# TYPE g gauge\ng{le=\"1\"} 1\n"},
      {"bucket without le", "without le",
       "# HELP h x\n# TYPE h histogram\nh_bucket 1\nh_sum 1\nh_count 1\n"},
      {"le not ascending", "not ascending",
       "# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"0.5\"} 1\n"
       "h_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n"},
      {"buckets not cumulative", "not cumulative",
       "# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\n"
       "h_sum 1\nh_count 1\n"},
      {"no +Inf bucket", "+Inf bucket",
       "# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n"},
      {"count differs from +Inf", "_count differs",
       "# HELP h x\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 3\n"},
      {"no sum", "no _sum",
       "# HELP h x\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_count 2\n"},
      {"label value not UTF-8", "not UTF-8",
       "# HELP g x\n# TYPE g gauge\ng{a=\"\xff\"} 1\n"},
      {"label value a surrogate", "not UTF-8",
       "# HELP g x\n# TYPE g gauge\ng{a=\"\xed\xa0\x80\"} 1\n"},
      {"plain sample in a histogram", "outside its family",
       "# HELP h x\n# TYPE h histogram\nh 1\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\n"
       "h_count 1\n"},
  };
  for (const BadCase& c : cases) {
    Status st = ParseExposition(c.text).status();
    EXPECT_FALSE(st.ok()) << c.why << ":\n" << c.text;
    EXPECT_NE(st.message().find(c.reason), std::string::npos)
        << c.why << ": " << st.message();
  }
}

}  // namespace
}  // namespace prefixkv::testing
