// Mutexes the thread-safety analysis understands (common/thread_annotations.h):
// thin wrappers over std::mutex and std::shared_mutex, with scoped locks.
// Wait on them with std::condition_variable_any.
#pragma once

#include <mutex>
#include <shared_mutex>

#include "common/thread_annotations.h"

namespace tide {

class TIDE_CAPABILITY("mutex") Mutex {
 public:
  void lock() TIDE_ACQUIRE() { mu_.lock(); }
  void unlock() TIDE_RELEASE() { mu_.unlock(); }
  bool try_lock() { return mu_.try_lock(); }

 private:
  std::mutex mu_;
};

// Many readers or one writer.
class TIDE_CAPABILITY("mutex") SharedMutex {
 public:
  void lock() TIDE_ACQUIRE() { mu_.lock(); }
  void unlock() TIDE_RELEASE() { mu_.unlock(); }
  void lock_shared() TIDE_ACQUIRE_SHARED() { mu_.lock_shared(); }
  void unlock_shared() TIDE_RELEASE_SHARED() { mu_.unlock_shared(); }
  // Tells the analysis that the caller holds it exclusively, where that is
  // so by construction (a closure the core thread runs under the lock).
  void AssertHeld() const TIDE_ASSERT_CAPABILITY(this) {}
  // The same for a reader (a closure run under the shared lock).
  void AssertReaderHeld() const TIDE_ASSERT_SHARED_CAPABILITY(this) {}

 private:
  std::shared_mutex mu_;
};

class TIDE_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) TIDE_ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() TIDE_RELEASE() { mu_.unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

class TIDE_SCOPED_CAPABILITY WriterLock {
 public:
  explicit WriterLock(SharedMutex& mu) TIDE_ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~WriterLock() TIDE_RELEASE() { mu_.unlock(); }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  SharedMutex& mu_;
};

class TIDE_SCOPED_CAPABILITY ReaderLock {
 public:
  explicit ReaderLock(SharedMutex& mu) TIDE_ACQUIRE_SHARED(mu) : mu_(mu) { mu_.lock_shared(); }
  ~ReaderLock() TIDE_RELEASE_GENERIC() { mu_.unlock_shared(); }
  ReaderLock(const ReaderLock&) = delete;
  ReaderLock& operator=(const ReaderLock&) = delete;

 private:
  SharedMutex& mu_;
};

}  // namespace tide
