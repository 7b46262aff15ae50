// How the coordinator plans a job (JobDriver calls PlanOn): the
// partitioner over the job's profile (coordinator/planner), the schedule
// ("auto": each simulated, the fastest that fits), chunks folded onto the
// workers, tensor groups and recomputation (a member's profile, planned as
// workers / degree, then expanded), and the pipeline decided once into
// the plan (PartitionPlan.pipeline).
//
// Pure; thread-safe.
#ifndef AQUEDUCT_COORDINATOR_PLANNING_H_
#define AQUEDUCT_COORDINATOR_PLANNING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/planner/plan.h"
#include "pipeline/policy.h"
#include "proto/types.h"

namespace aqueduct {

// The latency of one step of a tensor group's ring all-reduce: over TCP
// between hosts with cores to spare, and when the job's workers on a host
// run more threads than it has cores (each step then waits for the
// scheduler to run the peer: 1.6-1.8 ms measured on the 2-core machine
// with 4 one-thread workers, docs/benchmarks.md "Planner: its choice").
inline constexpr double kRingStepLatencyS = 50e-6;
inline constexpr double kOversubscribedStepLatencyS = 2e-3;

// A worker's share of its host.
struct HostShare {
  std::string host;
  int threads = 0;  // 0: not reported
  int cores = 0;
};

// kOversubscribedStepLatencyS when the threads of `workers` on some host
// outnumber its cores, else kRingStepLatencyS.
double StepLatencyOf(const std::vector<HostShare>& workers);

// The plan of `spec` on `workers` workers over `levels` (innermost first;
// empty: one level at the spec's bandwidth), whose smallest has
// `worker_memory` bytes (0: unknown), a tensor group's ring taking
// `step_latency_s` per step. `worker_speeds`: each rank's speed relative
// to the worker the profile describes (coordinator/speeds.h; empty: all
// equal, and the plan is exactly the homogeneous one); unequal speeds
// place the stages by them (a tensor group at its slowest member's, a
// chunk at its worker's) and the plan records them. Errors name what does
// not fit.
absl::StatusOr<PartitionPlan> PlanOn(
    const JobSpec& spec, const ModelProfile& profile, int workers,
    const std::vector<PlannerLevel>& levels, int64_t worker_memory = 0,
    double step_latency_s = kRingStepLatencyS,
    const std::vector<double>& worker_speeds = {});

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_PLANNING_H_
