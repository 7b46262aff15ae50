// A job as the coordinator keeps it in its job table (job_table.h): plain
// data, and the pure functions that build one from the journal's records,
// journal it and show its status.
//
// Thread-safety: not thread-safe; plain values. The core's jobs live in its
// job table, under the core's mutex.
#ifndef AQUEDUCT_COORDINATOR_JOBS_JOB_H_
#define AQUEDUCT_COORDINATOR_JOBS_JOB_H_

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "coordinator/jobs/job_state.h"
#include "coordinator/jobs/ledger.h"
#include "proto/service_types.h"

namespace aqueduct {

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
  // Replicas this attempt lost and went on without (recovery.h
  // ToleratesLoss); cleared by a restart.
  std::vector<v1::ToleratedLoss> tolerated_losses;
  // The output stage committed a step since the latest restart.
  bool stepped_since_restart = false;
  // The training signal in the job's log: the last step whose loss, and
  // the last evaluation's step, it holds a line of.
  int64_t logged_step = 0;
  int64_t logged_eval = -1;
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

// fault_tolerance.max_restarts, 3 when the spec does not say.
int MaxRestarts(const JobSpec& spec);

// Every how many steps the job's log gets a loss line: the spec's
// log_every, else about 20 lines over the job (every 10 steps at least;
// every 100 while the total is not known).
int64_t LogEvery(const Job& job);

// The checkpoint an attempt starts from: the latest committed one, else the
// one the job resumed from; null for the start.
const v1::CheckpointManifest* RestorePoint(const Job& job);

// "stage s, replica r" of `worker_id` in `job`, or "reserved for the job".
std::string WhereInJob(const Job& job, const std::string& worker_id);

// Whether `stage` is the job's output stage (false before it has a plan).
bool IsOutputStage(const Job& job, int stage);

// The schedule the job runs: its plan's decision (what "auto" picked),
// else the spec's, in the spec's spelling.
std::string DecidedSchedule(const Job& job);

// The job's status as shown; `worker_state` gives each worker's state in
// the registry (WORKER_STATE_UNSPECIFIED for one it does not know).
JobStatus StatusOf(
    const Job& job,
    const std::function<WorkerState(const std::string&)>& worker_state);

// ---- The journal's records of a job, and jobs built from them ----
// The job's submission (JournalSubmission), and the start of its attempt.
v1::JournalRecord SubmissionRecord(const Job& job);
v1::JournalRecord StartRecord(const Job& job);
// A job as submitted, PENDING since `now` (monotonic).
Job JobFromSubmission(const v1::JobSubmitted& sub, absl::Time now);
// A finished job, shown with the status it ended with.
Job FinishedJob(const v1::JobSubmitted& sub, const JobStatus& snapshot);
// `job` (as submitted) RUNNING again with the plan and the workers of its
// latest attempt in `starts` (not empty), awaiting their registrations
// since `now` (monotonic).
Job AdoptedJob(Job job, const std::vector<v1::JobStarted>& starts,
               absl::Time now);

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_JOBS_JOB_H_
