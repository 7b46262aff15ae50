#include "coordinator/job_queries.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace aqueduct {

int64_t LargestLiveWorkerMemory(const Registry& registry) {
  int64_t bytes = 0;
  for (const WorkerStatus& w : registry.List()) {
    if (w.state() != v1::WORKER_HEALTHY && w.state() != v1::WORKER_SUSPECT) {
      continue;
    }
    bytes = std::max(bytes, w.info().device().memory_bytes());
  }
  return bytes;
}

absl::StatusOr<PartitionPlan> PlanOf(const Job& job) {
  if (!job.has_plan) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job.id, " has no plan yet (it is ",
                     JobStateName(job.state), ")"));
  }
  return job.plan;
}

std::vector<v1::CheckpointManifest> CheckpointsOf(const Job& job) {
  std::vector<v1::CheckpointManifest> out;
  for (const auto& [version, m] : job.checkpoints) out.push_back(m);
  return out;
}

absl::Status CheckModelUploader(const Registry& registry, const JobTable& jobs,
                                const std::string& worker_id,
                                const std::string& incarnation,
                                const std::string& job_id, int attempt) {
  RETURN_IF_ERROR(registry.CheckLive(worker_id, incarnation));
  ASSIGN_OR_RETURN(const Job* job, jobs.Find(job_id));
  auto worker = registry.Get(worker_id);
  // The output stage's replica 0: with several chunks per worker, not
  // the stage it registered (its first).
  const bool output = worker.ok() && worker->job_id() == job_id &&
                      !job->stage_workers.empty() &&
                      !job->stage_workers.back().empty() &&
                      job->stage_workers.back()[0] == worker_id;
  if (IsFinal(job->state) || attempt != job->attempt || !output) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", worker_id, " may not upload the model of job ",
                     job_id, " (attempt ", attempt,
                     "): only the output stage's replica 0 of the "
                     "running attempt ",
                     job->attempt, " may"));
  }
  return absl::OkStatus();
}

}  // namespace aqueduct
