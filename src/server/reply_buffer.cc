// RESP2 reply encoding.
#include "reply_buffer.h"

#include <charconv>

namespace prefixkv::server {

void ReplyBuffer::AppendHeader(char type, int64_t v) {
  char buf[24];
  buf[0] = type;
  auto [end, ec] = std::to_chars(buf + 1, buf + sizeof(buf) - 2, v);
  (void)ec;  // 21 chars always fit an int64
  *end++ = '\r';
  *end++ = '\n';
  AppendText(std::string_view(buf, static_cast<size_t>(end - buf)));
}

void ReplyBuffer::Simple(std::string_view s) {
  AppendText("+");
  AppendText(s);
  AppendText("\r\n");
}

void ReplyBuffer::Error(std::string_view s) {
  std::string clean(s);
  for (char& c : clean) {
    if (c == '\r' || c == '\n') c = ' ';
  }
  AppendText("-");
  AppendText(clean);
  AppendText("\r\n");
  ++errors_;
}

void ReplyBuffer::Integer(int64_t v) { AppendHeader(':', v); }

void ReplyBuffer::Bulk(std::string_view s) {
  AppendHeader('$', static_cast<int64_t>(s.size()));
  AppendText(s);
  AppendText("\r\n");
}

void ReplyBuffer::Bulk(const SharedBytes& b) {
  bool copy_budget_left = text_.size() < kCopyBudgetBytes;
  if (b.size() < kMinReferenceBytes || (b.size() < kReferenceBytes && copy_budget_left)) {
    Bulk(b.view());
    return;
  }
  AppendHeader('$', static_cast<int64_t>(b.size()));
  refs_.emplace_back(text_.size(), b);
  bytes_ += b.size();
  AppendText("\r\n");
}

void ReplyBuffer::Null() { AppendText("$-1\r\n"); }

void ReplyBuffer::ArrayHeader(size_t n) { AppendHeader('*', static_cast<int64_t>(n)); }
void ReplyBuffer::NullArray() { AppendHeader('*', -1); }

void ReplyBuffer::Clear() {
  if (text_.capacity() > kKeepBytes) {
    std::string().swap(text_);
  } else {
    text_.clear();
  }
  if (refs_.capacity() * sizeof(refs_[0]) > kKeepBytes) {
    decltype(refs_)().swap(refs_);
  } else {
    refs_.clear();
  }
  bytes_ = 0;
}

void ReplyBuffer::Release() {
  std::string().swap(text_);
  decltype(refs_)().swap(refs_);
  bytes_ = 0;
}

size_t ReplyBuffer::buffer_bytes() const {
  // A short string lives inside the object (no heap bytes).
  const size_t text =
      text_.capacity() > std::string().capacity() ? text_.capacity() + 1 : 0;
  return text + refs_.capacity() * sizeof(refs_[0]);
}

void ReplyBuffer::ForEachPiece(const std::function<void(const void*, size_t)>& fn) const {
  size_t pos = 0;
  for (const auto& [offset, payload] : refs_) {
    if (offset > pos) fn(text_.data() + pos, offset - pos);
    fn(payload.data(), payload.size());
    pos = offset;
  }
  if (text_.size() > pos) fn(text_.data() + pos, text_.size() - pos);
}

std::string ReplyBuffer::ToString() const {
  std::string out;
  out.reserve(bytes_);
  ForEachPiece(
      [&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); });
  return out;
}

}  // namespace prefixkv::server
