// Recovery: what the coordinator does when a running job loses a worker or
// a stage fails. The job restarts as a new attempt from its latest
// committed checkpoint (or from the start): its workers are stopped and
// freed, it goes back to PENDING, and the scheduler gives it the healthy
// idle workers there are (a spare takes the lost worker's place; with none,
// the planner re-plans for fewer), up to fault_tolerance.max_restarts.
//
// A stage's failure is attributed before the restart: the job's workers
// are asked for their status, and one that refuses (its process is gone)
// is declared DEAD, so the restart names the worker that died rather than
// the peer that noticed its connection close.
//
// Taking running jobs back after the coordinator restarted (their workers
// register again with a claim of the attempt they run) is in
// worker_lifecycle.h.
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "coordinator/core.h"

namespace aqueduct {

void CoordinatorCore::RestartOrFailLocked(Job& job, const std::string& reason) {
  if (job.state != v1::JOB_PLANNING && job.state != v1::JOB_RUNNING) return;
  job.probing = false;
  const int used = static_cast<int>(job.restarts.size());
  if (used >= job.max_restarts) {
    TransitionLocked(
        job, JobEvent::kFailed,
        job.max_restarts == 0
            ? reason
            : absl::StrCat(reason, " (after ", used,
                           " restart(s), the most "
                           "fault_tolerance.max_restarts allows)"));
    return;
  }
  const v1::CheckpointManifest* restore = RestorePoint(job);
  v1::RestartRecord record;
  record.set_attempt(job.attempt + 1);
  record.set_at_ms(ToUnixMillisOr0(clock_->WallNow()));
  record.set_reason(reason);
  record.set_rolled_back_to(restore != nullptr ? restore->version() : 0);
  record.set_step_at_failure(StatusOfLocked(job).step());
  std::vector<std::pair<std::string, std::string>> to_stop;
  for (const std::string& w : job.reserved) {
    auto status = registry_.Get(w);
    if (!status.ok() || status->job_id() != job.id) continue;
    if (status->state() != v1::WORKER_DEAD) {
      to_stop.emplace_back(w, status->info().address());
    }
    registry_.Release(w, job.id);
  }
  const int old_attempt = job.attempt;
  TransitionLocked(job, JobEvent::kRestart, reason);
  job.attempt = record.attempt();
  job.restarts.push_back(record);
  job.reserved.clear();
  job.stage_workers.clear();
  job.awaiting.clear();
  job.pending_files.clear();
  job.stepped_since_restart = false;
  job.vouched_version = 0;
  job.checkpoint_at = 0;
  job.checkpoint_asked = clock_->Now();
  job.pending_since = clock_->Now();
  job.ledger.Rollback(record.rolled_back_to());
  store_.DeletePrefix(absl::StrCat("jobs/", job.id, "/a", old_attempt, "/"));
  AQ_LOG_WARN("job {}: restart {} of {} from version {}: {}", job.id,
              record.attempt(), job.max_restarts, record.rolled_back_to(),
              reason);
  if (!to_stop.empty()) {
    StopWorkersAsync(std::move(to_stop), job.id,
                     absl::StrCat("the job restarts: ", reason), old_attempt);
  }
  ScheduleLocked();
}

void CoordinatorCore::ProbeLocked(Job& job, const std::string& error) {
  if (job.probing || IsFinal(job.state)) return;
  job.probing = true;
  const std::string id = job.id;
  const int attempt = job.attempt;
  absl::Status s = executor_->Submit(
      [this, id, attempt, error] { ProbeWorkers(id, attempt, error); });
  if (!s.ok()) RestartOrFailLocked(job, error);
}

void CoordinatorCore::ProbeWorkers(const std::string& job_id, int attempt,
                                   const std::string& error) {
  std::vector<std::pair<std::string, std::string>> workers;
  {
    absl::MutexLock lock(&mu_);
    Job* job = jobs_.Get(job_id);
    if (job == nullptr || job->attempt != attempt) return;
    for (const std::string& w : job->reserved) {
      auto status = registry_.Get(w);
      if (status.ok() && status->job_id() == job_id) {
        workers.emplace_back(w, status->info().address());
      } else if (!status.ok() || status->state() != v1::WORKER_DEAD) {
        // Not registered again since the coordinator restarted (or again
        // without its stage): the process that ran the stage is gone.
        return RestartOrFailLocked(
            *job, absl::StrCat("worker ", w, " (", WhereInJob(*job, w),
                               ") did not come back with its stage after the "
                               "coordinator restarted (",
                               error, ")"));
      }
    }
  }
  std::vector<std::pair<std::string, std::string>> dead;
  for (const auto& [id, address] : workers) {
    auto status = worker_clients_(address)->GetStatus(options_.probe_timeout);
    if (!status.ok() && (absl::IsUnavailable(status.status()) ||
                         absl::IsDeadlineExceeded(status.status()))) {
      // gRPC's message for a process that is gone is long; say it short.
      std::string why(status.status().message());
      if (absl::StrContains(why, "Connection refused")) {
        why = "connection refused";
      }
      dead.emplace_back(id, absl::StrCat("it does not answer (", why, ")"));
    }
  }
  absl::MutexLock lock(&mu_);
  for (const auto& [id, why] : dead) {
    workers_.HandleTransitions(registry_.MarkDead(id, why));
  }
  Job* job = jobs_.Get(job_id);
  if (job != nullptr && job->attempt == attempt) {
    RestartOrFailLocked(*job, error);  // Nobody died: the stage did.
  }
}

}  // namespace aqueduct
