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

const char* JobStateName(JobState state) {
  switch (state) {
    case v1::JOB_PENDING:
      return "PENDING";
    case v1::JOB_PLANNING:
      return "PLANNING";
    case v1::JOB_RUNNING:
      return "RUNNING";
    case v1::JOB_SUCCEEDED:
      return "SUCCEEDED";
    case v1::JOB_FAILED:
      return "FAILED";
    case v1::JOB_CANCELLED:
      return "CANCELLED";
    default:
      return "UNKNOWN";
  }
}

namespace {

constexpr size_t kStepWindow = 2048;
constexpr size_t kMaxLossPoints = 1000;

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(std::ceil(q * v.size())) - 1;
  return v[std::min(i, v.size() - 1)];
}

}  // namespace

CoordinatorCore::CoordinatorCore(const CoordinatorOptions& options,
                                 const Clock* clock,
                                 WorkerClientFactory worker_clients)
    : options_(options),
      clock_(clock),
      worker_clients_(std::move(worker_clients)),
      registry_(options.registry, clock),
      start_tag_(absl::StrFormat("%x", absl::ToUnixSeconds(clock->Now()))) {}

CoordinatorCore::~CoordinatorCore() {
  absl::MutexLock lock(&mu_);
  shutting_down_ = true;
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return active_threads_ == 0;
  };
  mu_.Await(absl::Condition(&idle));
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
    if (it == jobs_.end() || Final(it->second.state) ||
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
    if (Final(job.state)) continue;
    StageLedger& l = job.replicas[{p.stage(), p.replica()}];
    l.committed_version = std::max(l.committed_version, p.committed_version());
    l.in_flight.assign(p.in_flight().begin(), p.in_flight().end());
    if (l.first_report == absl::InfinitePast()) {
      l.first_report = now;
      l.first_done = p.minibatches_done();
    }
    l.minibatches_done = std::max(l.minibatches_done, p.minibatches_done());
    if (job.total_steps == 0 && p.total_steps() > 0) {
      job.total_steps = p.total_steps();
    }
    l.last_report = now;
    for (double ms : p.step_ms()) {
      l.step_ms.push_back(ms);
      if (l.step_ms.size() > kStepWindow) l.step_ms.pop_front();
    }
    l.utilization = p.utilization();
    l.bytes_sent += p.bytes_sent();
    l.bytes_received += p.bytes_received();
    if (p.peak_rss_bytes() > 0) {
      l.memory.set_peak_rss_bytes(p.peak_rss_bytes());
      l.memory.set_stashed_weight_bytes(p.stashed_weight_bytes());
      l.memory.set_stashed_activation_bytes(p.stashed_activation_bytes());
      l.memory.set_peak_stashed_versions(p.peak_stashed_versions());
      l.memory.set_peak_in_flight(p.peak_in_flight());
    }
    for (LossPoint point : p.losses()) {
      if (point.samples() > 0 && point.samples() < job.spec.batch_size()) {
        auto& share = job.loss_shares[point.minibatch()];
        share.first += point.loss() * point.samples();
        share.second += point.samples();
        if (share.second < job.spec.batch_size()) continue;
        point.set_loss(share.first / share.second);
        point.set_samples(share.second);
        job.loss_shares.erase(point.minibatch());
      }
      job.loss = point.loss();
      if (point.minibatch() % job.loss_stride == 0) {
        job.loss_curve.push_back(point);
      }
      if (job.loss_curve.size() > kMaxLossPoints) {
        // Halve the resolution: keep every other point.
        job.loss_stride *= 2;
        std::vector<LossPoint> kept;
        for (const LossPoint& q : job.loss_curve) {
          if (q.minibatch() % job.loss_stride == 0) kept.push_back(q);
        }
        job.loss_curve = std::move(kept);
      }
    }
    {
      constexpr int64_t kMaxTraceEvents = 2000000;
      v1::StageTrace& trace = job.trace[{p.stage(), p.replica()}];
      trace.set_worker_id(worker_id);
      trace.set_stage(p.stage());
      trace.set_replica(p.replica());
      for (const TraceEvent& e : p.events()) {
        if (job.trace_events >= kMaxTraceEvents) {
          ++job.trace_dropped;
          continue;
        }
        *trace.add_events() = e;
        ++job.trace_events;
      }
    }
    ++job.version;
    if (!p.error().empty()) {
      FinishLocked(
          job, v1::JOB_FAILED,
          absl::StrCat("stage ", p.stage(), " replica ", p.replica(),
                       " on worker ", worker_id, " failed: ", p.error()));
      continue;
    }
    if (p.finished()) {
      job.finished_replicas[{p.stage(), p.replica()}] = true;
      if (job.has_plan && p.stage() == job.plan.stages_size() - 1 &&
          (p.test_accuracy() != 0 || p.test_loss() != 0)) {
        job.test_accuracy = p.test_accuracy();
        job.test_loss = p.test_loss();
      }
      size_t total = 0;
      for (const auto& workers : job.stage_workers) total += workers.size();
      if (job.finished_replicas.size() == total) {
        FinishLocked(job, v1::JOB_SUCCEEDED, "");
      }
    }
  }
  return absl::OkStatus();
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
  absl::MutexLock lock(&mu_);
  Job job;
  job.id = absl::StrCat("job-", start_tag_, "-", next_job_++);
  job.spec = spec;
  if (profile != nullptr) {
    job.has_profile = true;
    job.profile = *profile;
  }
  job.submitted = clock_->Now();
  job.workers_needed = p.workers;
  job.total_steps = total;
  const std::string id = job.id;
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
  if (!Final(it->second.state)) {
    FinishLocked(it->second, v1::JOB_CANCELLED, "cancelled by a client");
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

absl::Status CoordinatorCore::OpenJournal(const std::string& path) {
  ASSIGN_OR_RETURN(JournalContents contents, JobJournal::Read(path));
  if (contents.ignored_bytes > 0) {
    AQ_LOG_WARN("journal {}: ignored an unreadable tail of {} bytes", path,
                contents.ignored_bytes);
  }
  absl::MutexLock lock(&mu_);
  std::map<std::string, v1::JobSubmitted> submitted;
  std::map<std::string, JobStatus> finished;
  std::vector<std::string> order;
  for (v1::JournalRecord& r : contents.records) {
    if (r.has_submitted()) {
      const std::string id = r.submitted().job_id();
      if (submitted.count(id) == 0) order.push_back(id);
      submitted[id] = std::move(*r.mutable_submitted());
    } else if (r.has_finished()) {
      finished[r.finished().job_id()] = std::move(*r.mutable_finished());
    }
  }
  const std::string prefix = absl::StrCat("job-", start_tag_, "-");
  int restarted = 0;
  for (const std::string& id : order) {
    if (jobs_.count(id) > 0) continue;
    const v1::JobSubmitted& sub = submitted[id];
    Job job;
    job.id = id;
    job.spec = sub.spec();
    job.restored = true;
    auto done = finished.find(id);
    if (done != finished.end()) {
      job.snapshot = done->second;
    } else {
      // It was pending or running when the previous coordinator stopped.
      job.snapshot.set_job_id(id);
      job.snapshot.set_name(sub.spec().name());
      job.snapshot.set_state(v1::JOB_FAILED);
      job.snapshot.set_reason(
          "the coordinator restarted before the job finished; submit it "
          "again");
      job.snapshot.set_submitted_ms(sub.submitted_ms());
      job.snapshot.set_finished_ms(ToUnixMillisOr0(clock_->Now()));
      job.snapshot.set_total_steps(sub.total_steps());
      job.snapshot.set_workers(std::max(1, sub.spec().pipeline().workers()));
      ++restarted;
    }
    job.state = job.snapshot.state();
    job.reason = job.snapshot.reason();
    job.has_plan = job.snapshot.has_plan();
    if (job.has_plan) job.plan = job.snapshot.plan();
    // Ids of this start must not repeat a restored one.
    if (id.rfind(prefix, 0) == 0) {
      int64_t n = 0;
      if (absl::SimpleAtoi(id.substr(prefix.size()), &n)) {
        next_job_ = std::max(next_job_, n + 1);
      }
    }
    jobs_.emplace(id, std::move(job));
    job_order_.push_back(id);
  }
  TrimFinishedLocked();
  // Compact: the submissions and final statuses of the jobs kept.
  std::vector<v1::JournalRecord> kept;
  for (const std::string& id : job_order_) {
    const Job& job = jobs_.at(id);
    if (!job.restored) continue;
    v1::JournalRecord sub;
    *sub.mutable_submitted() = submitted[id];
    kept.push_back(std::move(sub));
    v1::JournalRecord fin;
    *fin.mutable_finished() = job.snapshot;
    kept.push_back(std::move(fin));
  }
  ASSIGN_OR_RETURN(journal_, JobJournal::Create(path, kept));
  AQ_LOG_INFO(
      "journal {}: restored {} job(s); {} had not finished and are FAILED",
      path, jobs_.size(), restarted);
  return absl::OkStatus();
}

absl::StatusOr<v1::GetTraceResponse> CoordinatorCore::GetTrace(
    const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(
        absl::StrCat("job '", job_id, "' does not exist"));
  }
  v1::GetTraceResponse response;
  for (const auto& [key, trace] : it->second.trace) {
    *response.add_stages() = trace;
  }
  response.set_dropped(it->second.trace_dropped);
  return response;
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
  s.set_loss(job.loss);
  *s.mutable_loss_curve() = {job.loss_curve.begin(), job.loss_curve.end()};
  s.set_test_accuracy(job.test_accuracy);
  s.set_test_loss(job.test_loss);
  s.set_workers(job.workers_needed);
  if (job.has_plan) *s.mutable_plan() = job.plan;
  auto schedule = ParseSchedule(job.spec.pipeline().schedule());
  s.set_schedule(
      ScheduleName(schedule.ok() ? *schedule : v1::SCHEDULE_UNSPECIFIED));
  const int64_t batch = job.spec.batch_size();
  const int last_stage = static_cast<int>(job.stage_workers.size()) - 1;
  double job_rate = 0;
  int64_t steps = 0;
  for (int st = 0; st <= last_stage; ++st) {
    StageStatus* stage = s.add_stages();
    stage->set_stage(st);
    std::vector<double> step_ms;
    double rate = 0, utilization = 0;
    int reporting = 0;
    for (size_t r = 0; r < job.stage_workers[st].size(); ++r) {
      stage->add_workers(job.stage_workers[st][r]);
      auto worker = registry_.Get(job.stage_workers[st][r]);
      stage->add_worker_states(worker.ok() ? worker->state()
                                           : v1::WORKER_STATE_UNSPECIFIED);
      auto it = job.replicas.find({st, static_cast<int>(r)});
      if (it == job.replicas.end()) continue;
      const StageLedger& l = it->second;
      ++reporting;
      stage->set_committed_version(
          std::max(stage->committed_version(), l.committed_version));
      for (const InFlight& f : l.in_flight) *stage->add_in_flight() = f;
      // Every replica steps on every minibatch: the stage's count is theirs.
      stage->set_minibatches_done(
          std::max(stage->minibatches_done(), l.minibatches_done));
      step_ms.insert(step_ms.end(), l.step_ms.begin(), l.step_ms.end());
      const double span = absl::ToDoubleSeconds(l.last_report - l.first_report);
      if (span > 0) {
        rate =
            std::max(rate, (l.minibatches_done - l.first_done) * batch / span);
      }
      utilization += l.utilization;
      stage->set_bytes_sent(stage->bytes_sent() + l.bytes_sent);
      stage->set_peak_rss_bytes(
          std::max(stage->peak_rss_bytes(), l.memory.peak_rss_bytes()));
      stage->set_stashed_weight_bytes(std::max(
          stage->stashed_weight_bytes(), l.memory.stashed_weight_bytes()));
      stage->set_stashed_activation_bytes(
          std::max(stage->stashed_activation_bytes(),
                   l.memory.stashed_activation_bytes()));
      stage->set_peak_stashed_versions(std::max(
          stage->peak_stashed_versions(), l.memory.peak_stashed_versions()));
      stage->set_peak_in_flight(
          std::max(stage->peak_in_flight(), l.memory.peak_in_flight()));
      stage->set_bytes_received(stage->bytes_received() + l.bytes_received);
    }
    stage->set_samples_per_second(rate);
    stage->set_utilization(reporting > 0 ? utilization / reporting : 0);
    stage->set_step_ms_p50(Percentile(step_ms, 0.50));
    stage->set_step_ms_p90(Percentile(step_ms, 0.90));
    stage->set_step_ms_p99(Percentile(step_ms, 0.99));
    if (st == last_stage) {
      job_rate = rate;
      steps = stage->minibatches_done();
    }
  }
  s.set_step(steps);
  s.set_samples_per_second(job_rate);
  return s;
}

