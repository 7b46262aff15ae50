// What the coordinator's components (scheduler.h, progress_intake.h,
// checkpoint_committer.h, driver.h, journal_keeper.h, worker_lifecycle.h,
// recovery.h, job_lifecycle.h) ask of the core about a job: the changes only
// the core makes, because they touch everything it owns (the journal, the
// workers, the rendezvous store, the schedule). A narrow interface, so that
// each component is tested with a fake.
//
// Thread-safety: every method requires the core's mutex (the core's
// implementation asserts it).
#ifndef AQUEDUCT_COORDINATOR_JOB_EVENTS_H_
#define AQUEDUCT_COORDINATOR_JOB_EVENTS_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "coordinator/jobs/job.h"
#include "coordinator/jobs/job_state.h"
#include "coordinator/journal.h"
#include "proto/service_types.h"

namespace aqueduct {

// The journal, once open (null before, or while it cannot be written):
// thread-safe, read without the core's mutex.
using JournalAccessor = std::function<std::shared_ptr<JobJournal>()>;

class JobEvents {
 public:
  virtual ~JobEvents() = default;
  // Applies `event` to `job` through the state machine (jobs/job_state.h);
  // on a final state journals the status, frees the job's workers, asks
  // them to stop and schedules the queue. False (and nothing changes) when
  // the event does not apply.
  virtual bool Transition(Job& job, JobEvent event,
                          const std::string& reason) = 0;
  // A worker was lost or a stage failed: restarts the job from its latest
  // committed checkpoint when it has restarts left, else fails it.
  virtual void RestartOrFail(Job& job, const std::string& reason) = 0;
  // `worker_id` was lost (DEAD, LEFT, FENCED) or its stage failed: the job
  // goes on without it where recovery.h's ToleratesLoss says so (recorded
  // in the job's status and log); otherwise as RestartOrFail.
  virtual void WorkerLost(Job& job, const std::string& worker_id,
                          const std::string& reason) = 0;
  // A stage reported `error`: asks the job's workers whether they are
  // alive, then restarts it (or fails it).
  virtual void Probe(Job& job, const std::string& error) = 0;
  // The job's status as shown (its workers' states from the registry).
  virtual JobStatus StatusOf(const Job& job) const = 0;
  // Hands the job, now PLANNING, to the driver; an error when the driver
  // cannot take it (its queue is full).
  virtual absl::Status StartDriver(const std::string& job_id) = 0;
  // The core is being destroyed: no job starts.
  virtual bool ShuttingDown() const = 0;
  // Starts the pending jobs that can start now (scheduler.h).
  virtual void Schedule() = 0;
  // Removes the finished jobs beyond options.max_finished_jobs from the
  // table, with their logs and traces.
  virtual void TrimFinished() = 0;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_JOB_EVENTS_H_
