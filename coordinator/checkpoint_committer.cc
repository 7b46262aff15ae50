#include "coordinator/checkpoint_committer.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/checkpoint.h"
#include "common/logging.h"
#include "coordinator/input_checks.h"
#include "pipeline/policy.h"
#include "pipeline/spec.h"

namespace aqueduct {

CheckpointCommitter::CheckpointCommitter(const CoordinatorOptions& options,
                                         const Clock* clock, absl::Mutex& mu,
                                         JobTable& jobs, JobLogStore& logs,
                                         JournalAccessor journal,
                                         BoundedExecutor& executor)
    : options_(options),
      clock_(clock),
      mu_(mu),
      jobs_(jobs),
      logs_(logs),
      journal_(std::move(journal)),
      executor_(executor) {}

v1::CheckpointManifest CheckpointCommitter::ManifestOf(
    const Job& job, int64_t version,
    const std::map<int, v1::CheckpointWritten>& files) const {
  v1::CheckpointManifest m;
  m.set_job_id(job.id);
  m.set_version(version);
  m.set_schedule(DecidedSchedule(job));
  *m.mutable_plan() = job.plan;
  m.set_total_steps(job.total_steps);
  m.set_num_layers(job.spec.model().layers_size());
  m.set_attempt(job.attempt);
  m.set_dir(files.begin()->second.dir());
  for (const auto& [stage, written] : files) *m.add_files() = written.file();
  m.set_committed_ms(ToUnixMillisOr0(clock_->WallNow()));
  return m;
}

void CheckpointCommitter::ApplyLocked(Job& job, const StageProgress& p) {
  mu_.AssertHeld();
  if (p.checkpoints_size() == 0 || !job.has_plan || p.replica() != 0) return;
  const int64_t committed =
      job.checkpoints.empty() ? 0 : job.checkpoints.rbegin()->first;
  for (const CheckpointWritten& w : p.checkpoints()) {
    if (w.version() > committed) job.pending_files[w.version()][p.stage()] = w;
  }
  const int stages = job.plan.stages_size();
  for (auto it = job.pending_files.begin(); it != job.pending_files.end();) {
    if (static_cast<int>(it->second.size()) < stages) {
      ++it;
      continue;
    }
    const v1::CheckpointManifest m = ManifestOf(job, it->first, it->second);
    const std::string job_dir =
        CheckpointJobDir(job.spec.checkpoint().dir(), job.id);
    const int keep = CheckpointsKept(job.spec);
    absl::Status s = executor_.Submit(
        [this, m, job_dir, keep] { Commit(m, job_dir, keep); });
    if (!s.ok()) AQ_LOG_WARN("job {}: {}", job.id, s.ToString());
    it = job.pending_files.erase(it);
  }
}

void CheckpointCommitter::RequestByTimeLocked(
    absl::Time now, const std::function<JobStatus(const Job&)>& status_of) {
  mu_.AssertHeld();
  for (auto& [id, job] : jobs_) {
    const double every = job.spec.checkpoint().every_seconds();
    if (every <= 0 || job.state != v1::JOB_RUNNING || !job.has_plan) continue;
    // Set when the job started running (or was adopted), then at each ask.
    if (now - job.checkpoint_asked < absl::Seconds(every)) continue;
    const JobStatus s = status_of(job);
    int64_t ahead = 0;  // The version of the stage furthest on.
    for (const v1::StageStatus& stage : s.stages()) {
      ahead = std::max(ahead, stage.committed_version());
    }
    // Far enough ahead that every stage hears of it first: two heartbeats
    // at the job's step rate, plus the pipeline's depth.
    const double steps_per_s =
        s.samples_per_second() / std::max<int64_t>(1, job.spec.batch_size());
    const double heartbeat_s =
        absl::ToDoubleSeconds(options_.registry.heartbeat_interval);
    const int64_t margin =
        static_cast<int64_t>(std::ceil(steps_per_s * 2 * heartbeat_s)) +
        job.plan.stages_size() + 1;
    job.checkpoint_asked = now;
    if (job.total_steps > 0 && ahead + margin >= job.total_steps) continue;
    job.checkpoint_at = ahead + margin;
    AQ_LOG_DEBUG("job {}: checkpoint asked at version {}", id,
                 job.checkpoint_at);
  }
}

std::optional<std::set<int64_t>> CheckpointCommitter::RecordLocked(
    const v1::CheckpointManifest& m, int keep_last) {
  Job* job = jobs_.Get(m.job_id());
  if (job == nullptr) return std::nullopt;
  job->checkpoints[m.version()] = m;
  while (static_cast<int>(job->checkpoints.size()) > keep_last) {
    job->checkpoints.erase(job->checkpoints.begin());
  }
  std::set<int64_t> keep;
  for (const auto& [version, manifest] : job->checkpoints) {
    keep.insert(version);
  }
  ++job->version;
  return keep;
}

void CheckpointCommitter::Commit(const v1::CheckpointManifest& m,
                                 const std::string& job_dir, int keep_last) {
  const PathRoots& roots = options_.checkpoint_roots;
  if (absl::Status s = CommitManifest(roots, m); !s.ok()) {
    AQ_LOG_WARN("job {}: checkpoint version {} not committed: {}", m.job_id(),
                m.version(), s.ToString());
    return;
  }
  if (const std::shared_ptr<JobJournal> journal = journal_()) {
    v1::JournalRecord record;
    *record.mutable_checkpoint() = m;
    if (absl::Status s = journal->Append(record); !s.ok()) {
      AQ_LOG_WARN(
          "job {}: checkpoint version {} is committed in {} but not "
          "journaled: {}",
          m.job_id(), m.version(), m.dir(), s.ToString());
    }
  }
  std::optional<std::set<int64_t>> keep;
  {
    absl::MutexLock lock(&mu_);
    keep = RecordLocked(m, keep_last);
  }
  if (!keep.has_value()) return;
  AQ_LOG_INFO("job {}: checkpoint version {} committed in {}", m.job_id(),
              m.version(), m.dir());
  logs_.AppendEvent(m.job_id(), absl::ToUnixMillis(clock_->WallNow()), "info",
                    absl::StrCat("checkpoint version ", m.version(),
                                 " committed in ", m.dir()));
  if (absl::Status s = PruneCheckpoints(roots, job_dir, *keep, m.version());
      !s.ok()) {
    AQ_LOG_WARN("job {}: removing old checkpoints: {}", m.job_id(),
                s.ToString());
  }
  if (absl::Status s = RemoveStrayFiles(roots, m); !s.ok()) {
    AQ_LOG_WARN("job {}: {}", m.job_id(), s.ToString());
  }
}

void CheckpointCommitter::RemoveUncommittedLocked(const Job& job) {
  mu_.AssertHeld();
  if (job.spec.checkpoint().dir().empty()) return;
  const std::string job_dir =
      CheckpointJobDir(job.spec.checkpoint().dir(), job.id);
  const std::string id = job.id;
  // After the commits queued before it, which it must keep.
  absl::Status s = executor_.Submit([this, job_dir, id] {
    std::set<int64_t> keep;
    {
      absl::MutexLock lock(&mu_);
      const Job* job = jobs_.Get(id);
      if (job == nullptr) return;
      for (const auto& [version, m] : job->checkpoints) keep.insert(version);
    }
    if (absl::Status s =
            PruneCheckpoints(options_.checkpoint_roots, job_dir, keep);
        !s.ok()) {
      AQ_LOG_WARN("job {}: removing its uncommitted checkpoints: {}", id,
                  s.ToString());
    }
  });
  if (!s.ok()) AQ_LOG_DEBUG("job {}: {}", id, s.ToString());
}

absl::StatusOr<v1::CheckpointManifest> CheckpointCommitter::ResolveResume(
    const JobSpec& spec, const std::string& resume) const {
  v1::CheckpointManifest m;
  bool found = false;
  {
    absl::MutexLock lock(&mu_);
    if (const Job* job = jobs_.Get(resume)) {
      const v1::CheckpointManifest* latest = RestorePoint(*job);
      if (latest == nullptr) {
        return absl::NotFoundError(absl::StrCat(
            "job ", Quoted(resume), " has no committed checkpoint"));
      }
      m = *latest;
      found = true;
    }
  }
  if (!found) {
    auto read = ReadManifest(options_.checkpoint_roots, resume);
    if (!read.ok()) {
      return absl::Status(
          read.status().code(),
          absl::StrCat("--resume '", resume,
                       "' is neither a job of this coordinator nor a "
                       "checkpoint: ",
                       read.status().message()));
    }
    m = *std::move(read);
  }
  if (absl::Status s = VerifyCheckpoint(options_.checkpoint_roots, m);
      !s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("the checkpoint ", m.dir(),
                                     " cannot be used: ", s.message()));
  }
  if (m.num_layers() != spec.model().layers_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the checkpoint ", m.dir(), " is of a model of ", m.num_layers(),
        " layers; the spec's model has ", spec.model().layers_size()));
  }
  return m;
}

absl::Status CheckpointCommitter::CheckDir(const JobSpec& spec) const {
  const std::string& dir = spec.checkpoint().dir();
  if (dir.empty()) return absl::OkStatus();
  // It may not exist yet: the first stage to write a file creates it.
  return options_.checkpoint_roots.ResolveForCreate(dir, "checkpoint.dir")
      .status();
}

}  // namespace aqueduct
