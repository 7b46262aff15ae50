#include "coordinator/core.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/status.h"
#include "coordinator/planner/plan.h"
#include "coordinator/planner/profile_graph.h"
#include "pipeline/policy.h"
#include "pipeline/spec.h"

namespace aqueduct {

CoordinatorCore::CoordinatorCore(const CoordinatorOptions& options,
                                 const Clock* clock,
                                 WorkerClientFactory worker_clients)
    : options_(options),
      clock_(clock),
      worker_clients_(std::move(worker_clients)),
      registry_(options.registry, clock),
      start_tag_(absl::StrFormat("%x", absl::ToUnixSeconds(clock->Now()))),
      executor_(std::make_unique<BoundedExecutor>(
          "the job driver", options.driver_threads, options.driver_queue)) {}

CoordinatorCore::~CoordinatorCore() {
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
  }
  executor_.reset();  // Drivers see shutting_down_ and end; joined here.
}

// ------------------------------------------------------------------ Workers

absl::Status CoordinatorCore::RegisterWorker(const WorkerInfo& info) {
  absl::MutexLock lock(&mu_);
  std::vector<WorkerTransition> changes;
  absl::Status s = registry_.Register(info, &changes);
  HandleTransitionsLocked(changes);
  if (s.ok()) {
    AQ_LOG_INFO("worker {} registered (incarnation {}, {}, {})",
                info.worker_id(), info.incarnation(), info.address(),
                info.device().name());
    ScheduleLocked();
  }
  return s;
}

absl::Status CoordinatorCore::Heartbeat(const std::string& worker_id,
                                        const std::string& incarnation,
                                        const std::string& job_id,
                                        std::vector<std::string>* stop_jobs) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = registry_.Heartbeat(worker_id, incarnation); !s.ok()) {
    return s;
  }
  if (!job_id.empty()) {
    auto it = jobs_.find(job_id);
    auto status = registry_.Get(worker_id);
    if (it == jobs_.end() || IsFinal(it->second.state) ||
        (status.ok() && status->job_id() != job_id)) {
      stop_jobs->push_back(job_id);
    }
  }
  return absl::OkStatus();
}

absl::Status CoordinatorCore::DeregisterWorker(const std::string& worker_id,
                                               const std::string& incarnation) {
  absl::MutexLock lock(&mu_);
  std::vector<WorkerTransition> changes;
  absl::Status s = registry_.Deregister(worker_id, incarnation, &changes);
  HandleTransitionsLocked(changes);
  if (s.ok()) AQ_LOG_INFO("worker {} deregistered", worker_id);
  return s;
}

absl::Status CoordinatorCore::ReportProgress(
    const std::string& worker_id, const std::string& incarnation,
    const std::vector<StageProgress>& stages) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = registry_.CheckLive(worker_id, incarnation); !s.ok()) {
    return s;
  }
  auto worker = registry_.Get(worker_id);
  if (!worker.ok()) return worker.status();
  const absl::Time now = clock_->Now();
  for (const StageProgress& p : stages) {
    auto it = jobs_.find(p.job_id());
    if (it == jobs_.end()) {
      return absl::NotFoundError(
          absl::StrCat("job '", p.job_id(), "' does not exist"));
    }
    Job& job = it->second;
    if (worker->job_id() != p.job_id() || worker->stage() != p.stage() ||
        worker->replica() != p.replica()) {
      return absl::FailedPreconditionError(
          absl::StrCat("worker ", worker_id, " reports progress for stage ",
                       p.stage(), " replica ", p.replica(), " of job ",
                       p.job_id(), ", which is not its assignment"));
    }
    if (IsFinal(job.state)) continue;
    ApplyProgressLocked(job, worker_id, p, now);
  }
  return absl::OkStatus();
}

