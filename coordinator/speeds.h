// Workers of unequal speed (issue 28): each worker's speed relative to the
// fastest of a job's workers, from the speed probe it reports at
// registration (DeviceInfo.gemm_gflops: worker/profiler.h's
// MeasureSpeedProbe, slowed by a worker's --slowdown), and the order the
// planner lays the workers out in. The planner (coordinator/planning.h's
// PlanOn) takes the profile as the fastest worker's and a stage's compute
// as its time there divided by the speed of the slowest worker running it.
//
// Probes are noisy (other processes on the host, workers started together
// probing together), so speeds are coarse: within kEqualSpeedRatio of the
// fastest counts as equally fast, and the others are rounded to
// kSpeedStep; all speeds equal means the homogeneous plan, unchanged.
//
// Pure; thread-safe.
#ifndef AQUEDUCT_COORDINATOR_SPEEDS_H_
#define AQUEDUCT_COORDINATOR_SPEEDS_H_

#include <vector>

namespace aqueduct {

// A worker whose probe is at least this fraction of the fastest's runs at
// the fastest's speed (1).
inline constexpr double kEqualSpeedRatio = 0.75;
// Slower workers' speeds are rounded to multiples of this (the smallest
// speed is one step).
inline constexpr double kSpeedStep = 0.05;

// Each worker's speed relative to the fastest, from `probes` (GFLOP/s; 0
// or not finite: not measured, counted as fast as the fastest). Empty when
// every speed comes out 1 (or no worker measured): plan them as equal.
std::vector<double> RelativeSpeeds(const std::vector<double>& probes);

// The order to lay the workers out in: within each run of workers whose
// sizes `groups` gives in turn (the measured topology's groups; empty: all
// of them one group), fastest first, equals in their given order, so that
// the replicas of a stage are of like speed. The identity when `speeds` is
// empty.
std::vector<int> FastestFirst(const std::vector<double>& speeds,
                              const std::vector<int>& groups = {});

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_SPEEDS_H_
