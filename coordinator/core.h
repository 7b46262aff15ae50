// The coordinator's state and logic behind its gRPC service: the worker
// registry, the job table with each job's state machine, the version ledger
// (progress per stage), and the rendezvous store.
//
// Jobs: PENDING (waiting for enough healthy idle workers, up to the spec's
// wait_for_workers_ms capped by options.max_wait_for_workers; the queue
// admits jobs and picks those that start, with backfill and holds against
// starvation, in jobs/queue.h) -> PLANNING (a driver thread profiles the model
// on a worker unless the job came with a profile, runs the planner, assigns the
// stages and starts the workers) -> RUNNING (workers report progress) ->
// SUCCEEDED when every stage replica has finished, FAILED with a reason (a
// worker dies, leaves or is fenced; a stage reports an error; an RPC to a
// worker fails), or CANCELLED. Every wait has a deadline.
//
// Parts (issue 22; docs/architecture.md, "Control plane"): the job table
// (job_table.h), progress intake (progress_intake.h), the checkpoint committer
// (checkpoint_committer.h), the driver (driver.h, on an owned, bounded
// executor), the scheduler (scheduler.h), the workers' lifecycle
// (worker_lifecycle.h: registration, heartbeats, transitions, adoption), the
// journal keeper (journal_keeper.h: opening, appends, retries after a full
// disk), recovery (recovery.h: restarts, probes, a job's workers released), the
// jobs' lifecycle (job_lifecycle.h: transitions, a job's end) and the store's
// access checks (store_access.h), each owned here and run under this class's
// one mutex, with the read API's lookups (job_queries.h); they reach back only
// through job_events.h, which this class implements (state transitions,
// restarts, probes, scheduling, trimming). Also the registry (registry.h), the
// rendezvous store (kv_store.h) and the journal (journal.h).
//
// Thread-safety: thread-safe. One mutex guards the table; worker RPCs and
// journal syncs run without it. Tick() must be called periodically (the
// daemon's main does, a few times a second).
#ifndef AQUEDUCT_COORDINATOR_CORE_H_
#define AQUEDUCT_COORDINATOR_CORE_H_

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/executor.h"
#include "coordinator/checkpoint_committer.h"
#include "coordinator/driver.h"
#include "coordinator/job_events.h"
#include "coordinator/job_lifecycle.h"
#include "coordinator/job_logs.h"
#include "coordinator/job_table.h"
#include "coordinator/jobs/job.h"
#include "coordinator/jobs/job_state.h"
#include "coordinator/journal.h"
#include "coordinator/journal_keeper.h"
#include "coordinator/kv_store.h"
#include "coordinator/options.h"
#include "coordinator/progress_intake.h"
#include "coordinator/recovery.h"
#include "coordinator/registry.h"
#include "coordinator/scheduler.h"
#include "coordinator/store_access.h"
#include "coordinator/trace_store.h"
#include "coordinator/worker_client.h"
#include "coordinator/worker_lifecycle.h"
#include "proto/service_types.h"

namespace aqueduct {

class CoordinatorCore : private JobEvents {
 public:
  CoordinatorCore(const CoordinatorOptions& options, const Clock* clock,
                  WorkerClientFactory worker_clients);
  ~CoordinatorCore();  // Joins the driver threads.

  // ---- Workers (RPCs from workers) ----
  // `running` (may be null): the job attempt and stage the worker runs; a
  // running job taken back after a restart gets its worker back.
  absl::Status RegisterWorker(const WorkerInfo& info,
                              const v1::StageClaim* running = nullptr);
  // What a heartbeat's answer says.
  struct HeartbeatReply {
    // Jobs the worker should stop (the one it named, when that is over,
    // no longer its own, or an attempt this coordinator never started).
    std::vector<std::string> stop_jobs;
    // The version at which its job should checkpoint (0: none asked).
    int64_t checkpoint_at = 0;
  };
  // Renews the worker's lease; `job_id` and `attempt` are what it runs.
  absl::StatusOr<HeartbeatReply> Heartbeat(const std::string& worker_id,
                                           const std::string& incarnation,
                                           const std::string& job_id,
                                           int attempt = 0);
  absl::Status DeregisterWorker(const std::string& worker_id,
                                const std::string& incarnation);
  // Applies the reports only when all of them pass: PERMISSION_DENIED
  // naming what did not match when `incarnation` is not the one registered
  // for `worker_id`, or a report is for a job, attempt, stage or replica
  // the worker is not assigned to; INVALID_ARGUMENT naming the field for a
  // value out of range (progress_checks.h); NOT_FOUND for an unknown
  // worker or job; FAILED_PRECONDITION when the incarnation is DEAD or
  // LEFT. Reports of an attempt that ended, and a job's own workers'
  // reports that arrive after it finished, are accepted and ignored.
  absl::Status ReportProgress(const std::string& worker_id,
                              const std::string& incarnation,
                              const std::vector<StageProgress>& stages);

