// Time, injectable: libraries take a Clock* so that tests can drive leases,
// timeouts and rates with a FakeClock. Thread-safe.
#ifndef AQUEDUCT_COMMON_CLOCK_H_
#define AQUEDUCT_COMMON_CLOCK_H_

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace aqueduct {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
};

// The system's clock.
class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  // A process-wide instance (stateless, so sharing it is harmless).
  static RealClock* Get() {
    static RealClock clock;
    return &clock;
  }
};

// A clock that moves only when told to (tests).
class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1700000000))
      : now_(start) {}
  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

inline int64_t ToUnixMillisOr0(absl::Time t) {
  return t == absl::InfinitePast() ? 0 : absl::ToUnixMillis(t);
}

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_CLOCK_H_
