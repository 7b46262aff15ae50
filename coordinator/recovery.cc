#include "coordinator/recovery.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace aqueduct {

LossTolerance ToleratesLoss(const Job& job, const std::string& worker_id) {
  LossTolerance t;
  const v1::DataParallelSpec& d = job.spec.data_parallel();
  if (job.state != v1::JOB_RUNNING) {
    t.why_not = "the job is not RUNNING";
  } else if (d.mode() != "parameter_server" || d.consistency() != "async") {
    t.why_not = "the job is not under the \"async\" parameter server";
  } else if (job.stage_workers.size() != 1 || !job.has_plan ||
             job.plan.stages_size() != 1) {
    t.why_not = "the job is not one stage (other stages wait on a replica)";
  } else if (job.plan.stages(0).tensor_parallel() > 1) {
    t.why_not = "the stage is tensor-parallel";
  }
  if (!t.why_not.empty()) return t;
  const std::vector<std::string>& replicas = job.stage_workers[0];
  const auto it = std::find(replicas.begin(), replicas.end(), worker_id);
  if (it == replicas.end()) {
    t.why_not = "the worker runs no replica of the job";
    return t;
  }
  for (const v1::ToleratedLoss& lost : job.tolerated_losses) {
    if (lost.worker_id() == worker_id) {
      t.why_not = "the worker is lost already";
      return t;
    }
  }
  const int replica = static_cast<int>(it - replicas.begin());
  const int shards =
      d.shards() > 0 ? d.shards() : static_cast<int>(replicas.size());
  if (replica < shards) {
    t.why_not = absl::StrCat("replica ", replica, " hosts parameter shard ",
                             replica, " of ", shards);
    return t;
  }
  t.tolerated = true;
  t.stage = 0;
  t.replica = replica;
  return t;
}

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

bool Recovery::TolerateLossLocked(Job& job, const std::string& worker_id,
                                  const std::string& reason) {
  mu_.AssertHeld();
  const LossTolerance t = ToleratesLoss(job, worker_id);
  if (!t.tolerated) return false;
  v1::ToleratedLoss& lost = job.tolerated_losses.emplace_back();
  lost.set_worker_id(worker_id);
  lost.set_stage(t.stage);
  lost.set_replica(t.replica);
  lost.set_at_ms(ToUnixMillisOr0(clock_->WallNow()));
  lost.set_step(events_.StatusOf(job).step());
  lost.set_reason(reason);
  const int replicas = static_cast<int>(job.stage_workers[t.stage].size());
  job.ledger.LoseReplica(t.stage, t.replica,
                         job.spec.batch_size() / std::max(replicas, 1));
  job.awaiting.erase(worker_id);
  job.reserved.erase(
      std::remove(job.reserved.begin(), job.reserved.end(), worker_id),
      job.reserved.end());
  ++job.version;
  AQ_LOG_WARN(
      "job {}: worker {} (stage {}, replica {}) lost at step {}, tolerated: "
      "it hosts no parameter shard of the async job, which goes on with "
      "{} replica(s): {}",
      job.id, worker_id, t.stage, t.replica, lost.step(),
      replicas - static_cast<int>(job.tolerated_losses.size()), reason);
  auto status = registry_.Get(worker_id);
  if (status.ok() && status->job_id() == job.id) {
    const bool alive = status->state() != v1::WORKER_DEAD;
    const std::string address = status->info().address();
    registry_.Release(worker_id, job.id);
    if (alive) {  // Its stage failed: the rest of it stops.
      StopWorkers({{worker_id, address}}, job.id,
                  absl::StrCat("the job goes on without it: ", reason),
                  job.attempt);
    }
  }
  size_t total = 0;
  for (const auto& workers : job.stage_workers) total += workers.size();
  if (job.ledger.finished() + job.tolerated_losses.size() >= total) {
    events_.Transition(job, JobEvent::kAllReplicasFinished, "");
  }
  return true;
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