  // ---- Jobs (RPCs from clients) ----
  // INVALID_ARGUMENT naming the field for a bad spec, or one of its
  // strings (or the profile's) over its size limit (jobs/field_limits.h).
  // `resume` (may be empty) names the checkpoint the job starts from: a job
  // id (its latest committed checkpoint), a version directory or its
  // manifest.json; NOT_FOUND or DATA_LOSS naming it when there is no
  // loadable checkpoint there, INVALID_ARGUMENT when it is of another
  // model. `owner`: who submits it (from the caller's credential; "" without
  // authentication), kept and journaled with the job; RESOURCE_EXHAUSTED
  // when the queue or the owner's share is full (jobs/queue.h).
  // `owner_role` ("user", "admin", "" unauthenticated) bounds the spec's
  // priority (PERMISSION_DENIED past options.max_user_priority for a
  // user). FAILED_PRECONDITION when the job needs more workers than are
  // registered and its spec does not ask to wait for them
  // (pipeline.wait_for_workers_ms).
  absl::StatusOr<std::string> SubmitJob(const JobSpec& spec,
                                        const ModelProfile* profile,
                                        const std::string& resume = "",
                                        const std::string& owner = "",
                                        const std::string& owner_role = "");
  absl::StatusOr<JobStatus> GetJob(const std::string& job_id) const;
  // Jobs in submission order, `page_size` at a time (0: 100; at most 1000;
  // fewer when their statuses pass options.max_jobs_page_bytes), after the job
  // `page_token` (jobs/pages.h) ended the previous page ("": from the first).
  // INVALID_ARGUMENT naming page_size when negative, or page_token when it
  // is not one this run of the coordinator issued.
  absl::StatusOr<JobPage> ListJobs(int64_t page_size,
                                   const std::string& page_token) const;
  // Cancels a job that has not finished; a finished job's state is returned
  // unchanged.
  absl::StatusOr<JobState> CancelJob(const std::string& job_id);
  absl::StatusOr<PartitionPlan> GetPlan(const std::string& job_id) const;
  // From the job's trace file when the journal's directory keeps traces
  // (<state_dir>/traces), else from the events in memory.
  absl::StatusOr<v1::GetTraceResponse> GetTrace(
      const std::string& job_id) const;
  // The last `window` of the job's trace from the events in memory (the
  // dashboard's live timeline; after a coordinator restart, only what was
  // reported since). NOT_FOUND for an unknown job.
  absl::StatusOr<v1::GetTraceResponse> GetTraceTail(
      const std::string& job_id, absl::Duration window) const;
  // The job's log (job_logs.h): its workers' lines and the coordinator's
  // events about it, kept in <state_dir>/logs once the journal is open.
  // NOT_FOUND for an unknown job; otherwise whether it is final.
  absl::StatusOr<bool> JobIsFinal(const std::string& job_id) const;
  JobLogStore* logs() { return &logs_; }
  // Every worker, in registration order.
  std::vector<WorkerStatus> ListWorkers() const;
  // A page of workers in id order after `after_id` ("": the first), at
  // most `max_count` and about `max_bytes` (Registry::ListPage).
  std::vector<WorkerStatus> ListWorkersPage(const std::string& after_id,
                                            size_t max_count, size_t max_bytes,
                                            bool* more) const;
  // Waits until the job's status differs from `seen_version` (or it is
  // final) or `deadline`; returns the status and its version.
  absl::StatusOr<std::pair<JobStatus, int64_t>> WaitForJob(
      const std::string& job_id, int64_t seen_version, absl::Time deadline);

  // ---- The rendezvous store (RPCs from workers) ----
  // Keys are "jobs/<job>/a<attempt>/..." (kv_store.h). Set and Add are for
  // the attempt the job runs now: NOT_FOUND for an unknown job,
  // FAILED_PRECONDITION for a finished job or another attempt (whose keys
  // are gone or going), then KvStore's errors. Checked and stored under one
  // lock, so a job's keys cannot outlive it.
  absl::Status StoreSet(const std::string& key, const std::string& value);
  absl::StatusOr<int64_t> StoreAdd(const std::string& key, int64_t delta);
  // Waits until `deadline` (KvStore::Get); does not hold the table's lock.
  absl::StatusOr<std::string> StoreGet(const std::string& key,
                                       absl::Time deadline);
  // OK only if `key` is under "jobs/<J>/" and `worker_id` is currently
  // assigned to job J (a live registration whose job is J):
  // PERMISSION_DENIED naming the worker and the job otherwise;
  // INVALID_ARGUMENT for a key of another shape. The gRPC adapter calls it
  // with the authenticated worker's name before each store call.
  absl::Status CheckStoreAccess(const std::string& worker_id,
                                const std::string& key) const;
  KvStore* store() { return &store_; }

