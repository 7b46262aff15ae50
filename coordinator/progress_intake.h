// Progress intake (issue 22): ReportProgress's checks and their
// application to the job table. A batch of reports is checked whole
// (identity, assignment, attempt, ranges: progress_checks.h) before any is
// applied; applying one updates the job's ledger, vouches for its silent
// workers, hands checkpoint files to the committer, and reacts to a
// stage's failure (jobs/failure_policy.h) or to the last replica's finish
// through the core (job_events.h).
//
// Thread-safety: not thread-safe; requires the core's mutex (the core
// holds it ABSL_GUARDED_BY that mutex).
#ifndef AQUEDUCT_COORDINATOR_PROGRESS_INTAKE_H_
#define AQUEDUCT_COORDINATOR_PROGRESS_INTAKE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "coordinator/checkpoint_committer.h"
#include "coordinator/job_events.h"
#include "coordinator/job_logs.h"
#include "coordinator/job_table.h"
#include "coordinator/options.h"
#include "coordinator/registry.h"

namespace aqueduct {

class ProgressIntake {
 public:
  // A report's trace events, kept after the core's lock is released (the
  // bulk of a report: appends, and now and then a compaction that rewrites
  // the file). Its log lines are appended under the lock, in order with
  // the coordinator's own lines about the job.
  struct Records {
    std::string job_id;
    v1::StageTrace trace;  // Has events.
  };

  // Keeps the references; all must outlive it.
  ProgressIntake(const CoordinatorOptions& options, const Clock* clock,
                 Registry& registry, JobTable& jobs, JobLogStore& logs,
                 CheckpointCommitter& checkpoints, JobEvents& events);

  // The checks of a batch that need no state (the names, the count):
  // INVALID_ARGUMENT naming what is wrong.
  static absl::Status CheckBatch(const std::string& worker_id,
                                 const std::string& incarnation,
                                 const std::vector<StageProgress>& stages);
  // Applies `stages` from `worker_id` only when all of them pass
  // (CoordinatorCore::ReportProgress's errors); the trace events to keep
  // go to `records`.
  absl::Status Report(const std::string& worker_id,
                      const std::string& incarnation,
                      const std::vector<StageProgress>& stages,
                      std::vector<Records>* records);

 private:
  // Checks report `index` of `worker` without applying it.
  absl::Status Check(const WorkerStatus& worker, const StageProgress& p,
                     size_t index) const;
  void Apply(Job& job, const std::string& worker_id,
             const StageProgress& report, absl::Time now);
  // The report's log lines (who wrote them from the caller's identity) go
  // to the job's log; its trace events to `records` unless the job ended.
  void Record(const Job& job, const std::string& worker_id,
              const StageProgress& p, std::vector<Records>* records);
  // The reaction to a stage's failure: ReactToStageFailure's, of the
  // report's typed cause.
  void ReactToFailure(Job& job, const std::string& worker_id,
                      const StageProgress& p);
  // "stage S replica R on worker W failed: ...", or for a peer it could not
  // reach (FAILURE_PEER_UNREACHABLE), the pair with both hosts.
  std::string StageFailureReason(const std::string& worker_id,
                                 const StageProgress& p) const;
  // A stage could not load the committed checkpoint of `version` (its
  // files are damaged): forgets it, so that a restart goes further back.
  void ForgetUnloadableCheckpoint(Job& job, int64_t version,
                                  const std::string& error);
  // A loss line every LogEvery(job) steps and one per evaluation, in the
  // job's log (from the output stage's reports, combined over replicas).
  void LogTrainingSignal(Job& job);
  void LogFirstStepAfterRestart(Job& job, const StageProgress& p);
  // A stage committed a version beyond any before in this attempt: every
  // worker of the job took part (a pipeline's step needs every stage, a
  // replica's all-reduce every replica), so a silent one is cut off from
  // the coordinator, not dead (registry.h, UNREACHABLE).
  void VouchForWorkers(Job& job, const StageProgress& p, absl::Time now);

  const CoordinatorOptions& options_;
  const Clock* clock_;
  Registry& registry_;
  JobTable& jobs_;
  JobLogStore& logs_;
  CheckpointCommitter& checkpoints_;
  JobEvents& events_;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_PROGRESS_INTAKE_H_