void CoordinatorCore::ApplyProgressLocked(Job& job,
                                          const std::string& worker_id,
                                          const StageProgress& p,
                                          absl::Time now) {
  job.ledger.Apply(worker_id, p, now);
  if (job.total_steps == 0 && p.total_steps() > 0) {
    job.total_steps = p.total_steps();
  }
  ++job.version;
  if (!p.error().empty()) {
    FinishLocked(
        job, JobEvent::kFailed,
        absl::StrCat("stage ", p.stage(), " replica ", p.replica(),
                     " on worker ", worker_id, " failed: ", p.error()));
    return;
  }
  if (!p.finished()) return;
  const bool output = job.has_plan && p.stage() == job.plan.stages_size() - 1;
  size_t total = 0;
  for (const auto& workers : job.stage_workers) total += workers.size();
  if (job.ledger.MarkFinished(p, output) == total) {
    FinishLocked(job, JobEvent::kAllReplicasFinished, "");
  }
}

// ------------------------------------------------------------------ Jobs

absl::StatusOr<std::string> CoordinatorCore::SubmitJob(
    const JobSpec& spec, const ModelProfile* profile) {
  auto valid = CheckJobSpec(spec);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid job spec: ", valid.status().message()));
  }
  if (profile != nullptr) {
    auto graph = ProfileGraph::FromProto(*profile);
    if (!graph.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid profile: ", graph.status().message()));
    }
  }
  // Known here when the spec says it (synthetic data, or max_steps alone);
  // otherwise the workers, which hold the data, report it.
  int64_t total = 0;
  if (valid->train_samples >= 0) {
    ASSIGN_OR_RETURN(total, TotalSteps(spec, valid->train_samples));
  } else if (spec.epochs() == 0) {
    total = spec.max_steps();
  }
  const PipelinePolicy& p = valid->pipeline;
  Job job;
  {
    absl::MutexLock lock(&mu_);
    job.id = absl::StrCat("job-", start_tag_, "-", next_job_++);
  }
  job.spec = spec;
  if (profile != nullptr) {
    job.has_profile = true;
    job.profile = *profile;
  }
  job.submitted = clock_->Now();
  job.workers_needed = p.workers;
  job.total_steps = total;
  job.ledger = JobLedger(spec.batch_size());
  const std::string id = job.id;
  // Durable before the client hears of it, without holding the lock.
  if (journal_ != nullptr) {
    v1::JournalRecord record;
    v1::JobSubmitted* submitted = record.mutable_submitted();
    submitted->set_job_id(id);
    *submitted->mutable_spec() = spec;
    if (profile != nullptr) *submitted->mutable_profile() = *profile;
    submitted->set_submitted_ms(ToUnixMillisOr0(job.submitted));
    submitted->set_total_steps(total);
    if (absl::Status s = journal_->Append(record); !s.ok()) {
      return absl::UnavailableError(absl::StrCat(
          "the job was not accepted: cannot record it: ", s.message()));
    }
  }
  absl::MutexLock lock(&mu_);
  jobs_.emplace(id, std::move(job));
  job_order_.push_back(id);
  AQ_LOG_INFO("job {} submitted: {} on {} worker(s), {} steps", id, spec.name(),
              p.workers, total);
  ScheduleLocked();
  return id;
}

absl::StatusOr<JobStatus> CoordinatorCore::GetJob(
    const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(
        absl::StrCat("job '", job_id, "' does not exist"));
  }
  return StatusOfLocked(it->second);
}

std::vector<JobStatus> CoordinatorCore::ListJobs() const {
  absl::MutexLock lock(&mu_);
  std::vector<JobStatus> out;
  for (const std::string& id : job_order_) {
    auto it = jobs_.find(id);
    if (it != jobs_.end()) out.push_back(StatusOfLocked(it->second));
  }
  return out;
}

absl::StatusOr<JobState> CoordinatorCore::CancelJob(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(
        absl::StrCat("job '", job_id, "' does not exist"));
  }
  if (!IsFinal(it->second.state)) {
    FinishLocked(it->second, JobEvent::kCancelled, "cancelled by a client");
  }
  return it->second.state;
}

absl::StatusOr<PartitionPlan> CoordinatorCore::GetPlan(
    const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(
        absl::StrCat("job '", job_id, "' does not exist"));
  }
  if (!it->second.has_plan) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " has no plan yet (it is ",
                     JobStateName(it->second.state), ")"));
  }
  return it->second.plan;
}

