#include "coordinator/recovery.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace aqueduct {

Recovery::Recovery(const CoordinatorOptions& options, const Clock* clock,
                   absl::Mutex& mu, Registry& registry, JobTable& jobs,
                   KvStore& store, WorkerLifecycle& workers, JobEvents& events,
                   const WorkerClientFactory& worker_clients,
                   BoundedExecutor& executor)
    : options_(options),
      clock_(clock),
      mu_(mu),
      registry_(registry),
      jobs_(jobs),
      store_(store),
      workers_(workers),
      events_(events),
      worker_clients_(worker_clients),
      executor_(executor) {}

void Recovery::RestartOrFailLocked(Job& job, const std::string& reason) {
  mu_.AssertHeld();
  if (job.state != v1::JOB_PLANNING && job.state != v1::JOB_RUNNING) return;
  job.probing = false;
  const int used = static_cast<int>(job.restarts.size());
  if (used >= job.max_restarts) {
    events_.Transition(
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
  record.set_step_at_failure(events_.StatusOf(job).step());
  Workers to_stop;
  for (const std::string& w : job.reserved) {
    auto status = registry_.Get(w);
    if (!status.ok() || status->job_id() != job.id) continue;
    if (status->state() != v1::WORKER_DEAD) {
      to_stop.emplace_back(w, status->info().address());
    }
    registry_.Release(w, job.id);
  }
  const int old_attempt = job.attempt;
  events_.Transition(job, JobEvent::kRestart, reason);
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
    StopWorkers(std::move(to_stop), job.id,
                absl::StrCat("the job restarts: ", reason), old_attempt);
  }
  events_.Schedule();
}

void Recovery::ProbeLocked(Job& job, const std::string& error) {
  mu_.AssertHeld();
  if (job.probing || IsFinal(job.state)) return;
  job.probing = true;
  const std::string id = job.id;
  const int attempt = job.attempt;
  absl::Status s = executor_.Submit(
      [this, id, attempt, error] { ProbeWorkers(id, attempt, error); });
  if (!s.ok()) RestartOrFailLocked(job, error);
}

std::optional<Recovery::Workers> Recovery::ProbedLocked(
    Job& job, const std::string& error) {
  Workers workers;
  for (const std::string& w : job.reserved) {
    auto status = registry_.Get(w);
    if (status.ok() && status->job_id() == job.id) {
      workers.emplace_back(w, status->info().address());
    } else if (!status.ok() || status->state() != v1::WORKER_DEAD) {
      // Not registered again since the coordinator restarted (or again
      // without its stage): the process that ran the stage is gone.
      RestartOrFailLocked(
          job, absl::StrCat("worker ", w, " (", WhereInJob(job, w),
                            ") did not come back with its stage after the "
                            "coordinator restarted (",
                            error, ")"));
      return std::nullopt;
    }
  }
  return workers;
}

void Recovery::ProbeWorkers(const std::string& job_id, int attempt,
                            const std::string& error) {
  Workers workers;
  {
    absl::MutexLock lock(&mu_);
    Job* job = jobs_.Get(job_id);
    if (job == nullptr || job->attempt != attempt) return;
    std::optional<Workers> probed = ProbedLocked(*job, error);
    if (!probed.has_value()) return;
    workers = *std::move(probed);
  }
  Workers dead;  // (id, why)
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

void Recovery::ReleaseWorkersLocked(Job& job, bool stop,
                                    const std::string& reason) {
  mu_.AssertHeld();
  Workers to_stop;
  for (const std::string& w : job.reserved) {
    auto status = registry_.Get(w);
    if (status.ok() && status->job_id() == job.id) {
      if (stop) to_stop.emplace_back(w, status->info().address());
      registry_.Release(w, job.id);
    }
  }
  if (to_stop.empty()) return;
  StopWorkers(std::move(to_stop), job.id,
              absl::StrCat("job ", JobStateName(job.state), ": ", reason));
}

void Recovery::StopWorkers(Workers workers, std::string job_id,
                           std::string reason, std::optional<int> attempt) {
  auto stop = [this, workers = std::move(workers), job_id,
               reason = std::move(reason), attempt] {
    for (const auto& [id, address] : workers) {
      std::unique_ptr<WorkerClient> client = worker_clients_(address);
      const absl::Status s =
          client->StopJob(job_id, reason, options_.worker_rpc_timeout, attempt);
      if (!s.ok()) {
        AQ_LOG_WARN("stopping job {} on worker {}: {}", job_id, id,
                    s.ToString());
      }
    }
  };
  if (absl::Status s = executor_.Submit(std::move(stop)); !s.ok()) {
    // The workers learn it from their next heartbeat instead.
    AQ_LOG_WARN("stopping job {}: {}", job_id, s.ToString());
  }
}

}  // namespace aqueduct
