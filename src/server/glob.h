// Redis' glob patterns (KEYS, SCAN MATCH): `*` any run of bytes, `?` one
// byte, `[abc]` / `[^abc]` / `[a-z]` a set, `\x` the byte x. Byte-wise and
// case-sensitive, as Redis' stringmatchlen with nocase off; a malformed
// pattern (an unclosed `[`, a trailing `\`) matches as Redis matches it.
#pragma once

#include <string_view>

namespace prefixkv::server {

bool GlobMatch(std::string_view pattern, std::string_view text);

}  // namespace prefixkv::server
