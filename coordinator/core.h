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
// Thread-safety: thread-safe. One mutex guards everything; worker RPCs run
// on driver threads without it. Tick() must be called periodically (the
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
};

class CoordinatorCore {
 public:
  CoordinatorCore(const CoordinatorOptions& options, const Clock* clock,
                  WorkerClientFactory worker_clients);
  ~CoordinatorCore();  // Joins driver threads.

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
  struct StageLedger {
    int64_t committed_version = 0;
    std::vector<InFlight> in_flight;
    int64_t minibatches_done = 0;
    std::deque<double> step_ms;
    double utilization = 0;
    int64_t bytes_sent = 0, bytes_received = 0;
    StageProgress memory;  // The memory fields of the latest report.
    // For samples/s: (time, minibatches_done) of the first and last report.
    absl::Time first_report = absl::InfinitePast();
    int64_t first_done = 0;
    absl::Time last_report = absl::InfinitePast();
  };
  struct ReplicaKey {
    int stage, replica;
    bool operator<(const ReplicaKey& o) const {
      return stage != o.stage ? stage < o.stage : replica < o.replica;
    }
  };
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
    std::map<ReplicaKey, StageLedger> replicas;
    std::map<ReplicaKey, bool> finished_replicas;
    std::vector<LossPoint> loss_curve;
    // Shares of minibatch losses from replicated output stages: (sum,
    // samples) until the whole minibatch is in.
    std::map<int64_t, std::pair<double, int64_t>> loss_shares;
    int64_t loss_stride = 1;
    double loss = 0;
    double test_accuracy = 0, test_loss = 0;
    int64_t version = 0;
    // Trace events by (stage, replica), and the worker of each.
    std::map<ReplicaKey, v1::StageTrace> trace;
    int64_t trace_events = 0, trace_dropped = 0;
    // Restored from the journal: the final status, as it was reported.
    bool restored = false;
    JobStatus snapshot;
  };

  bool Final(JobState s) const {
    return s == v1::JOB_SUCCEEDED || s == v1::JOB_FAILED ||
           s == v1::JOB_CANCELLED;
  }
  JobStatus StatusOfLocked(const Job& job) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the job to a final state, frees its workers and asks them to stop.
  void FinishLocked(Job& job, JobState state, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HandleTransitionsLocked(const std::vector<WorkerTransition>& changes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ScheduleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Drive(std::string job_id);
  void StopWorkersAsync(
      std::vector<std::pair<std::string, std::string>> id_and_address,
      std::string job_id, std::string reason);
  void TrimFinishedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

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
  // Driver and stop threads still running (detached; the destructor waits).
  int active_threads_ ABSL_GUARDED_BY(mu_) = 0;
  std::string start_tag_;
  std::unique_ptr<JobJournal> journal_ ABSL_GUARDED_BY(mu_);
};

const char* JobStateName(JobState state);

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_CORE_H_
