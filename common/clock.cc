#include "common/clock.h"

#include <chrono>

namespace aqueduct {

absl::Time MonotonicNow() {
  using Steady = std::chrono::steady_clock;
  // The anchor: both clocks read once, together, on the first call.
  static const auto anchor = [] {
    return std::make_pair(Steady::now(), absl::Now());
  }();
  const auto since = Steady::now() - anchor.first;
  return anchor.second + absl::FromChrono(since);
}

absl::Time MonotonicDeadline(absl::Time wall_deadline) {
  if (wall_deadline == absl::InfiniteFuture()) return wall_deadline;
  return MonotonicNow() + (wall_deadline - absl::Now());
}

}  // namespace aqueduct
