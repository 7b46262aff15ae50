#include "coordinator/worker_lifecycle.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status.h"
#include "coordinator/input_checks.h"
#include "coordinator/kv_store.h"

namespace aqueduct {

WorkerLifecycle::WorkerLifecycle(const CoordinatorOptions& options,
                                 Registry& registry, JobTable& jobs,
                                 JobEvents& events)
    : options_(options), registry_(registry), jobs_(jobs), events_(events) {}

absl::Status WorkerLifecycle::Register(const WorkerInfo& info,
                                       const v1::StageClaim* running) {
  const bool claims = running != nullptr && !running->job_id().empty();
  if (claims) {
    RETURN_IF_ERROR(CheckName("running.job_id", running->job_id(),
                              KvStore::kMaxJobIdBytes));
  }
  std::vector<WorkerTransition> changes;
  absl::Status s = registry_.Register(info, &changes);
  HandleTransitions(changes);
  if (!s.ok()) return s;
  AQ_LOG_INFO("worker {} registered (incarnation {}, {}, {})", info.worker_id(),
              info.incarnation(), info.address(), info.device().name());
  if (claims) AdoptClaim(info, *running);
  ForgetAwaited(info.worker_id());
  events_.Schedule();
  return s;
}

absl::StatusOr<WorkerLifecycle::Reply> WorkerLifecycle::Heartbeat(
    const std::string& worker_id, const std::string& incarnation,
    const std::string& job_id, int attempt) {
  if (!job_id.empty()) {
    RETURN_IF_ERROR(CheckName("job_id", job_id, KvStore::kMaxJobIdBytes));
  }
  WorkerState before = v1::WORKER_HEALTHY;
  RETURN_IF_ERROR(registry_.Heartbeat(worker_id, incarnation, &before));
  if (before == v1::WORKER_UNREACHABLE) {
    AQ_LOG_INFO(
        "worker {} (incarnation {}) UNREACHABLE -> HEALTHY: heard from "
        "again",
        worker_id, incarnation);
  }
  Reply reply;
  if (job_id.empty()) return reply;
  const Job* job = jobs_.Get(job_id);
  auto status = registry_.Get(worker_id);
  // A job that is over, that the worker no longer holds, or an attempt
  // this coordinator never started.
  if (job == nullptr || IsFinal(job->state) ||
      (status.ok() && status->job_id() != job_id) || attempt > job->attempt) {
    reply.stop_jobs.push_back(job_id);
  } else {
    reply.checkpoint_at = job->checkpoint_at;
  }
  return reply;
}

absl::Status WorkerLifecycle::Deregister(const std::string& worker_id,
                                         const std::string& incarnation) {
  std::vector<WorkerTransition> changes;
  absl::Status s = registry_.Deregister(worker_id, incarnation, &changes);
  HandleTransitions(changes);
  if (s.ok()) AQ_LOG_INFO("worker {} deregistered", worker_id);
  return s;
}

void WorkerLifecycle::HandleTransitions(
    const std::vector<WorkerTransition>& changes) {
  for (const WorkerTransition& c : changes) {
    AQ_LOG_INFO("worker {} (incarnation {}) {} -> {}: {}", c.worker_id,
                c.incarnation, WorkerStateName(c.from), WorkerStateName(c.to),
                c.detail);
    if (c.job_id.empty()) continue;
    if (c.to != v1::WORKER_DEAD && c.to != v1::WORKER_LEFT &&
        c.to != v1::WORKER_FENCED) {
      continue;
    }
    Job* job = jobs_.Get(c.job_id);
    if (job == nullptr || IsFinal(job->state)) continue;
    job->awaiting.erase(c.worker_id);
    events_.WorkerLost(*job, c.worker_id,
                       absl::StrCat("worker ", c.worker_id, " (",
                                    WhereInJob(*job, c.worker_id), ") is ",
                                    WorkerStateName(c.to), ": ", c.detail));
  }
}

void WorkerLifecycle::Tick(absl::Time now) {
  HandleTransitions(registry_.Tick());
  Forget(registry_.ForgetFinal());
  CheckAdoptions(now);
}

void WorkerLifecycle::Forget(const std::vector<WorkerStatus>& forgotten) {
  for (const WorkerStatus& w : forgotten) {
    AQ_LOG_INFO("worker {} forgotten: {} for {}", w.info().worker_id(),
                WorkerStateName(w.state()),
                absl::FormatDuration(options_.registry.forget_after));
    // A worker leaves its job when it ends (the transition restarts or
    // fails the job), so none should still hold one; if one did, the job
    // must not wait for a worker nobody knows any more.
    Job* job = w.job_id().empty() ? nullptr : jobs_.Get(w.job_id());
    if (job == nullptr || IsFinal(job->state)) continue;
    events_.RestartOrFail(
        *job, absl::StrCat("worker ", w.info().worker_id(), " (",
                           WhereInJob(*job, w.info().worker_id()),
                           ") is gone: ", WorkerStateName(w.state()),
                           " and forgotten"));
  }
}

void WorkerLifecycle::AdoptClaim(const WorkerInfo& info,
                                 const v1::StageClaim& claim) {
  Job* found = jobs_.Get(claim.job_id());
  if (found == nullptr || IsFinal(found->state)) return;
  Job& job = *found;
  const auto& stages = job.stage_workers;
  if (claim.attempt() != job.attempt || claim.stage() < 0 ||
      claim.stage() >= static_cast<int>(stages.size()) || claim.replica() < 0 ||
      claim.replica() >= static_cast<int>(stages[claim.stage()].size()) ||
      stages[claim.stage()][claim.replica()] != info.worker_id()) {
    AQ_LOG_WARN(
        "worker {} claims stage {} of attempt {} of job {}, which is "
        "not its assignment; it will be told to stop",
        info.worker_id(), claim.stage(), claim.attempt(), job.id);
    return;
  }
  registry_.Assign(info.worker_id(), job.id, claim.stage(), claim.replica());
  job.awaiting.erase(info.worker_id());
  AQ_LOG_INFO("job {}: worker {} is back with stage {} ({} still awaited)",
              job.id, info.worker_id(), claim.stage(), job.awaiting.size());
  ++job.version;
}

void WorkerLifecycle::ForgetAwaited(const std::string& worker_id) {
  // Ids first: failing a job trims the table being iterated over.
  std::vector<std::string> lost;
  for (auto& [id, job] : jobs_) {
    if (job.awaiting.erase(worker_id) > 0 && !IsFinal(job.state)) {
      lost.push_back(id);
    }
  }
  for (const std::string& id : lost) {
    Job* job = jobs_.Get(id);
    if (job == nullptr || IsFinal(job->state)) continue;
    // Awaited, and registered without (a claim to) its stage: a new process
    // of that worker (the one that ran the stage died). The job cannot go on
    // as it was.
    events_.RestartOrFail(
        *job,
        absl::StrCat("worker ", worker_id, " (", WhereInJob(*job, worker_id),
                     ") came back without its stage: its process was "
                     "restarted while the coordinator was down"));
  }
}

void WorkerLifecycle::CheckAdoptions(absl::Time now) {
  const absl::Duration limit =
      options_.adoption_grace + options_.registry.dead_after;
  // Ids first: failing a job trims the table, which order() lists.
  std::vector<std::string> overdue;
  for (const std::string& id : jobs_.order()) {
    const Job& job = jobs_.At(id);
    if (!job.awaiting.empty() && !IsFinal(job.state) &&
        now - job.adopted_at >= limit) {
      overdue.push_back(id);
    }
  }
  for (const std::string& id : overdue) {
    Job* job = jobs_.Get(id);
    if (job == nullptr || job->awaiting.empty() || IsFinal(job->state)) {
      continue;
    }
    const std::string missing = absl::StrJoin(job->awaiting, ", ");
    job->awaiting.clear();
    events_.RestartOrFail(
        *job, absl::StrFormat("worker(s) %s did not register again within "
                              "%.1f s of the coordinator's restart",
                              missing, absl::ToDoubleSeconds(limit)));
  }
}

}  // namespace aqueduct