namespace {

// A journal's records by job: each submission, each final status, and the
// order of submission.
struct JournalIndex {
  std::map<std::string, v1::JobSubmitted> submitted;
  std::map<std::string, JobStatus> finished;
  std::vector<std::string> order;
};

JournalIndex IndexJournal(std::vector<v1::JournalRecord>& records) {
  JournalIndex index;
  for (v1::JournalRecord& r : records) {
    if (r.has_submitted()) {
      const std::string id = r.submitted().job_id();
      if (index.submitted.count(id) == 0) index.order.push_back(id);
      index.submitted[id] = std::move(*r.mutable_submitted());
    } else if (r.has_finished()) {
      index.finished[r.finished().job_id()] = std::move(*r.mutable_finished());
    }
  }
  return index;
}

// The status of a job that was pending or running when the previous
// coordinator stopped.
JobStatus InterruptedStatus(const v1::JobSubmitted& sub, absl::Time now) {
  JobStatus s;
  s.set_job_id(sub.job_id());
  s.set_name(sub.spec().name());
  s.set_state(v1::JOB_FAILED);
  s.set_reason(
      "the coordinator restarted before the job finished; submit it again");
  s.set_submitted_ms(sub.submitted_ms());
  s.set_finished_ms(ToUnixMillisOr0(now));
  s.set_total_steps(sub.total_steps());
  s.set_workers(std::max(1, sub.spec().pipeline().workers()));
  return s;
}

}  // namespace

void CoordinatorCore::RestoreJobLocked(const v1::JobSubmitted& sub,
                                       const JobStatus& snapshot) {
  Job job;
  job.id = sub.job_id();
  job.spec = sub.spec();
  job.restored = true;
  job.snapshot = snapshot;
  job.state = snapshot.state();
  job.reason = snapshot.reason();
  job.has_plan = snapshot.has_plan();
  if (job.has_plan) job.plan = snapshot.plan();
  // Ids of this start must not repeat a restored one.
  const std::string prefix = absl::StrCat("job-", start_tag_, "-");
  int64_t n = 0;
  if (job.id.rfind(prefix, 0) == 0 &&
      absl::SimpleAtoi(job.id.substr(prefix.size()), &n)) {
    next_job_ = std::max(next_job_, n + 1);
  }
  job_order_.push_back(job.id);
  jobs_.emplace(job.id, std::move(job));
}

absl::Status CoordinatorCore::OpenJournal(const std::string& path) {
  ASSIGN_OR_RETURN(JournalContents contents, JobJournal::Read(path));
  if (contents.ignored_bytes > 0) {
    AQ_LOG_WARN(
        "journal {}: the record at byte {} is torn or corrupt; ignored the "
        "{} bytes from there",
        path, contents.ignored_at, contents.ignored_bytes);
  }
  JournalIndex index = IndexJournal(contents.records);
  std::vector<v1::JournalRecord> kept;
  int restarted = 0;
  size_t restored = 0;
  {
    absl::MutexLock lock(&mu_);
    for (const std::string& id : index.order) {
      if (jobs_.count(id) > 0) continue;
      auto done = index.finished.find(id);
      restarted += done == index.finished.end();
      RestoreJobLocked(
          index.submitted[id],
          done != index.finished.end()
              ? done->second
              : InterruptedStatus(index.submitted[id], clock_->Now()));
    }
    TrimFinishedLocked();
    kept = CompactionLocked(index.submitted);
    restored = jobs_.size();
  }
  ASSIGN_OR_RETURN(journal_, JobJournal::Create(path, kept));
  AQ_LOG_INFO(
      "journal {}: restored {} job(s); {} had not finished and are FAILED",
      path, restored, restarted);
  return absl::OkStatus();
}

std::vector<v1::JournalRecord> CoordinatorCore::CompactionLocked(
    const std::map<std::string, v1::JobSubmitted>& submitted) const {
  // The submissions and final statuses of the jobs kept.
  std::vector<v1::JournalRecord> kept;
  for (const std::string& id : job_order_) {
    const Job& job = jobs_.at(id);
    auto sub = submitted.find(id);
    if (!job.restored || sub == submitted.end()) continue;
    v1::JournalRecord r;
    *r.mutable_submitted() = sub->second;
    kept.push_back(std::move(r));
    v1::JournalRecord fin;
    *fin.mutable_finished() = job.snapshot;
    kept.push_back(std::move(fin));
  }
  return kept;
}

