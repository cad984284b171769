// A strict checker of the Prometheus text exposition format, version 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/), for the
// metrics tests: ParseExposition accepts a text only when every line is
// well-formed and the families are consistent, and returns what it parsed.
//
// Stricter than Prometheus' own parser where prefixkv's renderer has no
// reason to differ: every family has exactly one "# HELP" and one "# TYPE",
// both before its first sample; no free comments and no blank lines; a
// family's samples are contiguous; counters, and only counters, are named
// *_total (as `promtool check metrics` lints), and are never
// negative; histograms have, per label set, _bucket lines with strictly
// ascending `le` ending in "+Inf", cumulative counts, a _sum, and a _count
// equal to the +Inf bucket.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "prefixkv/status.h"

namespace prefixkv::testing {

using PromLabels = std::vector<std::pair<std::string, std::string>>;

struct PromSample {
  std::string name;   // with the histogram suffix (_bucket, _sum, _count)
  PromLabels labels;  // in order of appearance, unescaped
  double value = 0;

  std::optional<std::string> Label(std::string_view label) const {
    for (const auto& [k, v] : labels) {
      if (k == label) return v;
    }
    return std::nullopt;
  }
};

struct PromFamily {
  std::string name;
  std::string type;  // counter, gauge, histogram, summary, untyped
  std::string help;  // unescaped
  std::vector<PromSample> samples;
};

struct PromExposition {
  std::vector<PromFamily> families;

  const PromFamily* Find(std::string_view name) const {
    for (const PromFamily& f : families) {
      if (f.name == name) return &f;
    }
    return nullptr;
  }
  // The value of the sample `name` whose labels are exactly `labels` (any
  // order); nullopt when there is none.
  std::optional<double> Value(std::string_view name, PromLabels labels = {}) const {
    std::sort(labels.begin(), labels.end());
    for (const PromFamily& f : families) {
      for (const PromSample& s : f.samples) {
        PromLabels have = s.labels;
        std::sort(have.begin(), have.end());
        if (s.name == name && have == labels) return s.value;
      }
    }
    return std::nullopt;
  }
};

namespace exposition_internal {

inline bool IsMetricName(std::string_view n) {
  static const std::regex re("[a-zA-Z_:][a-zA-Z0-9_:]*");
  return std::regex_match(n.begin(), n.end(), re);
}

inline bool IsLabelName(std::string_view n) {
  static const std::regex re("[a-zA-Z_][a-zA-Z0-9_]*");
  return std::regex_match(n.begin(), n.end(), re) && n.substr(0, 2) != "__";
}

// Go's ParseFloat forms Prometheus accepts, minus hex floats.
inline std::optional<double> ParseValue(std::string_view v) {
  if (v == "NaN") return std::nan("");
  if (v == "+Inf") return HUGE_VAL;
  if (v == "-Inf") return -HUGE_VAL;
  static const std::regex re(R"([+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?)");
  if (!std::regex_match(v.begin(), v.end(), re)) return std::nullopt;
  return std::strtod(std::string(v).c_str(), nullptr);
}

// Unescapes `text` where only the given characters may follow a backslash
// (HELP: \\ and n; label values: \\, " and n); nullopt on any other escape.
inline std::optional<std::string> Unescape(std::string_view text, bool quotes) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\') {
      out += text[i];
      continue;
    }
    if (++i == text.size()) return std::nullopt;
    if (text[i] == '\\') {
      out += '\\';
    } else if (text[i] == 'n') {
      out += '\n';
    } else if (quotes && text[i] == '"') {
      out += '"';
    } else {
      return std::nullopt;
    }
  }
  return out;
}

// Whether `s` is valid UTF-8 as Go's utf8.ValidString reads it (shortest
// forms only, no surrogates, nothing past U+10FFFF): Prometheus refuses a
// scrape with a label value that is not ("invalid label value").
inline bool IsValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
    const unsigned char c = b(0);
    size_t n = c < 0x80                 ? 1
               : c >= 0xC2 && c <= 0xDF ? 2
               : c >= 0xE0 && c <= 0xEF ? 3
               : c >= 0xF0 && c <= 0xF4 ? 4
                                        : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((b(k) & 0xC0) != 0x80) return false;
    }
    if ((c == 0xE0 && b(1) < 0xA0) || (c == 0xED && b(1) > 0x9F) ||
        (c == 0xF0 && b(1) < 0x90) || (c == 0xF4 && b(1) > 0x8F)) {
      return false;
    }
    i += n;
  }
  return true;
}