void CoordinatorCore::FinishLocked(Job& job, JobState state,
                                   const std::string& reason) {
  job.state = state;
  job.reason = reason;
  job.finished = clock_->Now();
  ++job.version;
  if (journal_ != nullptr) {
    v1::JournalRecord record;
    *record.mutable_finished() = StatusOfLocked(job);
    if (absl::Status s = journal_->Append(record); !s.ok()) {
      AQ_LOG_ERROR("job {} {}, but the journal could not record it: {}", job.id,
                   JobStateName(state), s.ToString());
    }
  }
  std::vector<std::pair<std::string, std::string>> to_stop;
  for (const std::string& w : job.reserved) {
    auto status = registry_.Get(w);
    if (status.ok() && status->job_id() == job.id) {
      if (state != v1::JOB_SUCCEEDED) {
        to_stop.emplace_back(w, status->info().address());
      }
      registry_.Release(w, job.id);
    }
  }
  store_.DeletePrefix(absl::StrCat("jobs/", job.id, "/"));
  if (state == v1::JOB_SUCCEEDED) {
    AQ_LOG_INFO("job {} succeeded", job.id);
  } else {
    AQ_LOG_WARN("job {} {}: {}", job.id, JobStateName(state), reason);
  }
  if (!to_stop.empty()) {
    StopWorkersAsync(std::move(to_stop), job.id,
                     absl::StrCat("job ", JobStateName(state), ": ", reason));
  }
  TrimFinishedLocked();
  ScheduleLocked();
}

