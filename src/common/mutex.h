#pragma once

// Locks whose rules the compiler checks. Clang's thread-safety analysis (-Wthread-safety, on
// in the clang build that scripts/test runs, an error there like every warning) proves at
// compile time that a member marked FP_GUARDED_BY(mu_) is read and written only with mu_ held,
// and that a function marked FP_REQUIRES(mu_) is only called so. GCC ignores the annotations.
//
// The standard library's mutexes carry no annotations, hence these thin wrappers: Mutex (an
// std::mutex) and MutexLock (a std::unique_lock on it, for a scope; it waits on condition
// variables too). A predicate given to a wait runs with the mutex held, which the analysis
// cannot see through the library's template: such lambdas say FP_REQUIRES(mu_) themselves.

#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define FP_THREAD_ANNOTATION_(x) __attribute__((x))
#else
#define FP_THREAD_ANNOTATION_(x)
#endif

#define FP_CAPABILITY(x) FP_THREAD_ANNOTATION_(capability(x))
#define FP_SCOPED_CAPABILITY FP_THREAD_ANNOTATION_(scoped_lockable)
#define FP_GUARDED_BY(x) FP_THREAD_ANNOTATION_(guarded_by(x))
#define FP_PT_GUARDED_BY(x) FP_THREAD_ANNOTATION_(pt_guarded_by(x))
// Records a lock order; clang 14 checks it only under -Wthread-safety-beta, which is off.
#define FP_ACQUIRED_BEFORE(...) FP_THREAD_ANNOTATION_(acquired_before(__VA_ARGS__))
#define FP_REQUIRES(...) FP_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
#define FP_ACQUIRE(...) FP_THREAD_ANNOTATION_(acquire_capability(__VA_ARGS__))
#define FP_RELEASE(...) FP_THREAD_ANNOTATION_(release_capability(__VA_ARGS__))
#define FP_TRY_ACQUIRE(...) FP_THREAD_ANNOTATION_(try_acquire_capability(__VA_ARGS__))
#define FP_EXCLUDES(...) FP_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))
#define FP_RETURN_CAPABILITY(x) FP_THREAD_ANNOTATION_(lock_returned(x))
// For the few functions whose locking the analysis cannot follow; say why beside it.
#define FP_NO_THREAD_SAFETY_ANALYSIS FP_THREAD_ANNOTATION_(no_thread_safety_analysis)

namespace fp {

namespace testing {
class ManualClock;
}  // namespace testing

class FP_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() FP_ACQUIRE() { mu_.lock(); }
  void unlock() FP_RELEASE() { mu_.unlock(); }
  bool try_lock() FP_TRY_ACQUIRE(true) { return mu_.try_lock(); }

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// Holds `mu` from construction to the end of its scope (or to Unlock). Waits release it while
// they wait, as std::condition_variable's do, and hold it again when they return.
class FP_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) FP_ACQUIRE(mu) : lock_(mu.mu_) {}
  ~MutexLock() FP_RELEASE() = default;
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  // Lets go before the scope ends (e.g. to call out without the lock), and takes it again.
  void Unlock() FP_RELEASE() { lock_.unlock(); }
  void Lock() FP_ACQUIRE() { lock_.lock(); }

  void Wait(std::condition_variable& cv) { cv.wait(lock_); }
  template <typename Predicate>
  void Wait(std::condition_variable& cv, Predicate done) {
    cv.wait(lock_, std::move(done));
  }

 private:
  // Timed waits go through a Clock (common/clock.h), so that tests and the simulation move time.
  friend class SystemClock;
  friend class testing::ManualClock;
  std::unique_lock<std::mutex> lock_;
};

}  // namespace fp
