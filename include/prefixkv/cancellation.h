// CancellationToken: how a caller stops a long prefill from another thread.
//
// Computations poll the token between layers (and the adapter once more before
// committing), so a cancelled call returns Status::Aborted and commits nothing.
#pragma once

#include <atomic>

namespace prefixkv {

// Thread-safe: Cancel() may race with IsCancelled() from any number of threads.
class CancellationToken {
 public:
  CancellationToken() = default;
  CancellationToken(const CancellationToken&) = delete;
  CancellationToken& operator=(const CancellationToken&) = delete;

  // Requests cancellation. Idempotent; a token cannot be un-cancelled.
  void Cancel() { cancelled_.store(true, std::memory_order_release); }
  bool IsCancelled() const { return cancelled_.load(std::memory_order_acquire); }

 private:
  std::atomic<bool> cancelled_{false};
};

// True when `token` is non-null and cancelled (a null token never cancels).
inline bool IsCancelled(const CancellationToken* token) {
  return token != nullptr && token->IsCancelled();
}

}  // namespace prefixkv