  // ---- Checkpoints and trained models ----
  // The job's committed checkpoints still kept, oldest first.
  absl::StatusOr<std::vector<v1::CheckpointManifest>> ListCheckpoints(
      const std::string& job_id) const;
  // OK when `worker_id` (as `incarnation`) runs replica 0 of the output
  // stage of attempt `attempt` of the unfinished job `job_id`: the one
  // worker that may upload its trained model. FAILED_PRECONDITION or
  // NOT_FOUND saying why not.
  absl::Status CheckModelUpload(const std::string& worker_id,
                                const std::string& incarnation,
                                const std::string& job_id, int attempt) const;
  // Records where the job's trained model is kept (shown in its status).
  absl::Status RecordModel(const std::string& job_id, const std::string& path,
                           int64_t bytes);

  // Keeps jobs in the journal at `path` from now on, after restoring the
  // ones it holds: finished jobs with the status they ended with; running
  // jobs are taken back (plan, assignment, attempt, checkpoints) and wait
  // for their workers, which keep training meanwhile, to register again
  // with their claims (options.adoption_grace plus the lease); jobs that
  // had not started go back to PENDING. The journal is then compacted.
  // Call once, before serving. A journal that cannot be rewritten (a full
  // disk) is kept as it was and the coordinator serves without one,
  // refusing new jobs: UNAVAILABLE only when it cannot be read.
  // Each job's log and trace are kept beside it, in <dir of path>/logs
  // and <dir of path>/traces (loaded back here; without them, in memory).
  absl::Status OpenJournal(const std::string& path);
  // When the journal could not be rewritten at start (a full disk), tries
  // again (every 5 s, from Tick): once it can, new jobs are accepted again,
  // and the journal holds every job as it is now.
  void RetryJournal();

  // Leases, timeouts and scheduling of pending jobs.
  void Tick();

  const CoordinatorOptions& options() const { return options_; }

 private:
  // The core's side of job_events.h, for its components: each asserts mu_
  // and calls the ...Locked method it names.
  bool Transition(Job& job, JobEvent event, const std::string& reason) override;
  void RestartOrFail(Job& job, const std::string& reason) override;
  void WorkerLost(Job& job, const std::string& worker_id,
                  const std::string& reason) override;
  void Probe(Job& job, const std::string& error) override;
  JobStatus StatusOf(const Job& job) const override;
  absl::Status StartDriver(const std::string& job_id) override;
  bool ShuttingDown() const override;
  void Schedule() override;
  void TrimFinished() override;

  // `order`: the queue's order (Scheduler::QueueOrder), when the caller
  // has it; else computed for a pending job.
  JobStatus StatusOfLocked(const Job& job,
                           const std::vector<const Job*>* order = nullptr) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts the pending jobs that can start (scheduler.h).
  void ScheduleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Admits a submission of `owner` (JobTable::Admit, refused while the
  // journal cannot be written) and draws its id; the caller adds the job
  // or not, and calls jobs_.EndAdmission either way.
  absl::StatusOr<std::string> AdmitLocked(const std::string& owner)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A report's trace events kept with the job (after the lock).
  void KeepRecords(const ProgressIntake::Records& records)
      ABSL_LOCKS_EXCLUDED(mu_);

  const CoordinatorOptions options_;
  const Clock* clock_;
  WorkerClientFactory worker_clients_;
  KvStore store_;
  // Each job's log and trace (thread-safe; never call back into the core).
  JobLogStore logs_;
  TraceStore traces_;

  mutable absl::Mutex mu_;
  Registry registry_ ABSL_GUARDED_BY(mu_);
  JobTable jobs_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  // The journal: opened by OpenJournal before serving, or later by
  // RetryJournal when the disk was full at start (journal_keeper.h).
  JournalKeeper journal_;
  // Runs the drivers and the stop calls to workers; and the checkpoint
  // commits, one at a time, in order. Both are joined first in the
  // destructor, before the components and the state their tasks use.
  std::unique_ptr<BoundedExecutor> executor_;
  std::unique_ptr<BoundedExecutor> committer_;
  // The components (issue 22), each on the state above. The committer,
  // recovery and the driver are thread-safe (they take mu_ on their
  // threads), as is the jobs' lifecycle (its syncs need no lock); the
  // intake, the workers' lifecycle, the scheduler and the store's access
  // checks are called only under mu_.
  CheckpointCommitter checkpoints_;
  ProgressIntake intake_ ABSL_GUARDED_BY(mu_);
  WorkerLifecycle workers_ ABSL_GUARDED_BY(mu_);
  Scheduler scheduler_ ABSL_GUARDED_BY(mu_);
  Recovery recovery_;
  JobLifecycle lifecycle_;
  StoreAccess store_access_ ABSL_GUARDED_BY(mu_);
  JobDriver driver_;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_CORE_H_
