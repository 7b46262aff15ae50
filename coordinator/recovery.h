// Recovery (issue 22): what the coordinator does when a running job loses
// a worker or a stage fails. The job restarts as a new attempt from its
// latest committed checkpoint (or from the start): its workers are stopped
// and freed, it goes back to PENDING, and the scheduler gives it the
// healthy idle workers there are (a spare takes the lost worker's place;
// with none, the planner re-plans for fewer), up to
// fault_tolerance.max_restarts.
//
// A stage's failure is attributed before the restart: the job's workers
// are asked for their status (on the executor), and one that refuses (its
// process is gone) is declared DEAD, so the restart names the worker that
// died rather than the peer that noticed its connection close.
//
// A lost worker need not stop its job (issue 28): a replica of a
// single-stage job under the "async" parameter server that hosts no shard
// (ToleratesLoss) is let go, its loss recorded, and the others train on
// (docs/operations.md, "Faults under data parallelism").
//
// Also here: a job's workers released and asked to stop when it ends.
//
// Thread-safety: thread-safe. The ...Locked methods require the core's
// mutex (`mu`, asserted: clang's analysis cannot tie `mu` to the core's
// own member); the probes on the executor take it themselves.
#ifndef AQUEDUCT_COORDINATOR_RECOVERY_H_
#define AQUEDUCT_COORDINATOR_RECOVERY_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/executor.h"
#include "coordinator/job_events.h"
#include "coordinator/job_table.h"
#include "coordinator/kv_store.h"
#include "coordinator/options.h"
#include "coordinator/registry.h"
#include "coordinator/worker_client.h"
#include "coordinator/worker_lifecycle.h"

namespace aqueduct {

// Whether `job` goes on without `worker_id`: it is RUNNING under
// data_parallel.mode "parameter_server" with consistency "async", its plan
// is one stage (pure data parallelism: no other stage waits on a replica)
// of tensor degree 1, and the worker is a replica of it whose index is at
// least the shards' count (data_parallel.shards, else one per replica), so
// that it hosts no shard and takes no part in gathering checkpoints. Not
// for a worker lost already. Pure.
struct LossTolerance {
  bool tolerated = false;
  int stage = -1, replica = -1;
  // Why not, when not ("the job is not ...").
  std::string why_not;
};
LossTolerance ToleratesLoss(const Job& job, const std::string& worker_id);

class Recovery {
 public:
  // `mu` guards `registry`, `jobs` and `workers` (the core's mutex);
  // `executor` runs the probes and the stop calls, and is joined before
  // this is destroyed. Keeps the references; all must outlive it.
  Recovery(const CoordinatorOptions& options, const Clock* clock,
           absl::Mutex& mu, Registry& registry, JobTable& jobs, KvStore& store,
           WorkerLifecycle& workers, JobEvents& events,
           const WorkerClientFactory& worker_clients,
           BoundedExecutor& executor);

  // Restarts the job from its latest committed checkpoint when it has
  // restarts left (stopping the attempt's workers, back to PENDING), else
  // fails it. Nothing for a job neither PLANNING nor RUNNING.
  void RestartOrFailLocked(Job& job, const std::string& reason);
  // A stage reported `error`: asks the job's workers whether they are
  // alive (on the executor), declares those that refuse DEAD, then
  // restarts the job (or fails it); once per attempt.
  void ProbeLocked(Job& job, const std::string& error);
  // `worker_id` is lost to `job` (DEAD, LEFT or FENCED, or its stage
  // failed): when ToleratesLoss, records the loss (Job::tolerated_losses,
  // the ledger), frees the worker, asks it to stop the attempt, ends the
  // job when every other replica has finished, and returns true; otherwise
  // false, and the caller restarts (or fails) the job as before.
  bool TolerateLossLocked(Job& job, const std::string& worker_id,
                          const std::string& reason);
  // The job ended: its workers are freed, and asked to stop when `stop`.
  void ReleaseWorkersLocked(Job& job, bool stop, const std::string& reason);

 private:
  using Workers = std::vector<std::pair<std::string, std::string>>;
  // On the executor: the probe of attempt `attempt` of `job_id`.
  void ProbeWorkers(const std::string& job_id, int attempt,
                    const std::string& error) ABSL_LOCKS_EXCLUDED(mu_);
  // The workers (id, address) of `job_id`'s attempt that still hold it, or
  // nullopt after restarting the job because one of them did not come
  // back after a coordinator restart.
  std::optional<Workers> ProbedLocked(Job& job, const std::string& error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stops `job_id` (attempt `attempt`, else every attempt) on `workers`,
  // on the executor.
  void StopWorkers(Workers workers, std::string job_id, std::string reason,
                   std::optional<int> attempt = std::nullopt);

  const CoordinatorOptions& options_;
  const Clock* clock_;
  absl::Mutex& mu_;
  Registry& registry_ ABSL_GUARDED_BY(mu_);
  JobTable& jobs_ ABSL_GUARDED_BY(mu_);
  KvStore& store_;
  WorkerLifecycle& workers_ ABSL_GUARDED_BY(mu_);
  JobEvents& events_;
  const WorkerClientFactory& worker_clients_;
  BoundedExecutor& executor_;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_RECOVERY_H_