void CoordinatorCore::TrimFinishedLocked() {
  int finished = 0;
  for (const std::string& id : job_order_) {
    auto it = jobs_.find(id);
    if (it != jobs_.end() && Final(it->second.state)) ++finished;
  }
  auto it = job_order_.begin();
  while (finished > options_.max_finished_jobs && it != job_order_.end()) {
    auto job = jobs_.find(*it);
    if (job != jobs_.end() && Final(job->second.state)) {
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
    if (it == jobs_.end() || Final(it->second.state)) continue;
    Job& job = it->second;
    std::string where = "reserved for the job";
    for (size_t st = 0; st < job.stage_workers.size(); ++st) {
      for (size_t r = 0; r < job.stage_workers[st].size(); ++r) {
        if (job.stage_workers[st][r] == c.worker_id) {
          where = absl::StrCat("stage ", st, ", replica ", r);
        }
      }
    }
    FinishLocked(job, v1::JOB_FAILED,
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
          job, v1::JOB_FAILED,
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
    job.state = v1::JOB_PLANNING;
    ++job.version;
    ++active_threads_;
    std::thread([this, id] { Drive(id); }).detach();
  }
}

void CoordinatorCore::StopWorkersAsync(
    std::vector<std::pair<std::string, std::string>> id_and_address,
    std::string job_id, std::string reason) {
  ++active_threads_;
  std::thread([this, workers = std::move(id_and_address),
               job_id = std::move(job_id), reason = std::move(reason)] {
    for (const auto& [id, address] : workers) {
      std::unique_ptr<WorkerClient> client = worker_clients_(address);
      const absl::Status s =
          client->StopJob(job_id, reason, options_.worker_rpc_timeout);
      if (!s.ok()) {
        AQ_LOG_WARN("stopping job {} on worker {}: {}", job_id, id,
                    s.ToString());
      }
    }
    absl::MutexLock lock(&mu_);
    --active_threads_;
  }).detach();
}

void CoordinatorCore::Drive(std::string job_id) {
  // Everything here runs without the lock except where noted; the job may
  // be cancelled or failed meanwhile, which each locked step checks.
  JobSpec spec;
  ModelProfile profile;
  bool has_profile;
  std::vector<std::string> reserved;
  std::vector<std::string> addresses;
  auto fail = [&](const std::string& reason) {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(job_id);
    if (it != jobs_.end() && !Final(it->second.state)) {
      FinishLocked(it->second, v1::JOB_FAILED, reason);
    }
  };
  auto done = [&] {
    absl::MutexLock lock(&mu_);
    --active_threads_;
  };
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end() || it->second.state != v1::JOB_PLANNING) {
      --active_threads_;
      return;
    }
    spec = it->second.spec;
    has_profile = it->second.has_profile;
    profile = it->second.profile;
    reserved = it->second.reserved;
    for (const std::string& w : reserved) {
      auto status = registry_.Get(w);
      addresses.push_back(status.ok() ? status->info().address() : "");
    }
  }
  if (!has_profile) {
    auto measured =
        worker_clients_(addresses[0])->Profile(spec, options_.profile_timeout);
    if (!measured.ok()) {
      fail(absl::StrCat("profiling the model on worker ", reserved[0],
                        " failed: ", measured.status().message()));
      return done();
    }
    profile = *std::move(measured);
  }
  auto graph = ProfileGraph::FromProto(profile);
  if (!graph.ok()) {
    fail(absl::StrCat("the profile is invalid: ", graph.status().message()));
    return done();
  }
  auto policy = ResolvePipeline(spec);
  if (!policy.ok()) {  // Checked at submission; a journal may be older.
    fail(std::string(policy.status().message()));
    return done();
  }
  PlanRequest request;
  request.cost_model = CostModelName(policy->cost_model);
  request.schedule = ScheduleName(policy->schedule);
  request.levels = {
      {static_cast<int>(reserved.size()), policy->bandwidth_bytes_per_s}};
  request.threads = 1;
  // Optimizer state per parameter byte, for the predicted memory.
  const OptimizerSpec& opt = spec.optimizer();
  request.optimizer_state_factor =
      opt.has_adam() ? 2 : (opt.has_sgd() && opt.sgd().momentum() > 0 ? 1 : 0);
  // Weight stashing runs unreplicated stages: plan a straight pipeline.
  request.straight_pipeline = StashesWeights(policy->schedule);
  auto plan = MakePlan(*graph, request);
  if (!plan.ok()) {
    fail(absl::StrCat("planning failed: ", plan.status().message()));
    return done();
  }

  // Record the plan and the assignment.
  std::vector<std::pair<std::string, StageAssignment>> assignments;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end() || it->second.state != v1::JOB_PLANNING) {
      --active_threads_;
      return;
    }
    Job& job = it->second;
    job.plan = *plan;
    job.has_plan = true;
    job.stage_workers.assign(plan->stages_size(), {});
    std::vector<v1::StagePeers> peers(plan->stages_size());
    for (int st = 0; st < plan->stages_size(); ++st) {
      for (int rank : plan->stages(st).worker_ranks()) {
        job.stage_workers[st].push_back(reserved[rank]);
        peers[st].add_worker_ids(reserved[rank]);
        peers[st].add_addresses(addresses[rank]);
      }
    }
    std::vector<bool> used(reserved.size(), false);
    for (int st = 0; st < plan->stages_size(); ++st) {
      for (int r = 0; r < plan->stages(st).worker_ranks_size(); ++r) {
        const int rank = plan->stages(st).worker_ranks(r);
        used[rank] = true;
        registry_.Assign(reserved[rank], job_id, st, r);
        StageAssignment a;
        a.set_job_id(job_id);
        *a.mutable_spec() = spec;
        *a.mutable_plan() = *plan;
        a.set_stage(st);
        a.set_replica(r);
        *a.mutable_peers() = {peers.begin(), peers.end()};
        a.set_rendezvous_key(absl::StrCat("jobs/", job_id, "/"));
        a.set_rank(rank);
        a.set_world_size(plan->workers_used());
        assignments.emplace_back(addresses[rank], std::move(a));
      }
    }
    // Workers the plan leaves idle go back to the pool.
    std::vector<std::string> kept;
    for (size_t i = 0; i < reserved.size(); ++i) {
      if (used[i]) {
        kept.push_back(reserved[i]);
      } else {
        registry_.Release(reserved[i], job_id);
      }
    }
    job.reserved = kept;
    ++job.version;
  }
  for (const auto& [address, a] : assignments) {
    const absl::Status s =
        worker_clients_(address)->AssignStage(a, options_.worker_rpc_timeout);
    if (!s.ok()) {
      fail(absl::StrCat("assigning stage ", a.stage(), " replica ", a.replica(),
                        " to worker at ", address, " failed: ", s.message()));
      return done();
    }
  }
  for (const auto& [address, a] : assignments) {
    const absl::Status s =
        worker_clients_(address)->StartJob(job_id, options_.worker_rpc_timeout);
    if (!s.ok()) {
      fail(absl::StrCat("starting the job on worker at ", address,
                        " failed: ", s.message()));
      return done();
    }
  }
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(job_id);
    if (it != jobs_.end() && it->second.state == v1::JOB_PLANNING) {
      it->second.state = v1::JOB_RUNNING;
      it->second.started = clock_->Now();
      ++it->second.version;
      AQ_LOG_INFO("job {} running on {} stage(s)", job_id,
                  it->second.plan.stages_size());
    }
    --active_threads_;
  }
}

}  // namespace aqueduct
