// The RESP2 request parser: a small state machine over header lines, bulk
// bodies and inline lines. See resp_parser.h for the contract.
#include "resp_parser.h"

#include <algorithm>
#include <cstring>
#include <new>

namespace prefixkv::server {
namespace {

// "*" or "$", up to 18 digits and a sign, "\r": anything longer is malformed.
constexpr size_t kMaxHeaderLine = 32;
// A line buffer or an argument list larger than this (after a long inline
// line, a command of many arguments) is freed once used.
constexpr size_t kKeepBytes = 4 << 10;

// Heap bytes of a string's buffer (0 for a short string kept in the object).
size_t HeapBytes(const std::string& s) {
  return s.capacity() > std::string().capacity() ? s.capacity() + 1 : 0;
}

// The blanks Redis skips between inline words (isspace in the C locale).
bool IsBlank(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The character a backslash escape in double quotes stands for.
char Unescaped(char c) {
  switch (c) {
    case 'n':
      return '\n';
    case 'r':
      return '\r';
    case 't':
      return '\t';
    case 'b':
      return '\b';
    case 'a':
      return '\a';
    default:
      return c;  // \" is ", \\ is \, any other is itself
  }
}

// Splits an inline line into words as Redis does (sdssplitargs), so a line
// typed at a terminal stores the same bytes on both: words are separated by
// blanks; "..." takes \xHH and the escapes above, '...' takes \' only, and a
// quote may open in the middle of a word; a closing quote must be followed
// by a blank or the end of the line. (Taken as bytes, quotes were stored:
// `SET k "v"` stored the three bytes "v".) A NUL is a byte of its word
// (Redis never answers such a line). False on unbalanced quotes.
bool SplitInlineWords(std::string_view line, std::vector<std::string>* words) {
  constexpr int kEnd = -1;
  // The byte at j, or kEnd past the line.
  const auto at = [line](size_t j) {
    return j < line.size() ? static_cast<int>(static_cast<unsigned char>(line[j])) : kEnd;
  };
  const auto hex = [&](size_t j) { return at(j) == kEnd ? -1 : HexDigit(line[j]); };
  // A closing quote at j is followed by a blank or the end.
  const auto closes = [&](size_t j) { return at(j + 1) == kEnd || IsBlank(line[j + 1]); };
  size_t i = 0;
  while (true) {
    while (i < line.size() && IsBlank(line[i])) ++i;
    if (i == line.size()) return true;
    enum class Quote { kNone, kDouble, kSingle } quote = Quote::kNone;
    std::string word;
    for (bool done = false; !done; ++i) {
      if (at(i) == kEnd) {
        if (quote != Quote::kNone) return false;  // unterminated
        break;
      }
      const char c = line[i];
      if (quote == Quote::kDouble) {
        if (c == '\\' && at(i + 1) == 'x' && hex(i + 2) >= 0 && hex(i + 3) >= 0) {
          word += static_cast<char>(hex(i + 2) * 16 + hex(i + 3));
          i += 3;
        } else if (c == '\\' && at(i + 1) != kEnd) {
          word += Unescaped(line[++i]);
        } else if (c == '"') {
          if (!closes(i)) return false;
          done = true;
        } else {
          word += c;
        }
      } else if (quote == Quote::kSingle) {
        if (c == '\\' && at(i + 1) == '\'') {
          word += line[++i];
        } else if (c == '\'') {
          if (!closes(i)) return false;
          done = true;
        } else {
          word += c;
        }
      } else if (c == ' ' || c == '\n' || c == '\r' || c == '\t') {
        done = true;
      } else if (c == '"' || c == '\'') {
        quote = c == '"' ? Quote::kDouble : Quote::kSingle;
      } else {
        word += c;
      }
    }
    words->push_back(std::move(word));
  }
}

// Removes the '\r' that must end a header line; false when it is missing.
bool StripCr(std::string* line) {
  if (line->empty() || line->back() != '\r') return false;
  line->pop_back();
  return true;
}

}  // namespace

bool ParseRespLength(std::string_view text, int64_t* out) {
  bool negative = !text.empty() && text[0] == '-';
  if (negative) text.remove_prefix(1);
  if (text.empty() || text.size() > 18) return false;
  int64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *out = negative ? -v : v;
  return true;
}

RespParser::Result RespParser::Fail(std::string message) {
  error_ = "Protocol error: " + std::move(message);
  pending_.clear();
  body_ = SharedBytes();
  body_data_ = nullptr;
  body_size_ = body_cap_ = body_filled_ = 0;
  return Result::kError;
}

bool RespParser::TakeLine(std::string_view* input, size_t max_bytes, bool* too_long) {
  size_t nl = input->find('\n');
  size_t take = nl == std::string_view::npos ? input->size() : nl;
  *too_long = line_.size() + take > max_bytes;
  if (*too_long) return false;
  line_.append(input->data(), take);
  input->remove_prefix(nl == std::string_view::npos ? take : take + 1);
  return nl != std::string_view::npos;
}

RespParser::Result RespParser::OnArrayHeader() {
  int64_t n = 0;
  if (!StripCr(&line_) || !ParseRespLength(line_, &n) || n < 0 ||
      static_cast<uint64_t>(n) > limits_.max_array_elements) {
    return Fail("invalid multibulk length");
  }
  line_.clear();
  expected_args_ = static_cast<size_t>(n);
  request_bytes_ = 0;
  pending_.clear();
  pending_.reserve(std::min<size_t>(expected_args_, 16));
  state_ = expected_args_ == 0 ? State::kStart : State::kBulkHeader;
  return Result::kNeedMore;
}

RespParser::Result RespParser::OnBulkHeader() {
  int64_t n = 0;
  if (!StripCr(&line_) || !ParseRespLength(std::string_view(line_).substr(1), &n) ||
      n < 0 || request_bytes_ > limits_.max_request_bytes ||
      static_cast<uint64_t>(n) > limits_.max_request_bytes - request_bytes_) {
    return Fail("invalid bulk length");
  }
  line_.clear();
  request_bytes_ += static_cast<size_t>(n);
  if (!AllocateBody(static_cast<size_t>(n))) return Result::kError;
  end_seen_ = 0;
  state_ = State::kBulkBody;
  return Result::kNeedMore;
}

bool RespParser::AllocateBody(size_t n) {
  body_size_ = n;
  body_filled_ = 0;
  try {
    if (n > kSharedArgBytes) {
      // Only a first piece: the rest is allocated as it arrives (GrowBody).
      body_cap_ = std::min(n, kInitialBodyBytes);
      body_ = SharedBytes::Allocate(body_cap_, &body_data_);
      return true;
    }
    if (arena_data_ == nullptr || arena_used_ + n > arena_cap_) {
      const size_t cap =
          std::min(kArenaBytes, std::max(kFirstArenaBytes, arena_cap_ * 2));
      arena_ = SharedBytes();  // the old one stays alive as long as its arguments
      arena_data_ = nullptr;
      arena_ = SharedBytes::Allocate(cap, &arena_data_);
      arena_cap_ = cap;
      arena_used_ = 0;
    }
  } catch (const std::bad_alloc&) {
    arena_ = SharedBytes();
    arena_data_ = nullptr;
    arena_cap_ = 0;
    out_of_memory_ = true;
    Fail("out of memory for a " + std::to_string(n) + "-byte argument");
    return false;
  }
  body_cap_ = n;
  body_ = arena_.Slice(arena_used_, n);
  body_data_ = arena_data_ + arena_used_;
  arena_used_ += (n + 7) & ~size_t{7};
  return true;
}

bool RespParser::GrowBody() {
  if (body_filled_ < body_cap_ || body_cap_ >= body_size_) return true;
  const size_t cap = body_cap_ > (body_size_ - body_cap_) ? body_size_ : body_cap_ * 2;
  try {
    uint8_t* data = nullptr;
    SharedBytes grown = SharedBytes::Allocate(cap, &data);
    std::memcpy(data, body_data_, body_filled_);
    body_ = std::move(grown);
    body_data_ = data;
    body_cap_ = cap;
  } catch (const std::bad_alloc&) {
    out_of_memory_ = true;
    Fail("out of memory after " + std::to_string(body_filled_) + " bytes of a " +
         std::to_string(body_size_) + "-byte argument");
    return false;
  }
  return true;
}

RespParser::Result RespParser::OnInline(RespArgs* args) {
  if (!line_.empty() && line_.back() == '\r') line_.pop_back();
  args->clear();
  std::vector<std::string> words;
  const bool balanced = SplitInlineWords(line_, &words);
  if (balanced) {
    for (const std::string& w : words)
      args->push_back(SharedBytes::Copy(w.data(), w.size()));
  }
  if (line_.capacity() > kKeepBytes) {
    std::string().swap(line_);
  } else {
    line_.clear();
  }
  state_ = State::kStart;
  if (!balanced) return Fail("unbalanced quotes in request");
  if (args->size() > limits_.max_array_elements) return Fail("too many inline arguments");
  return args->empty() ? Result::kNeedMore : Result::kCommand;
}

bool RespParser::TakeBody(std::string_view* input) {
  while (!input->empty() && body_filled_ < body_size_) {
    if (!GrowBody()) return false;
    size_t n = std::min(body_cap_ - body_filled_, input->size());
    std::memcpy(body_data_ + body_filled_, input->data(), n);
    body_filled_ += n;
    input->remove_prefix(n);
  }
  return true;
}

RespParser::Result RespParser::Finish(RespArgs* args) {
  pending_.push_back(std::move(body_));
  body_ = SharedBytes();
  body_data_ = nullptr;
  if (pending_.size() < expected_args_) {
    state_ = State::kBulkHeader;
    return Result::kNeedMore;
  }
  args->swap(pending_);
  if (pending_.capacity() * sizeof(SharedBytes) > kKeepBytes) {
    RespArgs().swap(pending_);  // what a command of many arguments left
  } else {
    pending_.clear();
  }
  state_ = State::kStart;
  return Result::kCommand;
}

void RespParser::ReleaseIdleBuffers() {
  arena_ = SharedBytes();  // arguments carved from it keep it alive
  arena_data_ = nullptr;
  arena_cap_ = arena_used_ = 0;
  line_.shrink_to_fit();
  if (pending_.empty()) RespArgs().swap(pending_);
}

size_t RespParser::buffer_bytes() const {
  const bool own_body = (state_ == State::kBulkBody || state_ == State::kBulkEnd) &&
                        body_size_ > kSharedArgBytes;
  const size_t body = own_body ? body_cap_ : 0;
  return (arena_data_ != nullptr ? arena_cap_ : 0) + body + HeapBytes(line_) +
         pending_.capacity() * sizeof(SharedBytes);
}

RespParser::Result RespParser::Parse(std::string_view* input, RespArgs* args) {
  if (!error_.empty()) return Result::kError;
  bool too_long = false;
  while (true) {
    switch (state_) {
      case State::kStart:
        if (input->empty()) return Result::kNeedMore;
        if ((*input)[0] == '*') {
          input->remove_prefix(1);
          state_ = State::kArrayHeader;
        } else {
          state_ = State::kInline;
        }
        break;
      case State::kArrayHeader:
        if (!TakeLine(input, kMaxHeaderLine, &too_long)) {
          return too_long ? Fail("invalid multibulk length") : Result::kNeedMore;
        }
        if (OnArrayHeader() == Result::kError) return Result::kError;
        break;
      case State::kBulkHeader:
        if (input->empty()) return Result::kNeedMore;
        if (line_.empty() && (*input)[0] != '$') {
          return Fail(std::string("expected '$', got '") + (*input)[0] + "'");
        }
        if (!TakeLine(input, kMaxHeaderLine, &too_long)) {
          return too_long ? Fail("invalid bulk length") : Result::kNeedMore;
        }
        if (OnBulkHeader() == Result::kError) return Result::kError;
        break;
      case State::kBulkBody:
        if (!TakeBody(input)) return Result::kError;
        if (body_filled_ < body_size_) return Result::kNeedMore;
        state_ = State::kBulkEnd;
        break;
      case State::kBulkEnd:
        while (end_seen_ < 2) {
          if (input->empty()) return Result::kNeedMore;
          if ((*input)[0] != (end_seen_ == 0 ? '\r' : '\n')) {
            return Fail("expected CRLF after a bulk argument");
          }
          input->remove_prefix(1);
          ++end_seen_;
        }
        if (Finish(args) == Result::kCommand) return Result::kCommand;
        break;
      case State::kInline:
        if (!TakeLine(input, limits_.max_inline_bytes, &too_long)) {
          return too_long ? Fail("too big inline request") : Result::kNeedMore;
        }
        if (Result r = OnInline(args); r != Result::kNeedMore) return r;
        break;
    }
  }
}

std::span<uint8_t> RespParser::DirectTarget(size_t min_bytes) {
  if (state_ != State::kBulkBody || !error_.empty()) return {};
  size_t remaining = body_size_ - body_filled_;
  if (remaining < min_bytes || remaining == 0) return {};
  if (!GrowBody()) return {};  // the next Parse reports the failure
  return {body_data_ + body_filled_, body_cap_ - body_filled_};
}

void RespParser::CommitDirect(size_t n) {
  body_filled_ += std::min(n, body_cap_ - body_filled_);
}

}  // namespace prefixkv::server