// Parses `{a="x",b="y"}` at the start of `rest` (advancing it).
inline Status ParseLabels(std::string_view& rest, PromLabels* labels) {
  rest.remove_prefix(1);  // '{'
  std::set<std::string> seen;
  while (true) {
    if (!rest.empty() && rest[0] == '}') break;
    size_t eq = rest.find('=');
    if (eq == std::string_view::npos) return Status::InvalidArgument("label without =");
    std::string name(rest.substr(0, eq));
    if (!IsLabelName(name))
      return Status::InvalidArgument("bad label name '" + name + "'");
    if (!seen.insert(name).second)
      return Status::InvalidArgument("repeated label " + name);
    rest.remove_prefix(eq + 1);
    if (rest.empty() || rest[0] != '"')
      return Status::InvalidArgument("unquoted label value");
    size_t end = 1;
    while (end < rest.size() && rest[end] != '"') end += rest[end] == '\\' ? 2 : 1;
    if (end >= rest.size()) return Status::InvalidArgument("unterminated label value");
    std::optional<std::string> value = Unescape(rest.substr(1, end - 1), true);
    if (!value) return Status::InvalidArgument("bad escape in label " + name);
    if (!IsValidUtf8(*value))
      return Status::InvalidArgument("label " + name + " is not UTF-8");
    labels->emplace_back(name, *value);
    rest.remove_prefix(end + 1);
    if (!rest.empty() && rest[0] == ',') {
      rest.remove_prefix(1);
    } else if (rest.empty() || rest[0] != '}') {
      return Status::InvalidArgument("expected , or } after label " + name);
    }
  }
  rest.remove_prefix(1);  // '}'
  return Status::OK();
}

// Which family a sample name belongs to, given the current family.
inline bool BelongsTo(const PromFamily& f, std::string_view sample) {
  if (sample == f.name) return f.type != "histogram";
  for (std::string_view suffix : {"_bucket", "_sum", "_count"}) {
    if (sample == f.name + std::string(suffix)) {
      return f.type == "histogram" || (f.type == "summary" && suffix != "_bucket");
    }
  }
  return false;
}

inline Status ParseSample(std::string_view line, const PromFamily* current,
                          PromSample* s) {
  size_t name_end = line.find_first_of("{ ");
  if (name_end == std::string_view::npos) return Status::InvalidArgument("no value");
  s->name = std::string(line.substr(0, name_end));
  if (!IsMetricName(s->name)) return Status::InvalidArgument("bad metric name");
  if (current == nullptr || !BelongsTo(*current, s->name)) {
    return Status::InvalidArgument("sample " + s->name +
                                   " outside its family (HELP/TYPE first, contiguous)");
  }
  std::string_view rest = line.substr(name_end);
  if (rest[0] == '{') PKV_RETURN_IF_ERROR(ParseLabels(rest, &s->labels));
  if (rest.empty() || rest[0] != ' ')
    return Status::InvalidArgument("no space before value");
  rest.remove_prefix(1);
  size_t space = rest.find(' ');
  std::optional<double> value = ParseValue(rest.substr(0, space));
  if (!value) return Status::InvalidArgument("bad value '" + std::string(rest) + "'");
  s->value = *value;
  if (space != std::string_view::npos) {  // a timestamp: an integer
    static const std::regex ts("-?[0-9]+");
    std::string_view t = rest.substr(space + 1);
    if (!std::regex_match(t.begin(), t.end(), ts)) {
      return Status::InvalidArgument("bad timestamp");
    }
  }
  const bool bucket =
      current->type == "histogram" && s->name == current->name + "_bucket";
  if (bucket != s->Label("le").has_value()) {
    return Status::InvalidArgument(bucket ? "bucket without le" : "le outside a bucket");
  }
  if (current->type == "counter" && !(s->value >= 0)) {
    return Status::InvalidArgument("counter negative or NaN");
  }
  return Status::OK();
}

// Per label set: ascending le ending in +Inf, cumulative, _sum, _count = +Inf.
inline Status CheckHistogram(const PromFamily& f) {
  struct Series {
    std::vector<std::pair<double, double>> buckets;  // (le, count)
    std::optional<double> sum, count;
  };
  std::map<PromLabels, Series> series;
  for (const PromSample& s : f.samples) {
    PromLabels key;
    for (const auto& l : s.labels) {
      if (l.first != "le") key.push_back(l);
    }
    std::sort(key.begin(), key.end());
    Series& ser = series[key];
    if (s.name == f.name + "_bucket") {
      std::optional<double> le = ParseValue(*s.Label("le"));
      if (!le || std::isnan(*le)) return Status::InvalidArgument(f.name + ": bad le");
      if (!ser.buckets.empty() && !(*le > ser.buckets.back().first)) {
        return Status::InvalidArgument(f.name + ": le not ascending");
      }
      if (!ser.buckets.empty() && s.value < ser.buckets.back().second) {
        return Status::InvalidArgument(f.name + ": buckets not cumulative");
      }
      ser.buckets.emplace_back(*le, s.value);
    } else {
      (s.name == f.name + "_sum" ? ser.sum : ser.count) = s.value;
    }
  }
  for (const auto& [labels, ser] : series) {
    if (ser.buckets.empty() || !std::isinf(ser.buckets.back().first)) {
      return Status::InvalidArgument(f.name + ": no +Inf bucket");
    }
    if (!ser.sum || !ser.count)
      return Status::InvalidArgument(f.name + ": no _sum/_count");
    if (*ser.count != ser.buckets.back().second) {
      return Status::InvalidArgument(f.name + ": _count differs from the +Inf bucket");
    }
  }
  return Status::OK();
}

