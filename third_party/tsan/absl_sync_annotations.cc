// ThreadSanitizer support for Debian's prebuilt Abseil (--config=tsan only).
//
// libabsl_synchronization.so is not built with -fsanitize=thread, so TSan
// never sees absl::Mutex, absl::CondVar or absl::Notification synchronise
// anything: every field guarded by an absl::Mutex (ours, and gRPC's, whose
// grpc_core::Mutex wraps absl::Mutex) is reported as a data race. Abseil's
// own TSan annotations (ABSL_TSAN_MUTEX_*) exist only when Abseil itself is
// compiled with TSan, which Debian's is not.
//
// This file, linked into every binary of the tsan configuration through
// --custom_malloc (see .bazelrc), defines the out-of-line entry points of
// those classes. The executable's definitions preempt the library's (for
// the executable, our shared libraries and gRPC alike); each one calls the
// library's own (dlsym(RTLD_NEXT)) and tells TSan what happened:
//   * acquiring the mutex (Lock, TryLock on success, LockWhen, the end of a
//     CondVar wait or of an Await) is __tsan_acquire(mutex);
//   * releasing it (Unlock, the start of a CondVar wait or of an Await) is
//     __tsan_release(mutex) (which joins, so readers do not clobber);
//   * absl::Condition functions run inside the library, in whichever thread
//     happens to hold or release the mutex (Unlock evaluates the waiters'
//     conditions). Reads made during the library calls are therefore not
//     recorded (AnnotateIgnoreReadsBegin/End): conditions only read state
//     that the mutex guards. Writes are still checked.
//   * Notification::Notify releases the notification; a wait that returns
//     notified acquires it. (HasBeenNotified() is inline over an atomic the
//     library writes, so a bare HasBeenNotified() poll is not seen as
//     synchronisation; nothing here relies on that.)
// It models happens-before only (no lock-order/deadlock detection for absl
// mutexes). Without TSan this file compiles to nothing.
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define AQ_TSAN_ABSL_SHIM 1
#endif
#endif
#if !defined(AQ_TSAN_ABSL_SHIM) && defined(__SANITIZE_THREAD__)
#define AQ_TSAN_ABSL_SHIM 1
#endif

#ifdef AQ_TSAN_ABSL_SHIM

#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/base/config.h"
#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

extern "C" {
void AnnotateIgnoreReadsBegin(const char* file, int line);
void AnnotateIgnoreReadsEnd(const char* file, int line);
}

namespace {

#define AQ_STR2(x) #x
#define AQ_STR(x) AQ_STR2(x)

// The library's definition of the function whose mangled name is
// "_ZN" ["K" for const members] "4absl" <inline namespace> `rest`, e.g.
// "_ZN4absl7debian35Mutex4LockEv" for rest "5Mutex4LockEv".
void* Real(bool is_const, const char* rest) {
  std::string name = is_const ? "_ZNK4absl" : "_ZN4absl";
#ifdef ABSL_OPTION_INLINE_NAMESPACE_NAME
  const char* ns = AQ_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  name += std::to_string(std::strlen(ns)) + ns;
#endif
  name += rest;
  void* f = dlsym(RTLD_NEXT, name.c_str());
  if (f == nullptr) {
    std::fprintf(stderr, "absl_sync_annotations: no %s in the libraries\n",
                 name.c_str());
    std::abort();
  }
  return f;
}

// Resolves once (a benign race: every thread stores the same pointer).
template <typename F>
F Lookup(std::atomic<void*>& slot, bool is_const, const char* rest) {
  void* f = slot.load(std::memory_order_acquire);
  if (f == nullptr) {
    f = Real(is_const, rest);
    slot.store(f, std::memory_order_release);
  }
  return reinterpret_cast<F>(f);
}

struct IgnoreReads {
  IgnoreReads() { AnnotateIgnoreReadsBegin(__FILE__, __LINE__); }
  ~IgnoreReads() { AnnotateIgnoreReadsEnd(__FILE__, __LINE__); }
};

}  // namespace