absl::StatusOr<v1::GetTraceResponse> CoordinatorCore::GetTrace(
    const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(
        absl::StrCat("job '", job_id, "' does not exist"));
  }
  return it->second.ledger.Trace();
}

std::vector<WorkerStatus> CoordinatorCore::ListWorkers() const {
  absl::MutexLock lock(&mu_);
  return registry_.List();
}

absl::StatusOr<std::pair<JobStatus, int64_t>> CoordinatorCore::WaitForJob(
    const std::string& job_id, int64_t seen_version, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto changed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = jobs_.find(job_id);
    return it == jobs_.end() || it->second.version != seen_version ||
           shutting_down_;
  };
  mu_.AwaitWithDeadline(absl::Condition(&changed), deadline);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(
        absl::StrCat("job '", job_id, "' does not exist"));
  }
  return std::make_pair(StatusOfLocked(it->second), it->second.version);
}

JobStatus CoordinatorCore::StatusOfLocked(const Job& job) const {
  if (job.restored) return job.snapshot;
  JobStatus s;
  s.set_job_id(job.id);
  s.set_name(job.spec.name());
  s.set_state(job.state);
  s.set_reason(job.reason);
  s.set_submitted_ms(ToUnixMillisOr0(job.submitted));
  s.set_started_ms(ToUnixMillisOr0(job.started));
  s.set_finished_ms(ToUnixMillisOr0(job.finished));
  s.set_total_steps(job.total_steps);
  s.set_workers(job.workers_needed);
  if (job.has_plan) *s.mutable_plan() = job.plan;
  auto schedule = ParseSchedule(job.spec.pipeline().schedule());
  s.set_schedule(
      ScheduleName(schedule.ok() ? *schedule : v1::SCHEDULE_UNSPECIFIED));
  auto state_of =
      [this](const std::string& worker_id) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        auto worker = registry_.Get(worker_id);
        return worker.ok() ? worker->state() : v1::WORKER_STATE_UNSPECIFIED;
      };
  job.ledger.FillStatus(job.stage_workers, state_of, &s);
  return s;
}

bool CoordinatorCore::TransitionLocked(Job& job, JobEvent event,
                                       const std::string& reason) {
  auto t = NextJobState(job.state, event);
  if (!t.ok()) {
    AQ_LOG_DEBUG("job {}: {}", job.id, t.status().ToString());
    return false;
  }
  job.state = t->to;
  ++job.version;
  if (t->to == v1::JOB_RUNNING) job.started = clock_->Now();
  if (!t->finished) return true;
  job.reason = reason;
  job.finished = clock_->Now();
  if (journal_ != nullptr) {
    v1::JournalRecord record;
    *record.mutable_finished() = StatusOfLocked(job);
    journal_->AppendAsync(std::move(record));
  }
  ReleaseWorkersLocked(job, t->stop_workers, reason);
  store_.DeletePrefix(absl::StrCat("jobs/", job.id, "/"));
  if (t->to == v1::JOB_SUCCEEDED) {
    AQ_LOG_INFO("job {} succeeded", job.id);
  } else {
    AQ_LOG_WARN("job {} {}: {}", job.id, JobStateName(t->to), reason);
  }
  TrimFinishedLocked();
  ScheduleLocked();
  return true;
}

void CoordinatorCore::FinishLocked(Job& job, JobEvent event,
                                   const std::string& reason) {
  TransitionLocked(job, event, reason);
}

void CoordinatorCore::ReleaseWorkersLocked(Job& job, bool stop,
                                           const std::string& reason) {
  std::vector<std::pair<std::string, std::string>> to_stop;
  for (const std::string& w : job.reserved) {
    auto status = registry_.Get(w);
    if (status.ok() && status->job_id() == job.id) {
      if (stop) to_stop.emplace_back(w, status->info().address());
      registry_.Release(w, job.id);
    }
  }
  if (to_stop.empty()) return;
  StopWorkersAsync(std::move(to_stop), job.id,
                   absl::StrCat("job ", JobStateName(job.state), ": ", reason));
}

