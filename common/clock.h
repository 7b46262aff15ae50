// Time, injectable: libraries take a Clock* so that tests can drive leases,
// timeouts and rates with a FakeClock. Thread-safe.
//
// Two readings, never mixed:
//  - Now(): monotonic. It never steps when the system's clock is set (NTP,
//    an operator, a VM resumed), so leases, deadlines, timeouts and rates
//    use it. It is an absl::Time anchored at the wall clock when the
//    process first read it, so it reads like wall time and differs from
//    it only by the steps the wall clock took since.
//  - WallNow(): the system's clock, for what is shown to people and
//    written down (submission times, log lines), never for intervals.
#ifndef AQUEDUCT_COMMON_CLOCK_H_
#define AQUEDUCT_COMMON_CLOCK_H_

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace aqueduct {

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic: for leases, deadlines, timeouts and durations.
  virtual absl::Time Now() const = 0;
  // The wall clock: for display and records only.
  virtual absl::Time WallNow() const = 0;
};

// Monotonic time as an absl::Time (CLOCK_MONOTONIC, anchored at the wall
// clock of its first call in this process): what RealClock::Now returns.
absl::Time MonotonicNow();

// The monotonic time (MonotonicNow's) at which the wall-clock `deadline`
// falls, as seen now (a gRPC call's deadline, say); infinite stays infinite.
absl::Time MonotonicDeadline(absl::Time wall_deadline);

// Waits, holding `mu`, until `cond` holds or the monotonic `deadline`
// (MonotonicNow's) passes; returns whether `cond` holds. absl::Mutex reads
// absolute deadlines on the wall clock, so the time left is passed instead.
inline bool AwaitMonotonic(absl::Mutex& mu, const absl::Condition& cond,
                           absl::Time deadline)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
  return mu.AwaitWithTimeout(cond, deadline - MonotonicNow());
}

// The system's clocks.
class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return MonotonicNow(); }
  absl::Time WallNow() const override { return absl::Now(); }
  // A process-wide instance (stateless, so sharing it is harmless).
  static RealClock* Get() {
    static RealClock clock;
    return &clock;
  }
};

// A clock that moves only when told to (tests). Advance moves both
// readings; StepWall only the wall clock, as setting the system's clock
// does.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1700000000))
      : now_(start), wall_(start) {}
  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  absl::Time WallNow() const override {
    absl::MutexLock lock(&mu_);
    return wall_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
    wall_ += d;
  }
  void StepWall(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    wall_ += d;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
  absl::Time wall_ ABSL_GUARDED_BY(mu_);
};

inline int64_t ToUnixMillisOr0(absl::Time t) {
  return t == absl::InfinitePast() ? 0 : absl::ToUnixMillis(t);
}

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_CLOCK_H_
