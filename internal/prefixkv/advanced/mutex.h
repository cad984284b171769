// Mutexes the compiler can check: clang's -Wthread-safety analysis sees which
// members a mutex guards (GUARDED_BY), which functions need it held
// (REQUIRES) or not held (EXCLUDES), and rejects code that touches guarded
// state without the lock. The standard library's mutexes carry no such
// annotations in libstdc++, so prefixkv's code locks these thin wrappers.
// With other compilers the annotations expand to nothing and the wrappers
// cost nothing over std::mutex / std::shared_mutex.
//
// Use:
//   Mutex mu_;
//   int count_ GUARDED_BY(mu_) = 0;
//   void Add() EXCLUDES(mu_) { MutexLock lock(&mu_); ++count_; }
//   void AddLocked() REQUIRES(mu_) { ++count_; }
//   // Waiting: a CondVar waits on a held MutexLock.
//   cv_.Wait(lock, [&]() REQUIRES(mu_) { return count_ > 0; });
//
// Thread-safe: these are the synchronisation primitives themselves.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <shared_mutex>

#if defined(__clang__)
#define PKV_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define PKV_THREAD_ANNOTATION(x)
#endif

#define CAPABILITY(x) PKV_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY PKV_THREAD_ANNOTATION(scoped_lockable)
#define GUARDED_BY(x) PKV_THREAD_ANNOTATION(guarded_by(x))
#define PT_GUARDED_BY(x) PKV_THREAD_ANNOTATION(pt_guarded_by(x))
#define ACQUIRED_BEFORE(...) PKV_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) PKV_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#define REQUIRES(...) PKV_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) \
  PKV_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
#define ACQUIRE(...) PKV_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define ACQUIRE_SHARED(...) PKV_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#define RELEASE(...) PKV_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define RELEASE_SHARED(...) PKV_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
#define RELEASE_GENERIC(...) \
  PKV_THREAD_ANNOTATION(release_generic_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) PKV_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define EXCLUDES(...) PKV_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define ASSERT_CAPABILITY(x) PKV_THREAD_ANNOTATION(assert_capability(x))
#define RETURN_CAPABILITY(x) PKV_THREAD_ANNOTATION(lock_returned(x))
#define NO_THREAD_SAFETY_ANALYSIS PKV_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace prefixkv {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  bool TryLock() TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // Tells the analysis the caller holds the mutex (no runtime check).
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// Holds a Mutex for its scope. Unlock()/Lock() may release and retake it
// inside the scope (for example around a callback that must run unlocked).
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : lock_(mu->mu_) {}
  ~MutexLock() RELEASE() {}
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() RELEASE() { lock_.unlock(); }
  void Lock() ACQUIRE() { lock_.lock(); }
  // For waits that take the standard lock type (Clock::WaitFor).
  std::unique_lock<std::mutex>& native() { return lock_; }

 private:
  friend class CondVar;
  std::unique_lock<std::mutex> lock_;
};

// A condition variable waited on with a held MutexLock. The predicate runs
// with the mutex held; annotate a lambda predicate REQUIRES(mu) when it reads
// guarded members.
class CondVar {
 public:
  void NotifyOne() { cv_.notify_one(); }
  // For waits that take the standard type (Clock::WaitFor).
  std::condition_variable& native() { return cv_; }
  void NotifyAll() { cv_.notify_all(); }

  void Wait(MutexLock& lock) { cv_.wait(lock.lock_); }
  template <typename Pred>
  void Wait(MutexLock& lock, Pred pred) {
    cv_.wait(lock.lock_, pred);
  }
  // False when `timeout` passed before `pred` held.
  template <typename Rep, typename Period, typename Pred>
  bool WaitFor(MutexLock& lock, std::chrono::duration<Rep, Period> timeout, Pred pred) {
    return cv_.wait_for(lock.lock_, timeout, pred);
  }
  template <typename Rep, typename Period>
  std::cv_status WaitFor(MutexLock& lock, std::chrono::duration<Rep, Period> timeout) {
    return cv_.wait_for(lock.lock_, timeout);
  }

 private:
  std::condition_variable cv_;
};

// A reader-writer mutex: many readers or one writer.
class CAPABILITY("shared_mutex") SharedMutex {
 public:
  SharedMutex() = default;
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  void LockShared() ACQUIRE_SHARED() { mu_.lock_shared(); }
  void UnlockShared() RELEASE_SHARED() { mu_.unlock_shared(); }
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

 private:
  std::shared_mutex mu_;
};

// Holds a SharedMutex exclusively for its scope.
class SCOPED_CAPABILITY WriterLock {
 public:
  explicit WriterLock(SharedMutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~WriterLock() RELEASE() { mu_->Unlock(); }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  SharedMutex* const mu_;
};

// Holds a SharedMutex shared for its scope.
class SCOPED_CAPABILITY ReaderLock {
 public:
  explicit ReaderLock(SharedMutex* mu) ACQUIRE_SHARED(mu) : mu_(mu) { mu_->LockShared(); }
  ~ReaderLock() RELEASE() { mu_->UnlockShared(); }
  ReaderLock(const ReaderLock&) = delete;
  ReaderLock& operator=(const ReaderLock&) = delete;

 private:
  SharedMutex* const mu_;
};

}  // namespace prefixkv
