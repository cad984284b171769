// Status and StatusOr: how every prefixkv call reports an expected failure.
//
// Errors are values, never exceptions across module boundaries (LevelDB style).
// A cache miss is not an error: lookups return a value with a reason instead.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace prefixkv {

// What went wrong. Every public call documents which codes it returns.
enum class StatusCode : unsigned char {
  kOk = 0,
  kNotFound,         // the thing asked for is absent (a key, a directory, a file)
  kCorruption,       // stored bytes failed a checksum or a consistency check
  kInvalidArgument,  // the caller's input or call is wrong (bad spec, closed engine)
  kIOError,          // the medium failed (read, write, sync)
  kBusy,             // the thing is in use (a pinned block); retry later
  kNoSpace,          // no room: a full budget, quota or disk; nothing changed
  kNotSupported,     // a feature or layout this build does not handle
  kAborted,          // cancelled by the caller
  kInternal,         // a broken invariant inside prefixkv; always a bug
  kUnavailable,      // a remote service did not answer in time or is down; retry later
  kOutOfRange,  // a position outside what is kept (an event log reader must resnapshot)
};

// Name of a code, for logs and --json output ("Corruption", ...).
std::string_view StatusCodeName(StatusCode code);

// The outcome of a call: OK, or a code with a human-readable message.
// Cheap to copy when OK (no allocation). Thread-compatible: a Status is a value.
class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message)
      : code_(code), message_(std::move(message)) {}

  // One factory per code; `m` says what failed and with which input.
  static Status OK() { return Status(); }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status Corruption(std::string m) {
    return {StatusCode::kCorruption, std::move(m)};
  }
  static Status InvalidArgument(std::string m) {
    return {StatusCode::kInvalidArgument, std::move(m)};
  }
  static Status IOError(std::string m) { return {StatusCode::kIOError, std::move(m)}; }
  static Status Busy(std::string m) { return {StatusCode::kBusy, std::move(m)}; }
  static Status NoSpace(std::string m) { return {StatusCode::kNoSpace, std::move(m)}; }
  static Status NotSupported(std::string m) {
    return {StatusCode::kNotSupported, std::move(m)};
  }
  static Status Aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
  static Status Unavailable(std::string m) {
    return {StatusCode::kUnavailable, std::move(m)};
  }
  static Status OutOfRange(std::string m) {
    return {StatusCode::kOutOfRange, std::move(m)};
  }

  // The code, the message (empty when OK) and one predicate per common code.
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  bool IsNotFound() const { return code_ == StatusCode::kNotFound; }
  bool IsCorruption() const { return code_ == StatusCode::kCorruption; }
  bool IsInvalidArgument() const { return code_ == StatusCode::kInvalidArgument; }
  bool IsIOError() const { return code_ == StatusCode::kIOError; }
  bool IsBusy() const { return code_ == StatusCode::kBusy; }
  bool IsNoSpace() const { return code_ == StatusCode::kNoSpace; }
  bool IsUnavailable() const { return code_ == StatusCode::kUnavailable; }
  bool IsOutOfRange() const { return code_ == StatusCode::kOutOfRange; }

  // "Corruption: bad magic" or "OK".
  std::string ToString() const;

  // Returns a copy whose message is prefixed with `context + ": "`.
  Status WithContext(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

namespace internal {
// Prints "StatusOr::value() on an error: <status>" to stderr and aborts. The
// cold path of StatusOr::value(), out of line so the accessor stays one branch.
[[noreturn]] void DieOnValueOfError(const Status& status);
}  // namespace internal

// A value or the Status that explains why there is none.
// REQUIRES: constructed from a non-OK Status when it holds no value.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT: implicit on purpose
    assert(!status_.ok());
    if (status_.ok()) status_ = Status::Internal("StatusOr built from OK without value");
  }
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit on purpose

  // Whether a value is held; the Status (OK when it is).
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  // REQUIRES: ok(). Checked in every build type: on an error, value() (and
  // operator* and operator->, which go through it) prints the status to stderr
  // and aborts instead of touching an empty value.
  T& value() & {
    CheckOk();
    return *value_;
  }
  const T& value() const& {
    CheckOk();
    return *value_;
  }
  T&& value() && {
    CheckOk();
    return std::move(*value_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  void CheckOk() const {
    if (!ok()) [[unlikely]]
      internal::DieOnValueOfError(status_);
  }

  Status status_;
  std::optional<T> value_;
};

}  // namespace prefixkv

// Propagates a non-OK Status to the caller.
#define PKV_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::prefixkv::Status pkv_status_ = (expr);   \
    if (!pkv_status_.ok()) return pkv_status_; \
  } while (0)

#define PKV_CONCAT_INNER(a, b) a##b
#define PKV_CONCAT(a, b) PKV_CONCAT_INNER(a, b)
// Declares `lhs` from a StatusOr, or returns its Status.
#define PKV_ASSIGN_OR_RETURN(lhs, expr)            \
  auto PKV_CONCAT(pkv_or_, __LINE__) = (expr);     \
  if (!PKV_CONCAT(pkv_or_, __LINE__).ok())         \
    return PKV_CONCAT(pkv_or_, __LINE__).status(); \
  lhs = std::move(PKV_CONCAT(pkv_or_, __LINE__)).value()