void CoordinatorCore::TrimFinishedLocked() {
  int finished = 0;
  for (const std::string& id : job_order_) {
    auto it = jobs_.find(id);
    if (it != jobs_.end() && IsFinal(it->second.state)) ++finished;
  }
  auto it = job_order_.begin();
  while (finished > options_.max_finished_jobs && it != job_order_.end()) {
    auto job = jobs_.find(*it);
    if (job != jobs_.end() && IsFinal(job->second.state)) {
      jobs_.erase(job);
      it = job_order_.erase(it);
      --finished;
    } else {
      ++it;
    }
  }
}

void CoordinatorCore::HandleTransitionsLocked(
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
    auto it = jobs_.find(c.job_id);
    if (it == jobs_.end() || IsFinal(it->second.state)) continue;
    Job& job = it->second;
    std::string where = "reserved for the job";
    for (size_t st = 0; st < job.stage_workers.size(); ++st) {
      for (size_t r = 0; r < job.stage_workers[st].size(); ++r) {
        if (job.stage_workers[st][r] == c.worker_id) {
          where = absl::StrCat("stage ", st, ", replica ", r);
        }
      }
    }
    FinishLocked(job, JobEvent::kFailed,
                 absl::StrCat("worker ", c.worker_id, " (", where, ") is ",
                              WorkerStateName(c.to), ": ", c.detail));
  }
}

void CoordinatorCore::Tick() {
  absl::MutexLock lock(&mu_);
  HandleTransitionsLocked(registry_.Tick());
  const absl::Time now = clock_->Now();
  for (const std::string& id : job_order_) {
    auto it = jobs_.find(id);
    if (it == jobs_.end() || it->second.state != v1::JOB_PENDING) continue;
    Job& job = it->second;
    const int64_t wait_ms = job.spec.pipeline().wait_for_workers_ms();
    const absl::Duration wait = wait_ms > 0 ? absl::Milliseconds(wait_ms)
                                            : options_.default_wait_for_workers;
    if (now - job.submitted >= wait) {
      FinishLocked(
          job, JobEvent::kFailed,
          absl::StrFormat(
              "timed out after %.1f s waiting for %d healthy idle worker(s) "
              "(%d available)",
              absl::ToDoubleSeconds(wait), job.workers_needed,
              static_cast<int>(registry_.IdleHealthyWorkers().size())));
    }
  }
  ScheduleLocked();
}

void CoordinatorCore::ScheduleLocked() {
  if (shutting_down_) return;
  for (const std::string& id : job_order_) {
    auto it = jobs_.find(id);
    if (it == jobs_.end() || it->second.state != v1::JOB_PENDING) continue;
    Job& job = it->second;
    std::vector<std::string> idle = registry_.IdleHealthyWorkers();
    if (static_cast<int>(idle.size()) < job.workers_needed) return;  // FIFO.
    idle.resize(job.workers_needed);
    for (const std::string& w : idle) registry_.Assign(w, job.id, -1, -1);
    job.reserved = idle;
    TransitionLocked(job, JobEvent::kWorkersReserved, "");
    if (absl::Status s = executor_->Submit([this, id] { Drive(id); });
        !s.ok()) {
      FinishLocked(job, JobEvent::kFailed, std::string(s.message()));
    }
  }
}

void CoordinatorCore::StopWorkersAsync(
    std::vector<std::pair<std::string, std::string>> id_and_address,
    std::string job_id, std::string reason) {
  auto stop = [this, workers = std::move(id_and_address), job_id,
               reason = std::move(reason)] {
    for (const auto& [id, address] : workers) {
      std::unique_ptr<WorkerClient> client = worker_clients_(address);
      const absl::Status s =
          client->StopJob(job_id, reason, options_.worker_rpc_timeout);
      if (!s.ok()) {
        AQ_LOG_WARN("stopping job {} on worker {}: {}", job_id, id,
                    s.ToString());
      }
    }
  };
  if (absl::Status s = executor_->Submit(std::move(stop)); !s.ok()) {
    // The workers learn it from their next heartbeat instead.
    AQ_LOG_WARN("stopping job {}: {}", job_id, s.ToString());
  }
}

}  // namespace aqueduct
