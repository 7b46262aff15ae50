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
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/executor.h"
#include "common/file_system.h"
#include "coordinator/job_logs.h"
#include "coordinator/jobs/failure_policy.h"
#include "coordinator/jobs/job_state.h"
#include "coordinator/jobs/ledger.h"
#include "coordinator/journal.h"
#include "coordinator/journal_restore.h"
#include "coordinator/kv_store.h"
#include "coordinator/registry.h"
#include "coordinator/trace_store.h"
#include "coordinator/worker_client.h"
#include "proto/service_types.h"

namespace aqueduct {

struct CoordinatorOptions {
  RegistryOptions registry;
  // Where checkpoints may be (--checkpoint_root): a job's checkpoint.dir,
  // the manifests committed and the versions pruned, and the manifests
  // --resume reads, only under these (checkpoints.cc). The default allows
  // none: a job with a checkpoint.dir is refused.
  PathRoots checkpoint_roots;
  // The rendezvous store's limits (kv_store.h).
  KvStoreOptions store;
  // Calls that wait (StoreGet with a wait, WatchJob) each hold a server
  // thread: at most this many at once (RESOURCE_EXHAUSTED beyond), and a
  // StoreGet waits at most max_store_wait whatever it asks.
  int max_waiting_calls = 64;
  absl::Duration max_store_wait = absl::Seconds(60);
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
  // Timeout of each GetStatus call probing a job's workers after a stage
  // failed (a dead worker refuses at once; a hung one times out).
  absl::Duration probe_timeout = absl::Seconds(2);
  // After a restart of the coordinator, how long a running job waits for
  // its workers to register again before it restarts without them (the
  // lease is added to it).
  absl::Duration adoption_grace = absl::Seconds(5);
  // The queue (jobs/queue.h): pending jobs of all users together, and
  // unfinished jobs of one owner, beyond which SubmitJob is
  // RESOURCE_EXHAUSTED; the longest a job waits for workers, whatever its
  // spec's wait_for_workers_ms says; how long a job waits before it holds
  // back the idle workers it needs from later jobs.
  int max_pending_jobs = 1000;
  int max_jobs_per_user = 64;
  absl::Duration max_wait_for_workers = absl::Hours(1);
  absl::Duration reserve_after = absl::Minutes(5);
  // The most bytes of statuses on one ListJobs page (at least one job):
  // under gRPC's default 4 MiB receive limit, whatever the client; a
  // running job's status with its loss curve is tens of KB.
  size_t max_jobs_page_bytes = size_t{3} << 20;
};

// A page of ListJobs: jobs in submission order, and the token of the next
// page ("" after the last).
struct JobPage {
  std::vector<JobStatus> jobs;
  std::string next_page_token;
};

// A journal's records by job (core.cc).

class CoordinatorCore {
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
  absl::StatusOr<std::string> SubmitJob(const JobSpec& spec,
                                        const ModelProfile* profile,
                                        const std::string& resume = "",
                                        const std::string& owner = "");
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
  struct Job {
    std::string id;
    // Its place in submission order in this run (page tokens), and who
    // submitted it.
    int64_t seq = 0;
    std::string owner;
    JobSpec spec;
    bool has_profile = false;
    ModelProfile profile;
    JobState state = v1::JOB_PENDING;
    std::string reason;
    absl::Time submitted, started = absl::InfinitePast(),
                          finished = absl::InfinitePast();
    // When the job last became PENDING (submitted, or restarted): the wait
    // for workers counts from here.
    absl::Time pending_since;
    int workers_needed = 1;
    int64_t total_steps = 0;
    bool has_plan = false;
    PartitionPlan plan;
    // [stage][replica] -> worker id; and every worker reserved.
    std::vector<std::vector<std::string>> stage_workers;
    std::vector<std::string> reserved;
    // Workers a stage of this job could not reach over the data plane
    // (a partition between two workers): a restart takes spares before
    // them, so that the pair is not put together again.
    std::set<std::string> unreachable_peers;
    // What the workers reported.
    JobLedger ledger;
    int64_t version = 0;
    // Restored from the journal: the final status, as it was reported.
    bool restored = false;
    JobStatus snapshot;
    // Recovery: the attempt running (0 first), the restarts so far and the
    // most allowed; while `probing`, a failure is being attributed.
    int attempt = 0;
    int max_restarts = 3;
    std::vector<v1::RestartRecord> restarts;
    bool probing = false;
    // The output stage committed a step since the latest restart.
    bool stepped_since_restart = false;
    // The highest version any stage of this attempt reported committed:
    // a report beyond it vouches for the job's silent workers.
    int64_t vouched_version = 0;
    // checkpoint.every_seconds: the version asked for (0: none) and when.
    int64_t checkpoint_at = 0;
    absl::Time checkpoint_asked = absl::InfinitePast();
    // Checkpoints: committed ones kept, by version; files reported for
    // versions not committed yet ([version][stage]); the checkpoint the job
    // resumed from (version 0: none).
    std::map<int64_t, v1::CheckpointManifest> checkpoints;
    std::map<int64_t, std::map<int, v1::CheckpointWritten>> pending_files;
    v1::CheckpointManifest resume;
    // Plans made ahead for fewer workers (a restart without a spare), by
    // worker count.
    std::map<int, PartitionPlan> ready_plans;
    // The trained model, once uploaded.
    std::string model_path;
    int64_t model_bytes = 0;
    // Taken back from the journal after a restart: workers of the plan
    // that have not registered again yet, and since when.
    std::set<std::string> awaiting;
    absl::Time adopted_at = absl::InfinitePast();
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
  // The restart (or failure) reason for report `p`'s error from
  // `worker_id`: "stage S replica R on worker W failed: ...", or for a peer
  // it could not reach (FAILURE_PEER_UNREACHABLE), the pair with both hosts.
  std::string StageFailureReason(const std::string& worker_id,
                                 const StageProgress& p)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A stage reported its failure: the reaction is ReactToStageFailure's
  // (coordinator/jobs/failure_policy.h), of the report's typed cause.
  void ReactToFailureLocked(Job& job, const std::string& worker_id,
                            const StageProgress& p)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Checks report `index` of `worker` (ReportProgress's errors) without
  // applying it.
  absl::Status CheckProgressLocked(const WorkerStatus& worker,
                                   const StageProgress& p, size_t index) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Workers forgotten by the registry (DEAD or LEFT for long): no job may
  // keep waiting for them.
  void ForgetWorkersLocked(const std::vector<WorkerStatus>& forgotten)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job of a store key that Set or Add may write now.
  absl::Status CheckStoreWriteLocked(const std::string& key) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A stage could not load the job's committed checkpoint of `version`
  // (its files are damaged): forgets it, so that a restart goes further
  // back.
  void ForgetUnloadableCheckpointLocked(Job& job, int64_t version,
                                        const std::string& error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LogFirstStepAfterRestartLocked(Job& job, const StageProgress& p)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A stage committed a version beyond any before in this attempt: every
  // worker of the job took part (a pipeline's step needs every stage, a
  // replica's all-reduce every replica), so a silent one is cut off from
  // the coordinator, not dead (registry.h, UNREACHABLE).
  void VouchForWorkersLocked(Job& job, const StageProgress& p, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HandleTransitionsLocked(const std::vector<WorkerTransition>& changes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts the pending jobs that can start (jobs/queue.h).
  void ScheduleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Healthy workers registered, busy or idle.
  int LiveWorkersLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails the pending jobs whose wait for workers is over.
  void ExpirePendingLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // How long `job` waits for workers: its spec's wait (or the default),
  // at most options.max_wait_for_workers.
  absl::Duration WaitForWorkers(const Job& job) const;
  // Admits a submission of `owner` (the queue's limits, counting the
  // admissions still being journaled) and draws its id; the caller
  // AddJobLocked()s it or calls EndAdmissionLocked.
  absl::StatusOr<std::string> AdmitLocked(const std::string& owner)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndAdmissionLocked(const std::string& owner)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends the job's submission to the journal, if there is one, and waits
  // until it is durable (call without mu_). UNAVAILABLE when it cannot.
  absl::Status JournalSubmission(const Job& job);
  void TrimFinishedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds a job from the journal with the status it ended with.
  void RestoreJobLocked(const v1::JobSubmitted& sub, const JobStatus& snapshot)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddJobLocked(Job job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A job as submitted, PENDING.
  Job JobFromJournal(const v1::JobSubmitted& sub) const;
  // A job that was running: RUNNING again with the plan and the workers of
  // its latest attempt, awaiting their registrations.
  void AdoptJobLocked(Job job, const std::vector<v1::JobStarted>& starts)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The journal's records for the jobs kept.
  // The journal's contents for the job table as it is now (RetryJournal):
  // the compaction of `journal_index_`, and a final status for each job
  // that ended since start; `ended` receives their ids.
  std::vector<v1::JournalRecord> JournalRecordsNowLocked(
      std::set<std::string>* ended) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::shared_ptr<JobJournal> Journal() const;
  // The job of `job_id`; NOT_FOUND naming it (quoted short) when there is
  // none. The one lookup of the job table for callers' ids.
  absl::StatusOr<Job*> FindJobLocked(const std::string& job_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<const Job*> FindJobLocked(const std::string& job_id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<v1::JournalRecord> CompactionLocked(
      const JournalIndex& index) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StopWorkersAsync(
      std::vector<std::pair<std::string, std::string>> id_and_address,
      std::string job_id, std::string reason,
      std::optional<int> attempt = std::nullopt);

  // Recovery (recovery.cc). A stage failed or a worker was lost: restarts
  // the job from its latest committed checkpoint when it has restarts left
  // (stopping the attempt's workers, back to PENDING), else fails it.
  void RestartOrFailLocked(Job& job, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A stage reported `error`: asks the job's workers whether they are
  // alive (on the executor) and declares those that refuse DEAD, so the
  // restart names the worker that died rather than the peer that noticed.
  void ProbeLocked(Job& job, const std::string& error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Probe(const std::string& job_id, int attempt, const std::string& error);
  // The checkpoint an attempt starts from: the latest committed one, else
  // the one the job resumed from (version 0: the start).
  const v1::CheckpointManifest* RestorePointLocked(const Job& job) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A worker registering again with the job attempt it runs.
  void AdoptClaimLocked(const WorkerInfo& info, const v1::StageClaim& claim)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `worker_id` registered again without claiming the stage a job taken
  // back awaits from it: the job restarts (after a probe).
  void ForgetAwaitedLocked(const std::string& worker_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // "stage s, replica r" of `worker_id` in `job`.
  static std::string WhereInJob(const Job& job, const std::string& worker_id);
  // checkpoint.every_seconds: picks the next checkpoint version of the
  // running jobs whose interval has passed (checkpoints.cc).
  void RequestCheckpointsLocked(absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Jobs taken back whose workers did not come back in time restart.
  void CheckAdoptionsLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void JournalStartLocked(const Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job's log and trace: a line of the coordinator's about `job`; the
  // lines and trace events of a report from `worker_id`; the job's files
  // made durable (on the executor) when it ends.
  void LogJobEventLocked(const Job& job, const std::string& level,
                         const std::string& text)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A report's log lines and trace events. The lines are appended under
  // the table's lock (in order with the coordinator's own lines about the
  // job); the trace events, the bulk, after it is released (appends, and
  // now and then a compaction that rewrites the file).
  struct JobRecords {
    std::string job_id;
    std::vector<v1::LogLine> lines;
    v1::StageTrace trace;  // No events: nothing to keep.
  };
  JobRecords RecordsOfLocked(const Job& job, const std::string& worker_id,
                             const StageProgress& p) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void KeepRecords(JobRecords records) ABSL_LOCKS_EXCLUDED(mu_);
  // ReportProgress's checks and state changes, under the lock; the
  // records to keep go to `records`.
  absl::Status ReportProgressLocked(const std::string& worker_id,
                                    const std::string& incarnation,
                                    const std::vector<StageProgress>& stages,
                                    std::vector<JobRecords>* records)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SyncJobRecordsLocked(const Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Checkpoints (checkpoints.cc). Files a stage reported durable; commits
  // a version once every stage's file is in.
  void ApplyCheckpointsLocked(Job& job, const StageProgress& p)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // On the executor: writes the manifest, journals it, records it, then
  // prunes old versions (keep_last) and stray files.
  void Commit(v1::CheckpointManifest manifest, const std::string& job_dir,
              int keep_last);
  // The job ended: removes its version directories that were never
  // committed (on the committer thread).
  void RemoveUncommittedLocked(const Job& job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<v1::CheckpointManifest> ResolveResume(
      const JobSpec& spec, const std::string& resume) const;
  // PERMISSION_DENIED naming checkpoint.dir when the spec's checkpoint
  // directory is outside options_.checkpoint_roots.
  absl::Status CheckCheckpointDir(const JobSpec& spec) const;

  // The driver (driver.cc): runs on the executor, one task per job that
  // leaves PENDING: profile (unless the job has a profile), plan, record
  // the assignment, assign and start the stages. Each step that touches
  // the job table takes the lock and checks the job is still PLANNING.
  struct DriveInput {
    JobSpec spec;
    ModelProfile profile;
    bool has_profile = false;
    std::vector<std::string> reserved, addresses;
    // Each reserved worker's memory (0: not known), for CheckPlanFits.
    std::vector<int64_t> memory_bytes;
    // Each reserved worker's link probe port (0: none).
    std::vector<int> link_probe_ports;
    int attempt = 0;
    v1::CheckpointManifest restore;
    std::map<int, PartitionPlan> ready_plans;
  };
  using Assignments = std::vector<std::pair<std::string, StageAssignment>>;
  void Drive(const std::string& job_id);
  bool ReadDriveInput(const std::string& job_id, DriveInput* in);
  absl::StatusOr<PartitionPlan> ProfileAndPlan(DriveInput& in);
  // The plan of `spec` for `workers` workers from `profile`.
  static absl::StatusOr<PartitionPlan> PlanFor(const JobSpec& spec,
                                               const ModelProfile& profile,
                                               int workers);
  // pipeline.topology "measured" (coordinator/topology.h): the reserved
  // workers measure their links, `in`'s workers are reordered group by
  // group and the plan is made on the measured levels; on the spec's flat
  // level, with the reason in plan.topology.note, when measuring fails.
  absl::StatusOr<PartitionPlan> PlanOnMeasuredLinks(DriveInput& in);
  // Makes the plans for fewer workers than `in` has, and keeps them with
  // the job (ready_plans) for restarts.
  void PlanAhead(const std::string& job_id, const DriveInput& in);
  // Records the plan and the assignment; frees workers the plan leaves
  // idle. False when the job is no longer PLANNING.
  bool RecordPlan(const std::string& job_id, const DriveInput& in,
                  const PartitionPlan& plan, Assignments* assignments);
  // The job is still PLANNING the attempt the driver works on.
  bool StillPlanningLocked(const std::string& job_id, int attempt) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status AssignAndStart(const std::string& job_id, int attempt,
                              const Assignments& assignments);
  void FailJob(const std::string& job_id, const std::string& reason);
  // A worker could not be assigned or started: probe and restart (or
  // fail when no restarts are left).
  void RestartJob(const std::string& job_id, int attempt,
                  const std::string& reason);

  const CoordinatorOptions options_;
  const Clock* clock_;
  WorkerClientFactory worker_clients_;
  KvStore store_;
  // Each job's log and trace (thread-safe; never call back into the core).
  JobLogStore logs_;
  TraceStore traces_;

  mutable absl::Mutex mu_;
  Registry registry_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Job> jobs_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> job_order_ ABSL_GUARDED_BY(mu_);
  int64_t next_job_ ABSL_GUARDED_BY(mu_) = 1;
  // The next job's place in submission order (Job::seq).
  int64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  // Submissions admitted and not in the table yet (being journaled), in
  // all and by owner: the queue's limits count them.
  int admitting_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, int> admitting_by_owner_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  std::string start_tag_;
  // This run of the coordinator, random (page tokens of another run are
  // refused).
  uint64_t run_ = 0;
  // The journal, once open for appends: by OpenJournal before serving, or
  // later by RetryJournal when the disk was full at start. Read through
  // Journal() (a copy of the pointer), so that appends that wait for the
  // disk happen without mu_ (JobJournal is thread-safe).
  mutable absl::Mutex journal_mu_ ABSL_ACQUIRED_AFTER(mu_);
  std::shared_ptr<JobJournal> journal_ ABSL_GUARDED_BY(journal_mu_);
  // Why the journal could not be opened for writing (new jobs are refused
  // until RetryJournal opens it).
  std::string journal_error_ ABSL_GUARDED_BY(mu_);
  // While it could not: its path, what was read from it, and when to try
  // again.
  std::string journal_path_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<JournalIndex> journal_index_ ABSL_GUARDED_BY(mu_);
  absl::Time journal_retry_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Runs the drivers and the stop calls to workers; declared last so that
  // it is destroyed (its threads joined) before the state they use.
  std::unique_ptr<BoundedExecutor> executor_;
  // Commits checkpoints one at a time, in order.
  std::unique_ptr<BoundedExecutor> committer_;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_CORE_H_
