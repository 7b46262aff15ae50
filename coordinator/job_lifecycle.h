// A job's transitions and its end (issue 22): each event goes through the
// state machine (jobs/job_state.h) and into the job's log; a job that
// reaches a final state has its status journaled, its workers freed (and
// asked to stop), its store keys and uncommitted checkpoints removed, its
// log and trace made durable, and the queue scheduled. Also the trimming
// of finished jobs beyond options.max_finished_jobs, with their records.
//
// Thread-safety: thread-safe. The ...Locked methods require the core's
// mutex (`mu`, asserted: clang's analysis cannot tie `mu` to the core's
// own member); the records' syncs run on the executor without it.
#ifndef AQUEDUCT_COORDINATOR_JOB_LIFECYCLE_H_
#define AQUEDUCT_COORDINATOR_JOB_LIFECYCLE_H_

#include <string>

#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/executor.h"
#include "coordinator/checkpoint_committer.h"
#include "coordinator/job_events.h"
#include "coordinator/job_logs.h"
#include "coordinator/job_table.h"
#include "coordinator/journal_keeper.h"
#include "coordinator/kv_store.h"
#include "coordinator/options.h"
#include "coordinator/recovery.h"
#include "coordinator/trace_store.h"

namespace aqueduct {

// What a job's end touches besides the job: all must outlive the
// lifecycle. `executor` syncs the job's records and is joined before the
// lifecycle is destroyed.
struct JobEndParts {
  KvStore& store;
  JobLogStore& logs;
  TraceStore& traces;
  JournalKeeper& journal;
  CheckpointCommitter& checkpoints;
  Recovery& recovery;
  BoundedExecutor& executor;
};

class JobLifecycle {
 public:
  // `mu` guards `jobs` (the core's mutex); `events` schedules the queue
  // after a job ends. Keeps the references; all must outlive it.
  JobLifecycle(const CoordinatorOptions& options, const Clock* clock,
               absl::Mutex& mu, JobTable& jobs, JobEndParts parts,
               JobEvents& events);

  // Applies `event` to the job; on a final state ends it (above). False
  // (and nothing changes) when the event does not apply.
  bool TransitionLocked(Job& job, JobEvent event, const std::string& reason);
  // Removes the finished jobs beyond options.max_finished_jobs, with their
  // logs and traces.
  void TrimFinishedLocked();

 private:
  // The job ended: its status journaled, its workers freed (and stopped
  // when `stop`), its store keys and uncommitted checkpoints removed.
  void EndLocked(Job& job, bool stop, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A line of the coordinator's in the job's log.
  void LogEvent(const Job& job, const std::string& level,
                const std::string& text);
  // The job's log and trace made durable, on the executor.
  void SyncRecords(const Job& job);

  const CoordinatorOptions& options_;
  const Clock* clock_;
  absl::Mutex& mu_;
  JobTable& jobs_ ABSL_GUARDED_BY(mu_);
  JobEndParts parts_;
  JobEvents& events_;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_JOB_LIFECYCLE_H_