// A "# HELP" or "# TYPE" line; starts a family or completes the current one.
inline Status ParseComment(std::string_view line, std::vector<PromFamily>& families,
                           std::set<std::string>& closed) {
  const bool help = line.substr(0, 7) == "# HELP ";
  if (!help && line.substr(0, 7) != "# TYPE ") {
    return Status::InvalidArgument("a comment other than HELP/TYPE");
  }
  std::string_view rest = line.substr(7);
  size_t space = rest.find(' ');
  if (space == std::string_view::npos)
    return Status::InvalidArgument("no text after name");
  std::string name(rest.substr(0, space));
  std::string_view text = rest.substr(space + 1);
  if (!IsMetricName(name)) return Status::InvalidArgument("bad metric name " + name);
  if (families.empty() || families.back().name != name) {
    if (!families.empty()) closed.insert(families.back().name);
    if (closed.count(name))
      return Status::InvalidArgument("family " + name + " repeated");
    families.push_back(PromFamily{name, "", "", {}});
  }
  PromFamily& f = families.back();
  if (!f.samples.empty()) return Status::InvalidArgument("HELP/TYPE after samples");
  if (help) {
    if (!f.help.empty()) return Status::InvalidArgument("second HELP for " + name);
    std::optional<std::string> t = Unescape(text, false);
    if (!t || t->empty()) return Status::InvalidArgument("bad HELP text for " + name);
    f.help = *t;
    return Status::OK();
  }
  if (!f.type.empty()) return Status::InvalidArgument("second TYPE for " + name);
  static const std::set<std::string_view> kTypes = {"counter", "gauge", "histogram",
                                                    "summary", "untyped"};
  if (!kTypes.count(text)) return Status::InvalidArgument("unknown type for " + name);
  if (text == "counter" && !name.ends_with("_total")) {
    return Status::InvalidArgument("counter " + name + " does not end in _total");
  }
  if (text != "counter" && name.ends_with("_total")) {  // promtool's lint too
    return Status::InvalidArgument(std::string(text) + " " + name +
                                   " ends in _total: only counters do");
  }
  f.type = std::string(text);
  return Status::OK();
}

}  // namespace exposition_internal

// Parses and checks a whole exposition; the error names the first bad line.
inline StatusOr<PromExposition> ParseExposition(std::string_view text) {
  namespace in = exposition_internal;
  if (text.empty() || text.back() != '\n') {
    return Status::InvalidArgument("exposition does not end in a line feed");
  }
  PromExposition e;
  std::set<std::string> closed;
  std::set<std::pair<std::string, PromLabels>> series;
  size_t line_no = 0;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    auto fail = [&](const Status& s) {
      return Status::InvalidArgument("line " + std::to_string(line_no) + " '" +
                                     std::string(line) + "': " + s.message());
    };
    if (line.empty() || line.find('\r') != std::string_view::npos) {
      return fail(Status::InvalidArgument("blank line or carriage return"));
    }
    if (line[0] == '#') {
      if (Status s = in::ParseComment(line, e.families, closed); !s.ok()) return fail(s);
      continue;
    }
    PromFamily* current = e.families.empty() ? nullptr : &e.families.back();
    if (current != nullptr && (current->help.empty() || current->type.empty())) {
      return fail(Status::InvalidArgument("sample before both HELP and TYPE"));
    }
    PromSample s;
    if (Status st = in::ParseSample(line, current, &s); !st.ok()) return fail(st);
    PromLabels sorted = s.labels;
    std::sort(sorted.begin(), sorted.end());
    if (!series.insert({s.name, sorted}).second) {
      return fail(Status::InvalidArgument("repeated series"));
    }
    current->samples.push_back(std::move(s));
  }
  for (const PromFamily& f : e.families) {
    if (f.help.empty() || f.type.empty() || f.samples.empty()) {
      return Status::InvalidArgument("family " + f.name + " lacks HELP, TYPE or samples");
    }
    if (f.type == "histogram")
      PKV_RETURN_IF_ERROR(exposition_internal::CheckHistogram(f));
  }
  return e;
}

}  // namespace prefixkv::testing
