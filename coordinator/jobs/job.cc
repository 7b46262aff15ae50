#include "coordinator/jobs/job.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "pipeline/policy.h"
#include "pipeline/spec.h"

namespace aqueduct {

int MaxRestarts(const JobSpec& spec) {
  const v1::FaultToleranceSpec& f = spec.fault_tolerance();
  return f.has_max_restarts() ? f.max_restarts() : 3;
}

int64_t LogEvery(const Job& job) {
  if (job.spec.log_every() > 0) return job.spec.log_every();
  if (job.total_steps <= 0) return 100;
  return std::max<int64_t>(10, (job.total_steps / 20 + 9) / 10 * 10);
}

const v1::CheckpointManifest* RestorePoint(const Job& job) {
  if (!job.checkpoints.empty()) return &job.checkpoints.rbegin()->second;
  if (job.resume.version() > 0) return &job.resume;
  return nullptr;
}

std::string WhereInJob(const Job& job, const std::string& worker_id) {
  for (size_t st = 0; st < job.stage_workers.size(); ++st) {
    for (size_t r = 0; r < job.stage_workers[st].size(); ++r) {
      if (job.stage_workers[st][r] == worker_id) {
        return absl::StrCat("stage ", st, ", replica ", r);
      }
    }
  }
  return "reserved for the job";
}

std::string DecidedSchedule(const Job& job) {
  if (job.has_plan && !job.plan.pipeline().schedule().empty()) {
    return job.plan.pipeline().schedule();
  }
  auto schedule = ParseSchedule(job.spec.pipeline().schedule());
  return ScheduleName(schedule.ok() ? *schedule : v1::SCHEDULE_UNSPECIFIED);
}

bool IsOutputStage(const Job& job, int stage) {
  return job.has_plan && stage == job.plan.stages_size() - 1;
}

JobStatus StatusOf(
    const Job& job,
    const std::function<WorkerState(const std::string&)>& worker_state) {
  if (job.restored) return job.snapshot;
  JobStatus s;
  s.set_job_id(job.id);
  s.set_name(job.spec.name());
  s.set_owner(job.owner);
  s.set_state(job.state);
  s.set_reason(job.reason);
  s.set_submitted_ms(ToUnixMillisOr0(job.submitted));
  s.set_started_ms(ToUnixMillisOr0(job.started));
  s.set_finished_ms(ToUnixMillisOr0(job.finished));
  s.set_total_steps(job.total_steps);
  s.set_workers(job.workers_needed);
  if (job.has_plan) *s.mutable_plan() = job.plan;
  s.set_schedule(DecidedSchedule(job));
  if (HasTestSplit(job.spec.data())) {
    s.set_eval_split(job.spec.data().has_text() ? "validation" : "test");
  }
  job.ledger.FillStatus(job.stage_workers, worker_state, &s);
  // Counters for metrics: samples trained, and tokens for text (each
  // sample's context of positions).
  s.set_samples(s.step() * job.spec.batch_size());
  if (job.spec.data().has_text()) {
    s.set_tokens(s.samples() * job.spec.data().text().context());
  }
  s.set_attempt(job.attempt);
  *s.mutable_restarts() = {job.restarts.begin(), job.restarts.end()};
  *s.mutable_tolerated_losses() = {job.tolerated_losses.begin(),
                                   job.tolerated_losses.end()};
  if (!job.checkpoints.empty()) {
    const v1::CheckpointManifest& latest = job.checkpoints.rbegin()->second;
    s.set_checkpoint_version(latest.version());
    s.set_checkpoint_path(latest.dir());
  }
  s.set_model_path(job.model_path);
  s.set_model_bytes(job.model_bytes);
  if (job.resume.version() > 0) s.set_resumed_from(job.resume.dir());
  return s;
}

v1::JournalRecord SubmissionRecord(const Job& job) {
  v1::JournalRecord record;
  v1::JobSubmitted* submitted = record.mutable_submitted();
  submitted->set_job_id(job.id);
  *submitted->mutable_spec() = job.spec;
  if (job.has_profile) *submitted->mutable_profile() = job.profile;
  submitted->set_submitted_ms(ToUnixMillisOr0(job.submitted));
  submitted->set_total_steps(job.total_steps);
  if (job.resume.version() > 0) *submitted->mutable_resume() = job.resume;
  submitted->set_owner(job.owner);
  return record;
}

v1::JournalRecord StartRecord(const Job& job) {
  v1::JournalRecord record;
  v1::JobStarted* started = record.mutable_started();
  started->set_job_id(job.id);
  started->set_attempt(job.attempt);
  *started->mutable_plan() = job.plan;
  for (const auto& replicas : job.stage_workers) {
    v1::StagePeers* stage = started->add_stages();
    for (const std::string& w : replicas) stage->add_worker_ids(w);
  }
  if (job.has_profile) *started->mutable_profile() = job.profile;
  if (!job.restarts.empty()) *started->mutable_restart() = job.restarts.back();
  started->set_started_ms(ToUnixMillisOr0(job.started));
  return record;
}

Job JobFromSubmission(const v1::JobSubmitted& sub, absl::Time now) {
  Job job;
  job.id = sub.job_id();
  job.owner = sub.owner();
  job.spec = sub.spec();
  job.has_profile = sub.has_profile();
  job.profile = sub.profile();
  job.submitted = absl::FromUnixMillis(sub.submitted_ms());
  job.pending_since = now;
  job.workers_needed = std::max(1, sub.spec().pipeline().workers());
  job.total_steps = sub.total_steps();
  job.ledger = JobLedger(sub.spec().batch_size());
  job.resume = sub.resume();
  job.max_restarts = MaxRestarts(sub.spec());
  return job;
}

Job FinishedJob(const v1::JobSubmitted& sub, const JobStatus& snapshot) {
  Job job;
  job.id = sub.job_id();
  job.owner = sub.owner();
  job.spec = sub.spec();
  job.restored = true;
  job.snapshot = snapshot;
  // Statuses journaled before owners were shown.
  if (job.snapshot.owner().empty()) job.snapshot.set_owner(job.owner);
  job.state = snapshot.state();
  job.reason = snapshot.reason();
  job.has_plan = snapshot.has_plan();
  if (job.has_plan) job.plan = snapshot.plan();
  job.model_path = snapshot.model_path();
  job.model_bytes = snapshot.model_bytes();
  return job;
}

Job AdoptedJob(Job job, const std::vector<v1::JobStarted>& starts,
               absl::Time now) {
  const v1::JobStarted& last = starts.back();
  for (const v1::JobStarted& s : starts) {
    if (s.has_restart()) job.restarts.push_back(s.restart());
  }
  job.state = v1::JOB_RUNNING;
  job.attempt = last.attempt();
  job.plan = last.plan();
  job.has_plan = true;
  if (last.has_profile()) {
    job.profile = last.profile();
    job.has_profile = true;
  }
  job.started = absl::FromUnixMillis(last.started_ms());
  for (const v1::StagePeers& stage : last.stages()) {
    job.stage_workers.emplace_back(stage.worker_ids().begin(),
                                   stage.worker_ids().end());
    for (const std::string& w : stage.worker_ids()) {
      job.reserved.push_back(w);
      job.awaiting.insert(w);
    }
  }
  job.adopted_at = now;
  job.checkpoint_asked = now;  // Timed checkpoints count anew.
  // The attempt's restart was an earlier coordinator's: its first step
  // may have been logged then, and timed from here it would count this
  // coordinator's downtime. It is not logged again.
  job.stepped_since_restart = true;
  return job;
}

}  // namespace aqueduct
