// The coordinator's state and logic behind its gRPC service: the worker
// registry, the job table with each job's state machine, the version ledger
// (progress per stage), and the rendezvous store.
//
// Jobs: PENDING (waiting for enough healthy idle workers, up to the spec's
// wait_for_workers_ms) -> PLANNING (a driver thread profiles the model on a
// worker unless the job came with a profile, runs the planner, assigns the
// stages and starts the workers) -> RUNNING (workers report progress) ->
// SUCCEEDED when every stage replica has finished, FAILED with a reason (a
// worker dies, leaves or is fenced; a stage reports an error; an RPC to a
// worker fails), or CANCELLED. Every wait has a deadline.
//
// Parts: the job state machine and the ledger of reports (jobs/), the
// journal (journal.h), the registry (registry.h), the rendezvous store
// (kv_store.h), the planner (planner/); this class holds the job table and
// wires them; the driver (driver.cc) runs on an owned, bounded executor.
//
// Thread-safety: thread-safe. One mutex guards the table; worker RPCs and
// journal syncs run without it. Tick() must be called periodically (the
// daemon's main does, a few times a second).
#ifndef AQUEDUCT_COORDINATOR_CORE_H_
#define AQUEDUCT_COORDINATOR_CORE_H_

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/executor.h"
#include "coordinator/jobs/job_state.h"
#include "coordinator/jobs/ledger.h"
#include "coordinator/journal.h"
#include "coordinator/kv_store.h"
#include "coordinator/registry.h"
#include "coordinator/worker_client.h"
#include "proto/service_types.h"

namespace aqueduct {

struct CoordinatorOptions {
  RegistryOptions registry;
  // Timeout of each AssignStage/StartJob/StopJob call to a worker.
  absl::Duration worker_rpc_timeout = absl::Seconds(10);
  // Timeout of a Profile call.
  absl::Duration profile_timeout = absl::Seconds(300);
  // Default wait for workers when the spec sets none.
  absl::Duration default_wait_for_workers = absl::Seconds(60);
  // Finished jobs kept in the table.
  int max_finished_jobs = 1000;
  // Threads that drive jobs (profile, plan, assign) and stop workers, and
  // the most tasks that may wait for one.
  int driver_threads = 4;
  size_t driver_queue = 10000;
};

class CoordinatorCore {
 public:
  CoordinatorCore(const CoordinatorOptions& options, const Clock* clock,
                  WorkerClientFactory worker_clients);
  ~CoordinatorCore();  // Joins the driver threads.

  // ---- Workers (RPCs from workers) ----
  absl::Status RegisterWorker(const WorkerInfo& info);
  // Fills the jobs the worker should stop.
  absl::Status Heartbeat(const std::string& worker_id,
                         const std::string& incarnation,
                         const std::string& job_id,
                         std::vector<std::string>* stop_jobs);
  absl::Status DeregisterWorker(const std::string& worker_id,
                                const std::string& incarnation);
  // FAILED_PRECONDITION for a stale incarnation or progress for a job or
  // stage the worker is not assigned to; NOT_FOUND for an unknown job.
  absl::Status ReportProgress(const std::string& worker_id,
                              const std::string& incarnation,
                              const std::vector<StageProgress>& stages);

  // ---- Jobs (RPCs from clients) ----
  // INVALID_ARGUMENT naming the field for a bad spec.
  absl::StatusOr<std::string> SubmitJob(const JobSpec& spec,
                                        const ModelProfile* profile);
  absl::StatusOr<JobStatus> GetJob(const std::string& job_id) const;
  std::vector<JobStatus> ListJobs() const;
  // Cancels a job that has not finished; a finished job's state is returned
  // unchanged.
  absl::StatusOr<JobState> CancelJob(const std::string& job_id);
  absl::StatusOr<PartitionPlan> GetPlan(const std::string& job_id) const;
  absl::StatusOr<v1::GetTraceResponse> GetTrace(
      const std::string& job_id) const;
  std::vector<WorkerStatus> ListWorkers() const;
  // Waits until the job's status differs from `seen_version` (or it is
  // final) or `deadline`; returns the status and its version.
  absl::StatusOr<std::pair<JobStatus, int64_t>> WaitForJob(
      const std::string& job_id, int64_t seen_version, absl::Time deadline);

