// ReplyBuffer: RESP2 replies being assembled for one connection.
//
// Small replies are appended to one owned string; large bulk payloads (a GET of
// a 1 MiB value) are referenced by their SharedBytes and go out with a gather
// write, so the server never copies a stored value to send it. Clear() gives
// back the memory of a large reply (kKeepBytes), so a connection that once
// sent a big reply does not hold its buffer while it idles.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "prefixkv/bytes.h"

namespace prefixkv::server {

// Not thread-safe: owned by one connection.
class ReplyBuffer {
 public:
  // Bulk payloads at least this large are referenced instead of copied.
  static constexpr size_t kReferenceBytes = 16 << 10;
  // Once this much text is buffered, payloads of kMinReferenceBytes or more
  // are referenced too, so a reply naming one stored value many times (MGET
  // k k k ...) cannot make the server copy it without bound.
  static constexpr size_t kCopyBudgetBytes = 1 << 20;
  static constexpr size_t kMinReferenceBytes = 64;
  // Clear() keeps buffers up to this size for the next replies and frees
  // larger ones.
  static constexpr size_t kKeepBytes = 4 << 10;

  void Simple(std::string_view s);  // "+s\r\n"; s must not contain CR or LF
  // "-s\r\n"; CR and LF in s become spaces so a reply can never be split.
  void Error(std::string_view s);
  void Integer(int64_t v);          // ":v\r\n"
  void Bulk(std::string_view s);    // "$len\r\ns\r\n"
  void Bulk(const SharedBytes& b);  // the same, referencing large payloads
  void Null();                      // "$-1\r\n"
  void ArrayHeader(size_t n);       // "*n\r\n"; the caller appends n replies
  void NullArray();                 // "*-1\r\n" (XREAD that timed out)

  // Total bytes of every reply appended so far.
  size_t bytes() const { return bytes_; }
  bool empty() const { return bytes_ == 0; }
  // Error replies appended since the buffer was made (Clear keeps the count):
  // a command's handler failed when this grew while it ran.
  uint64_t errors() const { return errors_; }
  // Empties the buffer; frees its memory when it is over kKeepBytes.
  void Clear();
  // Empties the buffer and frees all its memory (an idle connection's).
  void Release();
  // Heap bytes the buffer holds (its text and its list of references, not the
  // referenced payloads, which the tiers own).
  size_t buffer_bytes() const;

  // Visits the bytes in order as contiguous pieces (for a gather write).
  // The pieces stay valid until the next mutation.
  void ForEachPiece(const std::function<void(const void*, size_t)>& fn) const;

  // The whole reply as one string (tests, fuzzing).
  std::string ToString() const;

 private:
  void AppendText(std::string_view s) {
    text_.append(s);
    bytes_ += s.size();
  }
  void AppendHeader(char type, int64_t v);

  std::string text_;
  // (offset in text_ where the payload goes, payload), in order.
  std::vector<std::pair<size_t, SharedBytes>> refs_;
  size_t bytes_ = 0;
  uint64_t errors_ = 0;
};

}  // namespace prefixkv::server
