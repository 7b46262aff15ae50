// The scheduler (issue 22): starts the pending jobs that can start, with
// the queue's placement (jobs/queue.h: backfill, and holds against
// starvation), and fails those whose wait for workers is over.
//
// Thread-safety: not thread-safe; requires the core's mutex (the core
// holds it ABSL_GUARDED_BY that mutex, with the registry and the job table
// it uses).
#ifndef AQUEDUCT_COORDINATOR_SCHEDULER_H_
#define AQUEDUCT_COORDINATOR_SCHEDULER_H_

#include "absl/time/time.h"
#include "common/clock.h"
#include "coordinator/job_events.h"
#include "coordinator/job_table.h"
#include "coordinator/options.h"
#include "coordinator/registry.h"

namespace aqueduct {

class Scheduler {
 public:
  // Keeps the references; all must outlive it.
  Scheduler(const CoordinatorOptions& options, const Clock* clock,
            Registry& registry, JobTable& jobs, JobEvents& events);

  // Gives each pending job that can start its idle healthy workers
  // (spares before the workers a stage of the job could not reach), makes
  // it PLANNING and hands it to the driver; a job the driver cannot take
  // fails, once the pass is over.
  void Schedule();
  // Fails the pending jobs whose wait for workers is over at `now`.
  void ExpirePending(absl::Time now);
  // How long `job` waits for workers: its spec's wait (or the default), at
  // most options.max_wait_for_workers.
  absl::Duration WaitForWorkers(const Job& job) const;

 private:
  // Healthy workers registered, busy or idle.
  int LiveWorkers() const;

  const CoordinatorOptions& options_;
  const Clock* clock_;
  Registry& registry_;
  JobTable& jobs_;
  JobEvents& events_;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_SCHEDULER_H_
