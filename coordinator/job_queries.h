// The lookups behind the core's read API (issue 22): a job's plan and
// checkpoints, who may upload a job's trained model, and the memory specs
// are checked against. Pure functions of the registry and the job table.
//
// Thread-safety: read what the core's mutex guards; call them under it.
#ifndef AQUEDUCT_COORDINATOR_JOB_QUERIES_H_
#define AQUEDUCT_COORDINATOR_JOB_QUERIES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/job_table.h"
#include "coordinator/jobs/job.h"
#include "coordinator/registry.h"
#include "proto/service_types.h"

namespace aqueduct {

// The largest live (healthy or suspect) worker's memory; 0 when none.
int64_t LargestLiveWorkerMemory(const Registry& registry);

// The job's plan: FAILED_PRECONDITION naming its state when it has none
// yet.
absl::StatusOr<PartitionPlan> PlanOf(const Job& job);

// The job's committed checkpoints still kept, oldest first.
std::vector<v1::CheckpointManifest> CheckpointsOf(const Job& job);

// OK when `worker_id` (as `incarnation`) runs replica 0 of the output
// stage of attempt `attempt` of the unfinished job `job_id`: the
// registry's errors for a registration that is not live, NOT_FOUND for an
// unknown job, else FAILED_PRECONDITION saying who may.
absl::Status CheckModelUploader(const Registry& registry, const JobTable& jobs,
                                const std::string& worker_id,
                                const std::string& incarnation,
                                const std::string& job_id, int attempt);

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_JOB_QUERIES_H_
