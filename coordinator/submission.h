// What SubmitJob checks of a submission before it is admitted, and the job
// it makes of one (pure; CoordinatorCore::SubmitJob calls them in this
// order, so that the first error a client sees does not change).
//
// Thread-safety: pure functions of their arguments.
#ifndef AQUEDUCT_COORDINATOR_SUBMISSION_H_
#define AQUEDUCT_COORDINATOR_SUBMISSION_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/jobs/job.h"
#include "pipeline/spec.h"
#include "proto/service_types.h"

namespace aqueduct {

// The sizes of what a client submits (jobs/field_limits.h; `resume` and
// `owner` too), before the spec's own checks: INVALID_ARGUMENT naming the
// field.
absl::Status CheckSubmissionSizes(const JobSpec& spec,
                                  const ModelProfile* profile,
                                  const std::string& resume,
                                  const std::string& owner);

// OK when a submitter of `role` ("user", "admin", or "" without
// authentication) may give its job the spec's priority: any as an admin
// or unauthenticated, at most `max_user_priority` as a user;
// PERMISSION_DENIED naming the bound otherwise.
absl::Status CheckPriority(const JobSpec& spec, const std::string& role,
                           int max_user_priority);

// OK when the `needed` workers of a job are among the `registered` ones,
// or its spec asks to wait for workers (pipeline.wait_for_workers_ms);
// FAILED_PRECONDITION saying so otherwise: no set of registered workers
// could run it.
absl::Status CheckWorkersExist(const JobSpec& spec, int needed, int registered);

// The spec's checks (CheckJobSpec) and the profile's, if any, against
// `memory_bytes`, the largest live worker's memory (0: none has
// registered): INVALID_ARGUMENT, "invalid job spec: ..." or "invalid
// profile: ...".
absl::StatusOr<SpecSummary> CheckSpecAndProfile(const JobSpec& spec,
                                                const ModelProfile* profile,
                                                int64_t memory_bytes);

// The job's total steps when the spec says them (synthetic data, or
// max_steps alone), else 0: the workers, which hold the data, report it.
absl::StatusOr<int64_t> KnownTotalSteps(const JobSpec& spec,
                                        const SpecSummary& summary);

// A new job `id`, PENDING: submitted at `wall_now` (shown), waiting for
// workers from `now` (monotonic).
Job NewJob(const std::string& id, const std::string& owner, const JobSpec& spec,
           const ModelProfile* profile, const SpecSummary& summary,
           int64_t total_steps, const v1::CheckpointManifest& resume,
           absl::Time wall_now, absl::Time now);

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_SUBMISSION_H_
