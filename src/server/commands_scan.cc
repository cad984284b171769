// SCAN and KEYS over the raw keys' names (Engine::ScanValues: a walk in key
// order whose cursor is a position, so a key present for a whole walk is
// returned at least once however keys come and go). MATCH filters a page
// after it is read, as in Redis: COUNT bounds the work, not the replies.
#include <charconv>

#include "commands.h"
#include "glob.h"

namespace prefixkv::server {
namespace {

constexpr size_t kDefaultCount = 10;
// KEYS walks in pages of this many names.
constexpr size_t kKeysPage = 1024;

struct ScanArgs {
  uint64_t cursor = 0;
  size_t count = kDefaultCount;
  std::string_view pattern = "*";
  bool strings = true;  // TYPE string or no TYPE: raw keys are all strings
};

// A SCAN cursor read as Redis reads it (strtoul in parseScanCursorOrReply), so
// a cursor a client's library sends to Redis is taken here too: C-string
// text up to its first NUL, no leading space, an optional sign ("-1" is
// 2^64 - 1, "+0" is 0), decimal digits (leading zeros allowed) in uint64
// range; the empty text is 0.
bool ParseScanCursor(std::string_view c, uint64_t* cursor) {
  c = c.substr(0, c.find('\0'));
  *cursor = 0;
  if (c.empty()) return true;  // strtoul reads nothing and stops at the end
  const bool negative = c.starts_with('-');
  if (negative || c.starts_with('+')) c.remove_prefix(1);
  const auto [end, ec] = std::from_chars(c.data(), c.data() + c.size(), *cursor);
  if (ec != std::errc() || end != c.data() + c.size()) return false;
  if (negative) *cursor = 0 - *cursor;
  return true;
}

// SCAN cursor [MATCH pattern] [COUNT n] [TYPE t]; an error text or "".
std::string ParseScan(CommandContext& ctx, ScanArgs* a) {
  if (!ParseScanCursor(ctx.arg(1), &a->cursor)) return "ERR invalid cursor";
  for (size_t i = 2; i < ctx.args.size(); i += 2) {
    const std::string opt = Lower(ctx.arg(i));
    if (i + 1 >= ctx.args.size()) return "ERR syntax error";
    const std::string_view value = ctx.arg(i + 1);
    if (opt == "match") {
      a->pattern = value;
    } else if (opt == "count") {
      int64_t n = 0;
      if (!ParseRedisInteger(value, &n)) {
        return "ERR value is not an integer or out of range";
      }
      if (n < 1) return "ERR syntax error";
      a->count = static_cast<size_t>(n);
    } else if (opt == "type") {
      a->strings = Lower(value) == "string";
    } else {
      return "ERR syntax error";
    }
  }
  return "";
}

bool Wanted(const ScanArgs& a, const std::string& key) {
  return a.strings && (a.pattern == "*" || GlobMatch(a.pattern, key));
}

}  // namespace

// SCAN: [next cursor as a bulk string, [keys...]].
void CmdScan(CommandContext& ctx) {
  ScanArgs a;
  if (std::string error = ParseScan(ctx, &a); !error.empty()) {
    return ctx.out->Error(error);
  }
  StatusOr<ValueScanPage> page = ctx.dispatcher.engine()->ScanValues(a.cursor, a.count);
  if (!page.ok()) return ReplyStatus(page.status(), ctx.out);
  std::vector<const std::string*> keys;
  for (const std::string& k : page->keys) {
    if (Wanted(a, k)) keys.push_back(&k);
  }
  ctx.out->ArrayHeader(2);
  ctx.out->Bulk(std::to_string(page->next_cursor));
  ctx.out->ArrayHeader(keys.size());
  for (const std::string* k : keys) ctx.out->Bulk(*k);
}

// KEYS pattern: every matching name, from one whole walk.
void CmdKeys(CommandContext& ctx) {
  ScanArgs a;
  a.pattern = ctx.arg(1);
  std::vector<std::string> keys;
  uint64_t cursor = 0;
  do {
    StatusOr<ValueScanPage> page = ctx.dispatcher.engine()->ScanValues(cursor, kKeysPage);
    if (!page.ok()) return ReplyStatus(page.status(), ctx.out);
    for (std::string& k : page->keys) {
      if (Wanted(a, k)) keys.push_back(std::move(k));
    }
    cursor = page->next_cursor;
  } while (cursor != 0);
  ctx.out->ArrayHeader(keys.size());
  for (const std::string& k : keys) ctx.out->Bulk(k);
}

}  // namespace prefixkv::server