// The library's definition: REAL(type, "mangled tail")(this, args...);
// REAL_CONST for const members.
#define REAL_LOOKUP(type, is_const, rest)      \
  ([]() {                                      \
    static std::atomic<void*> slot{nullptr};   \
    return Lookup<type>(slot, is_const, rest); \
  }())
#define REAL(type, rest) REAL_LOOKUP(type, false, rest)
#define REAL_CONST(type, rest) REAL_LOOKUP(type, true, rest)

namespace absl {
ABSL_NAMESPACE_BEGIN

using Cond = const Condition&;

void Mutex::Lock() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  {
    IgnoreReads ignore;
    REAL(void (*)(Mutex*), "5Mutex4LockEv")(this);
  }
  __tsan_acquire(this);
}

void Mutex::ReaderLock() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  {
    IgnoreReads ignore;
    REAL(void (*)(Mutex*), "5Mutex10ReaderLockEv")(this);
  }
  __tsan_acquire(this);
}

bool Mutex::TryLock() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  bool ok;
  {
    IgnoreReads ignore;
    ok = REAL(bool (*)(Mutex*), "5Mutex7TryLockEv")(this);
  }
  if (ok) __tsan_acquire(this);
  return ok;
}

bool Mutex::ReaderTryLock() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  bool ok;
  {
    IgnoreReads ignore;
    ok = REAL(bool (*)(Mutex*), "5Mutex13ReaderTryLockEv")(this);
  }
  if (ok) __tsan_acquire(this);
  return ok;
}

void Mutex::Unlock() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  __tsan_release(this);
  IgnoreReads ignore;
  REAL(void (*)(Mutex*), "5Mutex6UnlockEv")(this);
}

void Mutex::ReaderUnlock() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  __tsan_release(this);
  IgnoreReads ignore;
  REAL(void (*)(Mutex*), "5Mutex12ReaderUnlockEv")(this);
}

// LockWhen* acquire (possibly only after waiting).
void Mutex::LockWhen(Cond cond) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  {
    IgnoreReads ignore;
    REAL(void (*)(Mutex*, Cond), "5Mutex8LockWhenERKNS0_9ConditionE")
    (this, cond);
  }
  __tsan_acquire(this);
}

void Mutex::ReaderLockWhen(Cond cond) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  {
    IgnoreReads ignore;
    REAL(void (*)(Mutex*, Cond), "5Mutex14ReaderLockWhenERKNS0_9ConditionE")
    (this, cond);
  }
  __tsan_acquire(this);
}

bool Mutex::LockWhenWithTimeout(Cond cond, absl::Duration timeout)
    ABSL_NO_THREAD_SAFETY_ANALYSIS {
  bool r;
  {
    IgnoreReads ignore;
    r = REAL(bool (*)(Mutex*, Cond, absl::Duration),
             "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE")(
        this, cond, timeout);
  }
  __tsan_acquire(this);  // Held on return either way.
  return r;
}

bool Mutex::LockWhenWithDeadline(Cond cond, absl::Time deadline)
    ABSL_NO_THREAD_SAFETY_ANALYSIS {
  bool r;
  {
    IgnoreReads ignore;
    r = REAL(bool (*)(Mutex*, Cond, absl::Time),
             "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE")(
        this, cond, deadline);
  }
  __tsan_acquire(this);
  return r;
}

bool Mutex::ReaderLockWhenWithTimeout(Cond cond, absl::Duration timeout)
    ABSL_NO_THREAD_SAFETY_ANALYSIS {
  bool r;
  {
    IgnoreReads ignore;
    r = REAL(bool (*)(Mutex*, Cond, absl::Duration),
             "5Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_"
             "8DurationE")(this, cond, timeout);
  }
  __tsan_acquire(this);
  return r;
}