  KvStore* store() { return &store_; }

  // Keeps jobs in the journal at `path` from now on, after restoring the
  // ones it holds: finished jobs with the status they ended with; jobs that
  // had not finished when the previous coordinator stopped become FAILED
  // (their workers are told to stop when they next heartbeat). The journal
  // is then compacted to the jobs kept (max_finished_jobs). Call once,
  // before serving. UNAVAILABLE naming the file if it cannot be written.
  absl::Status OpenJournal(const std::string& path);

  // Leases, timeouts and scheduling of pending jobs.
  void Tick();

  const CoordinatorOptions& options() const { return options_; }

 private:
  struct Job {
    std::string id;
    JobSpec spec;
    bool has_profile = false;
    ModelProfile profile;
    JobState state = v1::JOB_PENDING;
    std::string reason;
    absl::Time submitted, started = absl::InfinitePast(),
                          finished = absl::InfinitePast();
    int workers_needed = 1;
    int64_t total_steps = 0;
    bool has_plan = false;
    PartitionPlan plan;
    // [stage][replica] -> worker id; and every worker reserved.
    std::vector<std::vector<std::string>> stage_workers;
    std::vector<std::string> reserved;
    // What the workers reported.
    JobLedger ledger;
    int64_t version = 0;
    // Restored from the journal: the final status, as it was reported.
    bool restored = false;
    JobStatus snapshot;
  };

  JobStatus StatusOfLocked(const Job& job) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies `event` to the job through the state machine (jobs/job_state.h);
  // on a final state journals the status, frees the job's workers and asks
  // them to stop. False (and nothing changes) when the event does not apply.
  bool TransitionLocked(Job& job, JobEvent event, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishLocked(Job& job, JobEvent event, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseWorkersLocked(Job& job, bool stop, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyProgressLocked(Job& job, const std::string& worker_id,
                           const StageProgress& p, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HandleTransitionsLocked(const std::vector<WorkerTransition>& changes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ScheduleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TrimFinishedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds a job from the journal with the status it ended with.
  void RestoreJobLocked(const v1::JobSubmitted& sub, const JobStatus& snapshot)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The journal's records for the restored jobs kept.
  std::vector<v1::JournalRecord> CompactionLocked(
      const std::map<std::string, v1::JobSubmitted>& submitted) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StopWorkersAsync(
      std::vector<std::pair<std::string, std::string>> id_and_address,
      std::string job_id, std::string reason);

  // The driver (driver.cc): runs on the executor, one task per job that
  // leaves PENDING: profile (unless the job has a profile), plan, record
  // the assignment, assign and start the stages. Each step that touches
  // the job table takes the lock and checks the job is still PLANNING.
  struct DriveInput {
    JobSpec spec;
    ModelProfile profile;
    bool has_profile = false;
    std::vector<std::string> reserved, addresses;
  };
  using Assignments = std::vector<std::pair<std::string, StageAssignment>>;
  void Drive(const std::string& job_id);
  bool ReadDriveInput(const std::string& job_id, DriveInput* in);
  absl::StatusOr<PartitionPlan> ProfileAndPlan(DriveInput& in);
  // Records the plan and the assignment; frees workers the plan leaves
  // idle. False when the job is no longer PLANNING.
  bool RecordPlan(const std::string& job_id, const DriveInput& in,
                  const PartitionPlan& plan, Assignments* assignments);
  absl::Status AssignAndStart(const std::string& job_id,
                              const Assignments& assignments);
  void FailJob(const std::string& job_id, const std::string& reason);

  const CoordinatorOptions options_;
  const Clock* clock_;
  WorkerClientFactory worker_clients_;
  KvStore store_;

  mutable absl::Mutex mu_;
  Registry registry_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Job> jobs_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> job_order_ ABSL_GUARDED_BY(mu_);
  int64_t next_job_ ABSL_GUARDED_BY(mu_) = 1;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  std::string start_tag_;
  // Set by OpenJournal before serving, then only used: appends that wait
  // for the disk happen without mu_ (JobJournal is thread-safe).
  std::unique_ptr<JobJournal> journal_;
  // Runs the drivers and the stop calls to workers; declared last so that
  // it is destroyed (its threads joined) before the state they use.
  std::unique_ptr<BoundedExecutor> executor_;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_CORE_H_
