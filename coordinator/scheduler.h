// The scheduler (issue 22): starts the pending jobs that can start, with
// the queue's placement (jobs/queue.h: priorities, backfill, and holds
// against starvation), and fails those whose wait for workers is over or
// that the registered workers could no longer run.
//
// Thread-safety: not thread-safe; requires the core's mutex (the core
// holds it ABSL_GUARDED_BY that mutex, with the registry and the job table
// it uses).
#ifndef AQUEDUCT_COORDINATOR_SCHEDULER_H_
#define AQUEDUCT_COORDINATOR_SCHEDULER_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/clock.h"
#include "coordinator/job_events.h"
#include "coordinator/job_table.h"
#include "coordinator/jobs/queue.h"
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
  // Fails the pending jobs whose wait for workers is over at `now`, and
  // the new ones (never started) that need more workers than are
  // registered and do not ask to wait for more (the cluster shrank below
  // them).
  void ExpirePending(absl::Time now);
  // How long `job` waits for workers: its spec's wait (or the default; by
  // default infinite), at most options.max_wait_for_workers when finite.
  absl::Duration WaitForWorkers(const Job& job) const;

  // Whether the registry has had time to fill since this coordinator
  // started (its workers' heartbeats dead_after, plus the adoption grace):
  // before that, the registered workers undercount the cluster.
  bool Settled(absl::Time now) const {
    return now - since_ >=
           options_.registry.dead_after + options_.adoption_grace;
  }

  // The pending jobs in the order the queue considers them (priority,
  // then submission).
  std::vector<const Job*> QueueOrder() const;
  // A pending job's place in `order` (QueueOrder; 1: the next to start)
  // and what it waits for ("needs 3 workers, 1 idle"); {0, ""} for a job
  // not in it.
  struct Standing {
    int position = 0;
    std::string waiting_for;
  };
  Standing StandingOf(const Job& job,
                      const std::vector<const Job*>& order) const;

 private:
  // Healthy workers registered, busy or idle.
  int LiveWorkers() const;
  QueuedJob QueuedOf(const Job& job, absl::Time now) const;
  // Why pending `job` fails at `now`; empty while it may wait.
  std::string WhyFail(const Job& job, absl::Time now) const;

  const CoordinatorOptions& options_;
  const Clock* clock_;
  Registry& registry_;
  JobTable& jobs_;
  JobEvents& events_;
  // When this coordinator started scheduling.
  const absl::Time since_;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_SCHEDULER_H_