bool Mutex::ReaderLockWhenWithDeadline(Cond cond, absl::Time deadline)
    ABSL_NO_THREAD_SAFETY_ANALYSIS {
  bool r;
  {
    IgnoreReads ignore;
    r = REAL(bool (*)(Mutex*, Cond, absl::Time),
             "5Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE")(
        this, cond, deadline);
  }
  __tsan_acquire(this);
  return r;
}

// Await* release the mutex while waiting and hold it again on return.
void Mutex::Await(Cond cond) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  __tsan_release(this);
  {
    IgnoreReads ignore;
    REAL(void (*)(Mutex*, Cond), "5Mutex5AwaitERKNS0_9ConditionE")(this, cond);
  }
  __tsan_acquire(this);
}

bool Mutex::AwaitWithTimeout(Cond cond, absl::Duration timeout)
    ABSL_NO_THREAD_SAFETY_ANALYSIS {
  __tsan_release(this);
  bool r;
  {
    IgnoreReads ignore;
    r = REAL(bool (*)(Mutex*, Cond, absl::Duration),
             "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE")(
        this, cond, timeout);
  }
  __tsan_acquire(this);
  return r;
}

bool Mutex::AwaitWithDeadline(Cond cond, absl::Time deadline)
    ABSL_NO_THREAD_SAFETY_ANALYSIS {
  __tsan_release(this);
  bool r;
  {
    IgnoreReads ignore;
    r = REAL(bool (*)(Mutex*, Cond, absl::Time),
             "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE")(
        this, cond, deadline);
  }
  __tsan_acquire(this);
  return r;
}

// A CondVar wait releases `mu` and holds it again on return.
void CondVar::Wait(Mutex* mu) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  __tsan_release(mu);
  {
    IgnoreReads ignore;
    REAL(void (*)(CondVar*, Mutex*), "7CondVar4WaitEPNS0_5MutexE")(this, mu);
  }
  __tsan_acquire(mu);
}

bool CondVar::WaitWithTimeout(Mutex* mu, absl::Duration timeout)
    ABSL_NO_THREAD_SAFETY_ANALYSIS {
  __tsan_release(mu);
  bool r;
  {
    IgnoreReads ignore;
    r = REAL(bool (*)(CondVar*, Mutex*, absl::Duration),
             "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE")(this, mu,
                                                                     timeout);
  }
  __tsan_acquire(mu);
  return r;
}

bool CondVar::WaitWithDeadline(Mutex* mu, absl::Time deadline)
    ABSL_NO_THREAD_SAFETY_ANALYSIS {
  __tsan_release(mu);
  bool r;
  {
    IgnoreReads ignore;
    r = REAL(bool (*)(CondVar*, Mutex*, absl::Time),
             "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE")(this, mu,
                                                                  deadline);
  }
  __tsan_acquire(mu);
  return r;
}

void Notification::Notify() {
  __tsan_release(this);
  REAL(void (*)(Notification*), "12Notification6NotifyEv")(this);
}

void Notification::WaitForNotification() const {
  REAL_CONST(void (*)(const Notification*),
             "12Notification19WaitForNotificationEv")
  (this);
  __tsan_acquire(const_cast<Notification*>(this));
}

bool Notification::WaitForNotificationWithTimeout(
    absl::Duration timeout) const {
  const bool r =
      REAL_CONST(bool (*)(const Notification*, absl::Duration),
                 "12Notification30WaitForNotificationWithTimeoutENS0_"
                 "8DurationE")(this, timeout);
  if (r) __tsan_acquire(const_cast<Notification*>(this));
  return r;
}

bool Notification::WaitForNotificationWithDeadline(absl::Time deadline) const {
  const bool r =
      REAL_CONST(bool (*)(const Notification*, absl::Time),
                 "12Notification31WaitForNotificationWithDeadlineENS0_"
                 "4TimeE")(this, deadline);
  if (r) __tsan_acquire(const_cast<Notification*>(this));
  return r;
}

ABSL_NAMESPACE_END
}  // namespace absl

#endif  // AQ_TSAN_ABSL_SHIM
