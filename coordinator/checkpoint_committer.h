// The checkpoint committer (issue 22): the coordinator's half of the
// two-phase commit (docs/protocol.md, "Checkpoints"). Each stage's replica
// 0 writes its file durably and reports it; once every stage of the
// current attempt has reported its file of a version, the committer's
// executor (one thread, in order) writes the version's manifest (the
// commit point: an atomic rename), journals it, records it in the job, and
// removes the versions beyond keep_last. A version whose files never all
// arrive (a worker died while writing, a full disk) is never committed,
// and is removed with the older versions or when the job ends. Also here:
// timed checkpoints (checkpoint.every_seconds), and the checks of a job's
// checkpoint.dir and of --resume.
//
// Every directory and manifest touched here lies under the coordinator's
// --checkpoint_root (options.checkpoint_roots).
//
// Thread-safety: thread-safe. The ...Locked methods require the core's
// mutex (`mu`, asserted); the commits on the executor take it to record.
#ifndef AQUEDUCT_COORDINATOR_CHECKPOINT_COMMITTER_H_
#define AQUEDUCT_COORDINATOR_CHECKPOINT_COMMITTER_H_

#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/executor.h"
#include "coordinator/job_events.h"
#include "coordinator/job_logs.h"
#include "coordinator/job_table.h"
#include "coordinator/options.h"

namespace aqueduct {

class CheckpointCommitter {
 public:
  // `mu` guards `jobs` (the core's mutex); `executor` runs the commits one
  // at a time, in order, and is joined before this is destroyed. Keeps the
  // references; all must outlive it.
  CheckpointCommitter(const CoordinatorOptions& options, const Clock* clock,
                      absl::Mutex& mu, JobTable& jobs, JobLogStore& logs,
                      JournalAccessor journal, BoundedExecutor& executor);

  // Files a stage reported durable in `p`; queues the commit of each
  // version whose every stage's file is in.
  void ApplyLocked(Job& job, const StageProgress& p);
  // checkpoint.every_seconds: picks the next checkpoint version of the
  // running jobs whose interval has passed at `now`, far enough ahead of
  // their furthest stage (in `status_of` the job's status) that every
  // stage hears of it first.
  void RequestByTimeLocked(
      absl::Time now, const std::function<JobStatus(const Job&)>& status_of);
  // The job ended: removes its version directories that were never
  // committed (on the executor, after the commits queued before).
  void RemoveUncommittedLocked(const Job& job);

  // PERMISSION_DENIED naming checkpoint.dir when the spec's checkpoint
  // directory is outside options.checkpoint_roots.
  absl::Status CheckDir(const JobSpec& spec) const;
  // The checkpoint `resume` names for `spec`: a job of this coordinator
  // (its latest committed checkpoint, else the one it resumed from;
  // NOT_FOUND when it has none), else a version directory or its
  // manifest.json; verified (NOT_FOUND, DATA_LOSS naming it) and of the
  // spec's model (INVALID_ARGUMENT). Takes the core's mutex.
  absl::StatusOr<v1::CheckpointManifest> ResolveResume(
      const JobSpec& spec, const std::string& resume) const
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // On the executor: writes the manifest, journals it, records it, then
  // prunes old versions (keep_last) and stray files.
  void Commit(const v1::CheckpointManifest& m, const std::string& job_dir,
              int keep_last) ABSL_LOCKS_EXCLUDED(mu_);
  // Records `m` in its job and keeps the newest `keep_last`: the versions
  // kept, or nullopt when the job is gone.
  std::optional<std::set<int64_t>> RecordLocked(const v1::CheckpointManifest& m,
                                                int keep_last)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The manifest of version `files`' version of `job`, committed now.
  v1::CheckpointManifest ManifestOf(
      const Job& job, int64_t version,
      const std::map<int, v1::CheckpointWritten>& files) const;

  const CoordinatorOptions& options_;
  const Clock* clock_;
  absl::Mutex& mu_;
  JobTable& jobs_ ABSL_GUARDED_BY(mu_);
  JobLogStore& logs_;
  const JournalAccessor journal_;
  BoundedExecutor& executor_;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_CHECKPOINT_COMMITTER_H_
