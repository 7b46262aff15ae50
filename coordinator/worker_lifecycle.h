// The workers' lifecycle as the coordinator's core sees it (issue 22):
// registration (with a claim of the stage a worker runs, after the
// coordinator restarted), heartbeats and their answers, deregistration,
// the registry's transitions (a worker DEAD, LEFT or FENCED restarts or
// fails its job), forgotten workers, and the running jobs taken back after
// a restart whose workers do not come back in time.
//
// Thread-safety: not thread-safe; requires the core's mutex (the core
// holds it ABSL_GUARDED_BY that mutex, with the registry and the job table
// it uses).
#ifndef AQUEDUCT_COORDINATOR_WORKER_LIFECYCLE_H_
#define AQUEDUCT_COORDINATOR_WORKER_LIFECYCLE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/job_events.h"
#include "coordinator/job_table.h"
#include "coordinator/options.h"
#include "coordinator/registry.h"
#include "proto/service_types.h"

namespace aqueduct {

class WorkerLifecycle {
 public:
  // What a heartbeat's answer says (CoordinatorCore::HeartbeatReply).
  struct Reply {
    std::vector<std::string> stop_jobs;
    int64_t checkpoint_at = 0;
  };

  // Keeps the references; all must outlive it.
  WorkerLifecycle(const CoordinatorOptions& options, Registry& registry,
                  JobTable& jobs, JobEvents& events);

  // Registers the worker; `running` (may be null): the job attempt and
  // stage it runs, which a job taken back after a restart awaits. A worker
  // awaited by a job that it does not claim restarts that job. Then
  // schedules.
  absl::Status Register(const WorkerInfo& info, const v1::StageClaim* running);
  // Renews the lease; asks the worker to stop `job_id` when that is over,
  // no longer its own, or an attempt this coordinator never started.
  absl::StatusOr<Reply> Heartbeat(const std::string& worker_id,
                                  const std::string& incarnation,
                                  const std::string& job_id, int attempt);
  absl::Status Deregister(const std::string& worker_id,
                          const std::string& incarnation);
  // The registry's transitions: a worker DEAD, LEFT or FENCED restarts (or
  // fails) the job it was assigned to.
  void HandleTransitions(const std::vector<WorkerTransition>& changes);
  // At `now`: leases expired (HandleTransitions), workers forgotten (no
  // job may wait for them), and the jobs taken back whose workers did not
  // register again within options.adoption_grace plus the lease.
  void Tick(absl::Time now);

 private:
  void Forget(const std::vector<WorkerStatus>& forgotten);
  // A worker registering again with the job attempt it runs.
  void AdoptClaim(const WorkerInfo& info, const v1::StageClaim& claim);
  // `worker_id` registered again without claiming the stage a job taken
  // back awaits from it: the job restarts.
  void ForgetAwaited(const std::string& worker_id);
  void CheckAdoptions(absl::Time now);

  const CoordinatorOptions& options_;
  Registry& registry_;
  JobTable& jobs_;
  JobEvents& events_;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_WORKER_LIFECYCLE_H_
