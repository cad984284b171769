// GlobMatch: Redis' stringmatchlen (util.c) without the nocase flag, with
// its guards: against exponential backtracking (once a `*`'s rest failed on
// the whole remaining text, no longer text can match it, so the outer stars
// stop trying: skip_longer), and against deep recursion (each `*` matched
// recurses once: "*a" 65,536 times against a 64 KiB key took ~3 MB of the I/O
// thread's stack, over the 2 MB threads get under `ulimit -s unlimited`, and
// the server died; past kMaxNesting stars a pattern matches nothing).
#include "glob.h"

#include <utility>

namespace prefixkv::server {
namespace {

// Redis' limit on nested stars.
constexpr int kMaxNesting = 1000;

// Matches the set opening at p[0] == '[' against c; advances p to its closing
// ']' (or to the end of an unclosed set, as Redis does).
bool MatchSet(std::string_view& p, unsigned char c) {
  p.remove_prefix(1);
  const bool negate = !p.empty() && p[0] == '^';
  if (negate) p.remove_prefix(1);
  bool match = false;
  while (!p.empty() && p[0] != ']') {
    if (p[0] == '\\' && p.size() >= 2) {
      p.remove_prefix(1);
      match = match || static_cast<unsigned char>(p[0]) == c;
    } else if (p.size() >= 3 && p[1] == '-') {
      unsigned char lo = static_cast<unsigned char>(p[0]);
      unsigned char hi = static_cast<unsigned char>(p[2]);
      if (lo > hi) std::swap(lo, hi);
      match = match || (c >= lo && c <= hi);
      p.remove_prefix(2);
    } else {
      match = match || static_cast<unsigned char>(p[0]) == c;
    }
    p.remove_prefix(1);
  }
  if (p.empty()) p = std::string_view(p.data() - 1, 1);  // unclosed: stay on the last
  return negate ? !match : match;
}

bool Match(std::string_view p, std::string_view s, bool* skip_longer, int nesting) {
  if (nesting > kMaxNesting) return false;
  while (!p.empty() && !s.empty()) {
    switch (p[0]) {
      case '*':
        while (p.size() > 1 && p[1] == '*') p.remove_prefix(1);
        if (p.size() == 1) return true;
        for (; !s.empty(); s.remove_prefix(1)) {
          if (Match(p.substr(1), s, skip_longer, nesting + 1)) return true;
          if (*skip_longer) return false;
        }
        *skip_longer = true;
        return false;
      case '?':
        break;
      case '[':
        if (!MatchSet(p, static_cast<unsigned char>(s[0]))) return false;
        break;
      case '\\':
        if (p.size() >= 2) p.remove_prefix(1);
        [[fallthrough]];
      default:
        if (p[0] != s[0]) return false;
    }
    p.remove_prefix(1);
    s.remove_prefix(1);
  }
  while (!p.empty() && p[0] == '*') p.remove_prefix(1);
  return p.empty() && s.empty();
}

}  // namespace

bool GlobMatch(std::string_view pattern, std::string_view text) {
  // Redis's stringmatchlen never enters its loop for an empty text, so only
  // the empty pattern matches it there; KEYS and SCAN take "*" alone as every
  // key before matching. So "*" lists the empty name and "**" does not.
  if (text.empty()) return pattern.empty() || pattern == "*";
  bool skip_longer = false;
  return Match(pattern, text, &skip_longer, 0);
}

}  // namespace prefixkv::server
