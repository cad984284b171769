// An incremental RESP2 request parser: bytes in, commands out.
//
// Clients send commands as arrays of bulk strings ("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n")
// or, from a terminal, as inline lines ("GET k\r\n"). Bytes may arrive split at
// any point and many commands may arrive at once (pipelining); the parser keeps
// at most one partial command. Every length is checked against RespLimits
// before anything is allocated, and a large bulk argument is never allocated
// whole when its header arrives: its buffer starts at kInitialBodyBytes and
// doubles as bytes arrive (up to the declared length), so what a connection
// holds is bounded by what the client actually sent (at most twice it), never
// by what it declared. An allocation that fails is a kError ("out of
// memory"), not an exception.
//
// After a kError the stream cannot be resynchronized (the byte boundary of the
// next command is unknown): the caller replies with error() and closes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "prefixkv/bytes.h"

namespace prefixkv::server {

struct RespLimits {
  size_t max_request_bytes = size_t{512} << 20;  // sum of argument bytes of one command
  size_t max_array_elements = 1 << 20;           // arguments of one command
  size_t max_inline_bytes = 64 << 10;            // one inline command line
};

// One command: argv[0] is its name. Arguments are immutable shared buffers so a
// SET value can be stored in a tier without another copy.
using RespArgs = std::vector<SharedBytes>;

// Arguments up to this size are carved out of a shared per-connection buffer
// (names and keys cost no allocation); larger ones own their buffer. Keep a
// small argument beyond the command only through DetachArg(). The first such
// buffer of a connection is kFirstArenaBytes and each next one twice the last,
// up to kArenaBytes: a client that sends one AUTH holds 1 KiB, a busy one
// allocates once per 16 KiB of small arguments.
inline constexpr size_t kSharedArgBytes = 256;
inline constexpr size_t kFirstArenaBytes = 1 << 10;
inline constexpr size_t kArenaBytes = 16 << 10;

// An argument safe to keep: small ones are copied out of the shared buffer (so
// a stored 10-byte value does not pin kilobytes of other arguments).
inline SharedBytes DetachArg(const SharedBytes& arg) {
  return arg.size() <= kSharedArgBytes ? SharedBytes::Copy(arg.data(), arg.size()) : arg;
}

// The first buffer of a bulk argument larger than kSharedArgBytes; it doubles
// as bytes arrive.
inline constexpr size_t kInitialBodyBytes = 64 << 10;

// Not thread-safe: one parser per connection.
class RespParser {
 public:
  enum class Result {
    kNeedMore,  // every byte of the input was consumed; no complete command yet
    kCommand,   // `*args` holds one command; the input may hold more
    kError,     // malformed or over a limit; see error(); the parser is dead
  };

  explicit RespParser(RespLimits limits) : limits_(limits) {}

  // Consumes bytes from the front of `*input` until one command is complete
  // (kCommand, `*args` replaced), the input is exhausted (kNeedMore) or the
  // input is malformed (kError). Empty commands ("*0", blank lines) are skipped.
  Result Parse(std::string_view* input, RespArgs* args);

  // "Protocol error: ..." after kError.
  const std::string& error() const { return error_; }
  // After kError: the input was fine but an allocation for it failed (the
  // server counts it as an out-of-memory refusal, not a protocol error).
  bool out_of_memory() const { return out_of_memory_; }

  // Replaces the limits; they apply from the next header line on (the
  // connection tightens them before AUTH, see ServerOptions).
  void set_limits(const RespLimits& limits) { limits_ = limits; }
  const RespLimits& limits() const { return limits_; }

  // Bytes of the bulk argument being received that are allocated (0 between
  // arguments): at most twice what has arrived, never the declared length.
  size_t body_capacity() const { return state_ == State::kBulkBody ? body_cap_ : 0; }

  // The unfilled, allocated part of the bulk argument being received, when at
  // least `min_bytes` of it remain to arrive (so the caller can read a large
  // value straight into its final buffer); empty otherwise, and after an
  // allocation failure (the next Parse reports it). Grows the buffer when it
  // is full. Follow with CommitDirect(n).
  std::span<uint8_t> DirectTarget(size_t min_bytes);
  // Records that the first `n` bytes of DirectTarget() were filled.
  void CommitDirect(size_t n);

  // True between commands (no partial command buffered).
  bool AtCommandBoundary() const { return state_ == State::kStart && line_.empty(); }

  // Heap bytes the parser holds: its small-argument buffer, the bulk argument
  // being received, the line being assembled and the argument list.
  size_t buffer_bytes() const;
  // Frees what it keeps for the next arguments (an idle connection's): the
  // small-argument buffer (the next one starts at kFirstArenaBytes again) and
  // unused capacity. A partial command is kept.
  void ReleaseIdleBuffers();

 private:
  enum class State { kStart, kArrayHeader, kBulkHeader, kBulkBody, kBulkEnd, kInline };

  Result Fail(std::string message);
  // Appends input bytes up to and including '\n' to line_; true when complete.
  bool TakeLine(std::string_view* input, size_t max_bytes, bool* too_long);
  Result OnArrayHeader();
  Result OnBulkHeader();
  Result OnInline(RespArgs* args);
  // Starts a bulk argument of n bytes (shared buffer for small arguments, a
  // first kInitialBodyBytes buffer for large ones); false after Fail().
  bool AllocateBody(size_t n);
  // Makes room for more body bytes when the buffer is full (doubling, up to the
  // declared length); false after Fail() when the allocation failed.
  bool GrowBody();
  // False after Fail() (an allocation failed).
  bool TakeBody(std::string_view* input);
  Result Finish(RespArgs* args);

  RespLimits limits_;
  State state_ = State::kStart;
  std::string line_;  // a header or inline line being assembled
  std::string error_;
  bool out_of_memory_ = false;
  RespArgs pending_;          // arguments of the command being assembled
  size_t expected_args_ = 0;  // array length of the current command
  size_t request_bytes_ = 0;  // argument bytes of the current command so far
  // The bulk argument being received: body_size_ bytes declared, body_cap_
  // allocated in body_ (owned, or a slice of the arena), body_filled_ arrived.
  SharedBytes body_;
  uint8_t* body_data_ = nullptr;
  size_t body_size_ = 0;
  size_t body_cap_ = 0;
  size_t body_filled_ = 0;
  size_t end_seen_ = 0;  // bytes of the "\r\n" after a bulk body seen
  SharedBytes arena_;    // where small arguments are carved from
  uint8_t* arena_data_ = nullptr;
  size_t arena_used_ = 0;
  size_t arena_cap_ = 0;  // 0: none yet
};

// Parses a RESP length: optional '-', 1..18 decimal digits, nothing else.
// False on anything else (so "+5", "", " 5", "5x" and 19+ digits are rejected).
bool ParseRespLength(std::string_view text, int64_t* out);

}  // namespace prefixkv::server
