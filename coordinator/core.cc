#include "coordinator/core.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/auth.h"
#include "common/logging.h"
#include "common/status.h"
#include "coordinator/input_checks.h"
#include "coordinator/jobs/field_limits.h"
#include "coordinator/jobs/job_id.h"
#include "coordinator/jobs/pages.h"
#include "coordinator/jobs/queue.h"
#include "coordinator/planner/memory_fit.h"
#include "coordinator/planner/plan.h"
#include "coordinator/planner/profile_graph.h"
#include "coordinator/progress_checks.h"
#include "google/protobuf/descriptor.h"
#include "pipeline/policy.h"
#include "pipeline/spec.h"

namespace aqueduct {

namespace {

// A stage's error that a restart would meet again: a bad spec, missing
// data, a file that is not there.

int MaxRestarts(const JobSpec& spec) {
  const v1::FaultToleranceSpec& f = spec.fault_tolerance();
  return f.has_max_restarts() ? f.max_restarts() : 3;
}

// A stage's error becomes the job's reason, shown in every listing: cut to
// this many bytes (at a UTF-8 boundary).
constexpr size_t kMaxErrorBytes = 4096;

// A checked report as it is kept (nullopt: as it came): utilisation at
// most 1 (a report may be a little over, progress_checks.h) and the error
// cut to kMaxErrorBytes.
std::optional<StageProgress> Tidied(const StageProgress& report) {
  if (report.utilization() <= 1 && report.error().size() <= kMaxErrorBytes) {
    return std::nullopt;
  }
  StageProgress p = report;
  if (p.utilization() > 1) p.set_utilization(1);
  if (p.error().size() > kMaxErrorBytes) {
    size_t end = kMaxErrorBytes;
    // Back to the start of a UTF-8 sequence (continuation bytes: 10xxxxxx).
    while (end > 0 &&
           (static_cast<unsigned char>(p.error()[end]) & 0xc0) == 0x80) {
      --end;
    }
    p.set_error(absl::StrCat(p.error().substr(0, end), "... (",
                             report.error().size(), " bytes)"));
  }
  return p;
}

// ListJobs' pages: jobs by default and at most.
constexpr int kDefaultJobsPage = 100;
constexpr int kMaxJobsPage = 1000;
// The longest `resume` a submission may name (PATH_MAX), and the longest
// owner (a credential's name, as field_limits.h bounds names).
constexpr size_t kMaxResumeBytes = 4096;
constexpr size_t kMaxOwnerBytes = 256;

// A random tag for this run of the coordinator (page tokens); the time
// when the kernel gives no randomness, which only uniqueness needs.
uint64_t NewRunTag(absl::Time now) {
  absl::StatusOr<std::string> bytes = SecureRandomBytes(sizeof(uint64_t));
  if (!bytes.ok()) return static_cast<uint64_t>(absl::ToUnixNanos(now));
  uint64_t tag = 0;
  for (char c : *bytes) tag = tag << 8 | static_cast<unsigned char>(c);
  return tag;
}

// The sizes of what a client submits (jobs/field_limits.h), before the
// spec's own checks: INVALID_ARGUMENT naming the field.
absl::Status CheckSubmissionSizes(const JobSpec& spec,
                                  const ModelProfile* profile,
                                  const std::string& resume,
                                  const std::string& owner) {
  if (absl::Status s = CheckFieldSizes(spec, SpecFieldLimits(), "the spec");
      !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid job spec: ", s.message()));
  }
  if (profile != nullptr) {
    if (absl::Status s =
            CheckFieldSizes(*profile, ProfileFieldLimits(), "the profile");
        !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid profile: ", s.message()));
    }
  }
  if (resume.size() > kMaxResumeBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("resume is ", resume.size(), " bytes, more than the ",
                     kMaxResumeBytes, " allowed"));
  }
  if (owner.size() > kMaxOwnerBytes) {
    return absl::InvalidArgumentError(absl::StrCat("owner is ", owner.size(),
                                                   " bytes, more than the ",
                                                   kMaxOwnerBytes, " allowed"));
  }
  return absl::OkStatus();
}

}  // namespace

CoordinatorCore::CoordinatorCore(const CoordinatorOptions& options,
                                 const Clock* clock,
                                 WorkerClientFactory worker_clients)
    : options_(options),
      clock_(clock),
      worker_clients_(std::move(worker_clients)),
      store_(options.store),
      registry_(options.registry, clock),
      start_tag_(absl::StrFormat("%x", absl::ToUnixSeconds(clock->WallNow()))),
      run_(NewRunTag(clock->WallNow())),
      executor_(std::make_unique<BoundedExecutor>(
          "the job driver", options.driver_threads, options.driver_queue)),
      committer_(std::make_unique<BoundedExecutor>("the checkpoint committer",
                                                   1, options.driver_queue)) {}

CoordinatorCore::~CoordinatorCore() {
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
  }
  committer_.reset();
  executor_.reset();  // Drivers see shutting_down_ and end; joined here.
}

// ------------------------------------------------------------------ Workers

absl::Status CoordinatorCore::RegisterWorker(const WorkerInfo& info,
                                             const v1::StageClaim* running) {
  if (running != nullptr && !running->job_id().empty()) {
    RETURN_IF_ERROR(CheckName("running.job_id", running->job_id(),
                              KvStore::kMaxJobIdBytes));
  }
  absl::MutexLock lock(&mu_);
  std::vector<WorkerTransition> changes;
  absl::Status s = registry_.Register(info, &changes);
  HandleTransitionsLocked(changes);
  if (s.ok()) {
    AQ_LOG_INFO("worker {} registered (incarnation {}, {}, {})",
                info.worker_id(), info.incarnation(), info.address(),
                info.device().name());
    if (running != nullptr && !running->job_id().empty()) {
      AdoptClaimLocked(info, *running);
    }
    ForgetAwaitedLocked(info.worker_id());
    ScheduleLocked();
  }
  return s;
}

absl::StatusOr<CoordinatorCore::HeartbeatReply> CoordinatorCore::Heartbeat(
    const std::string& worker_id, const std::string& incarnation,
    const std::string& job_id, int attempt) {
  if (!job_id.empty()) {
    RETURN_IF_ERROR(CheckName("job_id", job_id, KvStore::kMaxJobIdBytes));
  }
  absl::MutexLock lock(&mu_);
  WorkerState before = v1::WORKER_HEALTHY;
  if (absl::Status s = registry_.Heartbeat(worker_id, incarnation, &before);
      !s.ok()) {
    return s;
  }
  if (before == v1::WORKER_UNREACHABLE) {
    AQ_LOG_INFO(
        "worker {} (incarnation {}) UNREACHABLE -> HEALTHY: heard from "
        "again",
        worker_id, incarnation);
  }
  HeartbeatReply reply;
  if (!job_id.empty()) {
    auto it = jobs_.find(job_id);
    auto status = registry_.Get(worker_id);
    // A job that is over, that the worker no longer holds, or an attempt
    // this coordinator never started.
    if (it == jobs_.end() || IsFinal(it->second.state) ||
        (status.ok() && status->job_id() != job_id) ||
        attempt > it->second.attempt) {
      reply.stop_jobs.push_back(job_id);
    } else {
      reply.checkpoint_at = it->second.checkpoint_at;
    }
  }
  return reply;
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
  RETURN_IF_ERROR(CheckWorkerName(worker_id, incarnation));
  if (stages.size() > static_cast<size_t>(kMaxReportEntries)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ReportProgress has ", stages.size(),
                     " stage reports; the limit is ", kMaxReportEntries));
  }
  std::vector<JobRecords> records;
  absl::Status s;
  {
    absl::MutexLock lock(&mu_);
    s = ReportProgressLocked(worker_id, incarnation, stages, &records);
  }
  for (JobRecords& r : records) KeepRecords(std::move(r));
  return s;
}

absl::Status CoordinatorCore::ReportProgressLocked(
    const std::string& worker_id, const std::string& incarnation,
    const std::vector<StageProgress>& stages,
    std::vector<JobRecords>* records) {
  auto worker = registry_.Get(worker_id);
  if (!worker.ok()) return worker.status();
  if (worker->info().incarnation() != incarnation) {
    return absl::PermissionDeniedError(
        absl::StrCat("worker ", worker_id, " reports progress as incarnation ",
                     incarnation, ", which is not its registered incarnation"));
  }
  RETURN_IF_ERROR(registry_.CheckLive(worker_id, incarnation));
  // All or nothing: a batch with one forged or broken report changes
  // nothing.
  for (size_t i = 0; i < stages.size(); ++i) {
    RETURN_IF_ERROR(CheckProgressLocked(*worker, stages[i], i));
  }
  const absl::Time now = clock_->Now();
  for (const StageProgress& p : stages) {
    auto it = jobs_.find(p.job_id());
    // Log lines of the attempt are kept even after the job ended: the
    // last ones often say why.
    if (it != jobs_.end() && p.attempt() == it->second.attempt) {
      JobRecords r = RecordsOfLocked(it->second, worker_id, p);
      // Log lines now, in order with the coordinator's own lines about
      // the job (a follow ends after "job SUCCEEDED": the last report's
      // lines must be in before it); trace events after the lock.
      if (!r.lines.empty()) logs_.Append(r.job_id, std::move(r.lines));
      if (r.trace.events_size() > 0) records->push_back(std::move(r));
    }
    // Of an attempt that ended, or of a job that ended (maybe by an
    // earlier report of this batch): ignored.
    if (it == jobs_.end() || p.attempt() != it->second.attempt ||
        IsFinal(it->second.state)) {
      continue;
    }
    ApplyProgressLocked(it->second, worker_id, p, now);
  }
  return absl::OkStatus();
}

absl::Status CoordinatorCore::CheckProgressLocked(const WorkerStatus& worker,
                                                  const StageProgress& p,
                                                  size_t index) const {
  const std::string& id = worker.info().worker_id();
  auto it = jobs_.find(p.job_id());
  if (it == jobs_.end()) {
    return absl::NotFoundError(
        absl::StrCat("job ", Quoted(p.job_id()), " does not exist"));
  }
  const Job& job = it->second;
  if (p.attempt() < 0 || p.attempt() > job.attempt) {
    return absl::PermissionDeniedError(absl::StrCat(
        "worker ", id, " reports progress for attempt ", p.attempt(),
        " of job ", job.id, ", which has not started (it runs attempt ",
        job.attempt, ")"));
  }
  if (p.attempt() < job.attempt) return absl::OkStatus();  // Ignored.
  if (IsFinal(job.state)) {
    // Its workers were released when it ended: a late report of theirs is
    // ignored, anyone else's refused.
    const auto& stages = job.stage_workers;
    const bool ran = p.stage() >= 0 &&
                     p.stage() < static_cast<int>(stages.size()) &&
                     p.replica() >= 0 &&
                     p.replica() < static_cast<int>(stages[p.stage()].size()) &&
                     stages[p.stage()][p.replica()] == id;
    if (ran) return absl::OkStatus();
    return absl::PermissionDeniedError(absl::StrCat(
        "worker ", id, " reports progress for stage ", p.stage(), " replica ",
        p.replica(), " of job ", job.id, ", which it did not run"));
  }
  if (worker.job_id() != job.id) {
    return absl::PermissionDeniedError(
        absl::StrCat("worker ", id, " reports progress for job ", job.id,
                     ", which it is not assigned to"));
  }
  if (worker.stage() != p.stage() || worker.replica() != p.replica()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "worker ", id, " reports progress for stage ", p.stage(), " replica ",
        p.replica(), " of job ", job.id, "; it runs stage ", worker.stage(),
        " replica ", worker.replica()));
  }
  ProgressBounds bounds;
  if (job.total_steps > 0) {
    bounds.total_steps = job.total_steps;
    bounds.total_what = "the job's total steps";
  } else if (p.total_steps() > 0) {
    bounds.total_steps = p.total_steps();
    bounds.total_what = "the total steps the report gives";
  } else {
    bounds.total_what = "the bound while the job's total is not known";
  }
  bounds.batch_size = job.spec.batch_size();
  bounds.job_id = job.id;
  bounds.attempt = job.attempt;
  bounds.checkpoint_dir = job.spec.checkpoint().dir();
  return CheckProgressValues(p, absl::StrCat("stages[", index, "]"), bounds);
}

std::string CoordinatorCore::StageFailureReason(const std::string& worker_id,
                                                const StageProgress& p) {
  if (p.failure().cause() != v1::FAILURE_PEER_UNREACHABLE) {
    return absl::StrCat("stage ", p.stage(), " replica ", p.replica(),
                        " on worker ", worker_id, " failed: ", p.error());
  }
  // A partition between two workers: the error names the peer and its
  // host ("could not reach stage S on worker W (HOST): ..."); this says
  // which end reported it, and from where.
  auto status = registry_.Get(worker_id);
  const std::string address = status.ok() ? status->info().address() : "";
  const size_t colon = address.rfind(':');
  return absl::StrCat(
      "stage ", p.stage(), " on worker ", worker_id,
      address.empty()
          ? ""
          : absl::StrCat(
                " (", address.substr(0, std::min(colon, address.size())), ")"),
      " ", p.error());
}

void CoordinatorCore::ApplyProgressLocked(Job& job,
                                          const std::string& worker_id,
                                          const StageProgress& report,
                                          absl::Time now) {
  const std::optional<StageProgress> tidied = Tidied(report);
  const StageProgress& p = tidied.has_value() ? *tidied : report;
  job.ledger.Apply(worker_id, p, now);
  if (job.total_steps == 0 && p.total_steps() > 0) {
    job.total_steps = p.total_steps();
  }
  ++job.version;
  LogFirstStepAfterRestartLocked(job, p);
  VouchForWorkersLocked(job, p, now);
  ApplyCheckpointsLocked(job, p);
  if (!p.error().empty()) {
    ReactToFailureLocked(job, worker_id, p);
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

void CoordinatorCore::ReactToFailureLocked(Job& job,
                                           const std::string& worker_id,
                                           const StageProgress& p) {
  const v1::StageFailure& f = p.failure();
  const FailureReaction r = ReactToStageFailure(
      f, static_cast<absl::StatusCode>(p.error_code()),
      job.spec.fault_tolerance().on_nonfinite() == "rollback");
  if (r.forget_checkpoint) {
    ForgetUnloadableCheckpointLocked(job, f.checkpoint_version(), p.error());
  }
  if (r.note_unreachable_peer && registry_.Get(f.peer_worker_id()).ok()) {
    job.unreachable_peers.insert(f.peer_worker_id());
  }
  const std::string reason = StageFailureReason(worker_id, p);
  switch (r.action) {
    case FailureAction::kFail:
      FinishLocked(job, JobEvent::kFailed, reason);
      return;
    case FailureAction::kRestart:
      RestartOrFailLocked(job, reason);
      return;
    case FailureAction::kProbe:
      ProbeLocked(job, reason);
      return;
  }
}

void CoordinatorCore::ForgetUnloadableCheckpointLocked(
    Job& job, int64_t version, const std::string& error) {
  auto it = job.checkpoints.find(version);
  if (it == job.checkpoints.end()) return;
  AQ_LOG_WARN(
      "job {}: the checkpoint of version {} in {} does not load; later "
      "restarts use an older one: {}",
      job.id, it->first, it->second.dir(), error);
  job.checkpoints.erase(it);
}

void CoordinatorCore::LogFirstStepAfterRestartLocked(Job& job,
                                                     const StageProgress& p) {
  if (job.restarts.empty() || job.stepped_since_restart) return;
  const bool output = job.has_plan && p.stage() == job.plan.stages_size() - 1;
  const v1::RestartRecord& r = job.restarts.back();
  if (!output || p.committed_version() <= r.rolled_back_to()) return;
  job.stepped_since_restart = true;
  AQ_LOG_INFO(
      "job {} attempt {}: first step after the restart committed (version {}) "
      "{:.3f} s after the restart",
      job.id, job.attempt, p.committed_version(),
      absl::ToDoubleSeconds(clock_->WallNow() -
                            absl::FromUnixMillis(r.at_ms())));
}

void CoordinatorCore::VouchForWorkersLocked(Job& job, const StageProgress& p,
                                            absl::Time now) {
  if (!p.error().empty() || p.committed_version() <= job.vouched_version) {
    return;
  }
  job.vouched_version = p.committed_version();
  for (const auto& replicas : job.stage_workers) {
    for (const std::string& w : replicas) {
      registry_.Vouch(w, now + options_.registry.dead_after);
    }
  }
}

// ------------------------------------------------------------------ Jobs

absl::StatusOr<std::string> CoordinatorCore::SubmitJob(
    const JobSpec& spec, const ModelProfile* profile,
    const std::string& resume_from, const std::string& owner) {
  RETURN_IF_ERROR(CheckSubmissionSizes(spec, profile, resume_from, owner));
  // Sizes are checked against the largest live worker's memory
  // (pipeline/limits.h's default while none has registered).
  MemoryLimit memory{0, "the largest registered worker's memory"};
  {
    absl::MutexLock lock(&mu_);
    for (const WorkerStatus& w : registry_.List()) {
      if (w.state() != v1::WORKER_HEALTHY && w.state() != v1::WORKER_SUSPECT) {
        continue;
      }
      memory.bytes = std::max(memory.bytes, w.info().device().memory_bytes());
    }
  }
  auto valid = CheckJobSpec(spec, memory);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid job spec: ", valid.status().message()));
  }
  if (profile != nullptr) {
    auto graph = ProfileGraph::FromProto(*profile);
    absl::Status fits =
        graph.ok() ? CheckProfileFits(*graph, spec, memory) : graph.status();
    if (!fits.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid profile: ", fits.message()));
    }
  }
  RETURN_IF_ERROR(CheckCheckpointDir(spec));
  v1::CheckpointManifest resume;
  if (!resume_from.empty()) {
    ASSIGN_OR_RETURN(resume, ResolveResume(spec, resume_from));
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
    ASSIGN_OR_RETURN(job.id, AdmitLocked(owner));
  }
  job.owner = owner;
  job.spec = spec;
  if (profile != nullptr) {
    job.has_profile = true;
    job.profile = *profile;
  }
  job.submitted = clock_->WallNow();  // Shown; intervals use Now().
  job.pending_since = clock_->Now();
  job.workers_needed = p.workers;
  job.total_steps = total;
  job.ledger = JobLedger(spec.batch_size());
  job.resume = resume;
  job.max_restarts = MaxRestarts(spec);
  const std::string id = job.id;
  // Durable before the client hears of it, without holding the lock.
  if (absl::Status s = JournalSubmission(job); !s.ok()) {
    absl::MutexLock lock(&mu_);
    EndAdmissionLocked(owner);
    return s;
  }
  absl::MutexLock lock(&mu_);
  EndAdmissionLocked(owner);
  AddJobLocked(std::move(job));
  AQ_LOG_INFO("job {} submitted by {}: {} on {} worker(s), {} steps", id,
              owner.empty() ? "an unauthenticated caller" : owner, spec.name(),
              p.workers, total);
  ScheduleLocked();
  return id;
}

absl::StatusOr<CoordinatorCore::Job*> CoordinatorCore::FindJobLocked(
    const std::string& job_id) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return JobNotFound(job_id);
  return &it->second;
}

absl::StatusOr<const CoordinatorCore::Job*> CoordinatorCore::FindJobLocked(
    const std::string& job_id) const {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return JobNotFound(job_id);
  return &it->second;
}

std::shared_ptr<JobJournal> CoordinatorCore::Journal() const {
  absl::MutexLock lock(&journal_mu_);
  return journal_;
}

absl::Status CoordinatorCore::JournalSubmission(const Job& job) {
  const std::shared_ptr<JobJournal> journal = Journal();
  if (journal == nullptr) return absl::OkStatus();
  v1::JournalRecord record;
  v1::JobSubmitted* submitted = record.mutable_submitted();
  submitted->set_job_id(job.id);
  *submitted->mutable_spec() = job.spec;
  if (job.has_profile) *submitted->mutable_profile() = job.profile;
  submitted->set_submitted_ms(ToUnixMillisOr0(job.submitted));
  submitted->set_total_steps(job.total_steps);
  if (job.resume.version() > 0) *submitted->mutable_resume() = job.resume;
  submitted->set_owner(job.owner);
  if (absl::Status s = journal->Append(record); !s.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "the job was not accepted: cannot record it: ", s.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> CoordinatorCore::AdmitLocked(
    const std::string& owner) {
  if (!journal_error_.empty()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the coordinator cannot record new jobs (", journal_error_,
        "); it accepts them again once its state directory has room (it "
        "tries every 5 s)"));
  }
  int pending = admitting_;
  int owned = admitting_by_owner_[owner];
  for (const auto& [id, job] : jobs_) {
    if (job.state == v1::JOB_PENDING) ++pending;
    if (!IsFinal(job.state) && job.owner == owner) ++owned;
  }
  QueueLimits limits;
  limits.max_pending = options_.max_pending_jobs;
  limits.max_per_user = options_.max_jobs_per_user;
  absl::Status admitted = AdmitJob(limits, pending, owned, owner);
  if (admitted.ok()) {
    absl::StatusOr<std::string> id = NewJobId(start_tag_, next_job_);
    if (id.ok()) {
      ++next_job_;
      ++admitting_;
      ++admitting_by_owner_[owner];
      return id;
    }
    admitted = absl::UnavailableError(id.status().message());
  }
  if (admitting_by_owner_[owner] == 0) admitting_by_owner_.erase(owner);
  return admitted;
}

void CoordinatorCore::EndAdmissionLocked(const std::string& owner) {
  --admitting_;
  if (--admitting_by_owner_[owner] <= 0) admitting_by_owner_.erase(owner);
}

absl::StatusOr<JobStatus> CoordinatorCore::GetJob(
    const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(auto* job, FindJobLocked(job_id));
  return StatusOfLocked(*job);
}

absl::StatusOr<JobPage> CoordinatorCore::ListJobs(
    int64_t page_size, const std::string& page_token) const {
  ASSIGN_OR_RETURN(const int size,
                   PageSize(page_size, kDefaultJobsPage, kMaxJobsPage,
                            "ListJobsRequest.page_size"));
  ASSIGN_OR_RETURN(
      const int64_t after,
      DecodePageToken(page_token, run_, "ListJobsRequest.page_token"));
  absl::MutexLock lock(&mu_);
  // job_order_ is in submission order, as are the jobs' seq.
  auto it = std::partition_point(
      job_order_.begin(), job_order_.end(),
      [&](const std::string& id)
          ABSL_NO_THREAD_SAFETY_ANALYSIS { return jobs_.at(id).seq <= after; });
  JobPage page;
  int64_t last = after;
  size_t bytes = 0;
  for (; it != job_order_.end() && static_cast<int>(page.jobs.size()) < size;
       ++it) {
    const Job& job = jobs_.at(*it);
    JobStatus status = StatusOfLocked(job);
    bytes += status.ByteSizeLong();
    if (bytes > options_.max_jobs_page_bytes && !page.jobs.empty()) break;
    page.jobs.push_back(std::move(status));
    last = job.seq;
  }
  if (it != job_order_.end())
    page.next_page_token = EncodePageToken(run_, last);
  return page;
}

absl::StatusOr<JobState> CoordinatorCore::CancelJob(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(auto* job, FindJobLocked(job_id));
  if (!IsFinal(job->state)) {
    FinishLocked(*job, JobEvent::kCancelled, "cancelled by a client");
  }
  return job->state;
}

absl::StatusOr<PartitionPlan> CoordinatorCore::GetPlan(
    const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    return JobNotFound(job_id);
  }
  if (!it->second.has_plan) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " has no plan yet (it is ",
                     JobStateName(it->second.state), ")"));
  }
  return it->second.plan;
}

// A journal's records by job: each submission, each final status, the
// starts of each attempt and the committed checkpoints, and the order of
// submission.

void CoordinatorCore::RestoreJobLocked(const v1::JobSubmitted& sub,
                                       const JobStatus& snapshot) {
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
  AddJobLocked(std::move(job));
}

void CoordinatorCore::AddJobLocked(Job job) {
  // Ids of this start must not repeat a restored one (the random part
  // alone makes that unlikely; the numbers keep ids in order by eye).
  if (std::optional<int64_t> n = JobIdNumber(job.id, start_tag_)) {
    next_job_ = std::max(next_job_, *n + 1);
  }
  job.seq = next_seq_++;
  job_order_.push_back(job.id);
  const std::string id = job.id;
  jobs_.emplace(id, std::move(job));
}

CoordinatorCore::Job CoordinatorCore::JobFromJournal(
    const v1::JobSubmitted& sub) const {
  Job job;
  job.id = sub.job_id();
  job.owner = sub.owner();
  job.spec = sub.spec();
  job.has_profile = sub.has_profile();
  job.profile = sub.profile();
  job.submitted = absl::FromUnixMillis(sub.submitted_ms());
  job.pending_since = clock_->Now();
  job.workers_needed = std::max(1, sub.spec().pipeline().workers());
  job.total_steps = sub.total_steps();
  job.ledger = JobLedger(sub.spec().batch_size());
  job.resume = sub.resume();
  job.max_restarts = MaxRestarts(sub.spec());
  return job;
}

void CoordinatorCore::AdoptJobLocked(
    Job job, const std::vector<v1::JobStarted>& starts) {
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
  job.adopted_at = clock_->Now();
  job.checkpoint_asked = job.adopted_at;  // Timed checkpoints count anew.
  AddJobLocked(std::move(job));
}

absl::Status CoordinatorCore::OpenJournal(const std::string& path) {
  const std::string dir = DirName(path);
  RETURN_IF_ERROR(logs_.Open(dir + "/logs"));
  RETURN_IF_ERROR(traces_.Open(dir + "/traces"));
  ASSIGN_OR_RETURN(JournalContents contents, JobJournal::Read(path));
  if (!contents.damaged.empty()) {
    const std::string copy =
        absl::StrCat(path, ".corrupt-", absl::ToUnixSeconds(clock_->Now()));
    std::error_code ec;
    std::filesystem::copy_file(path, copy, ec);
    // No job that lost a record comes back PENDING or RUNNING: it may have
    // finished since.
    const LostJobs lost = FailJobsWithLostRecords(&contents, ec ? path : copy);
    AQ_LOG_ERROR("journal {}: {} (the file as it was is kept as {}{})", path,
                 DescribeDamage(contents, lost), copy,
                 ec ? absl::StrCat(": copy failed: ", ec.message()) : "");
  }
  JournalIndex index = IndexJournal(contents.records);
  std::vector<v1::JournalRecord> kept;
  int adopted = 0, requeued = 0;
  {
    absl::MutexLock lock(&mu_);
    for (const RestoreStep& step : PlanRestore(index)) {
      const std::string& id = step.job_id;
      if (jobs_.count(id) > 0) continue;
      const v1::JobSubmitted& sub = index.submitted[id];
      switch (step.how) {
        case Restore::kFinished:
          RestoreJobLocked(sub, index.finished.at(id));
          break;
        case Restore::kAdopt:
          AdoptJobLocked(JobFromJournal(sub), index.started.at(id));
          ++adopted;
          break;
        case Restore::kRequeue:
          AddJobLocked(JobFromJournal(sub));
          ++requeued;
          break;
      }
      auto& committed = index.checkpoints[id];
      KeepNewestCheckpoints(CheckpointsKept(sub.spec()), &committed);
      jobs_.at(id).checkpoints = std::move(committed);
    }
    TrimFinishedLocked();
    kept = CompactionLocked(index);
  }
  auto journal = JobJournal::Create(path, kept);
  if (!journal.ok()) {
    // The file is as it was (the rewrite goes through a temporary file).
    absl::MutexLock lock(&mu_);
    journal_error_ = std::string(journal.status().message());
    journal_path_ = path;
    journal_index_ = std::make_unique<JournalIndex>(std::move(index));
    journal_retry_at_ = clock_->Now() + absl::Seconds(5);
    AQ_LOG_ERROR(
        "journal {}: {}; serving without recording: new jobs are "
        "refused until there is room (tried again every 5 s)",
        path, journal_error_);
  } else {
    absl::MutexLock lock(&journal_mu_);
    journal_ = *std::move(journal);
  }
  AQ_LOG_INFO("journal {}: {} job(s); {} running taken back, {} pending again",
              path, index.order.size(), adopted, requeued);
  absl::MutexLock lock(&mu_);
  ScheduleLocked();
  return absl::OkStatus();
}

std::vector<v1::JournalRecord> CoordinatorCore::JournalRecordsNowLocked(
    std::set<std::string>* ended) const {
  std::vector<v1::JournalRecord> records = CompactionLocked(*journal_index_);
  for (const std::string& id : job_order_) {
    const Job& job = jobs_.at(id);
    if (job.restored || !IsFinal(job.state)) continue;
    v1::JournalRecord fin;
    *fin.mutable_finished() = StatusOfLocked(job);
    records.push_back(std::move(fin));
    ended->insert(id);
  }
  return records;
}

void CoordinatorCore::RetryJournal() {
  std::string path;
  std::vector<v1::JournalRecord> records;
  std::set<std::string> ended;
  {
    absl::MutexLock lock(&mu_);
    if (journal_error_.empty() || journal_index_ == nullptr) return;
    journal_retry_at_ = clock_->Now() + absl::Seconds(5);
    path = journal_path_;
    records = JournalRecordsNowLocked(&ended);
  }
  auto journal = JobJournal::Create(path, records);  // The disk, unlocked.
  absl::MutexLock lock(&mu_);
  if (!journal.ok()) {
    journal_error_ = std::string(journal.status().message());
    AQ_LOG_DEBUG("journal {}: still cannot write it: {}", path, journal_error_);
    return;
  }
  std::shared_ptr<JobJournal> opened = *std::move(journal);
  {
    absl::MutexLock j(&journal_mu_);
    journal_ = opened;
  }
  // Jobs that ended while the file was written.
  for (const std::string& id : job_order_) {
    const Job& job = jobs_.at(id);
    if (job.restored || !IsFinal(job.state) || ended.count(id) > 0) continue;
    v1::JournalRecord fin;
    *fin.mutable_finished() = StatusOfLocked(job);
    opened->AppendAsync(std::move(fin));
  }
  journal_error_.clear();
  journal_index_.reset();
  AQ_LOG_INFO("journal {}: written again ({} records); new jobs are accepted",
              path, records.size());
}

std::vector<v1::JournalRecord> CoordinatorCore::CompactionLocked(
    const JournalIndex& index) const {
  std::vector<v1::JournalRecord> kept;
  for (const std::string& id : job_order_) {
    const Job& job = jobs_.at(id);
    auto sub = index.submitted.find(id);
    if (sub == index.submitted.end()) continue;
    v1::JournalRecord r;
    *r.mutable_submitted() = sub->second;
    kept.push_back(std::move(r));
    auto starts = index.started.find(id);
    if (!job.restored && starts != index.started.end()) {
      for (const v1::JobStarted& s : starts->second) {
        v1::JournalRecord started;
        *started.mutable_started() = s;
        kept.push_back(std::move(started));
      }
    }
    for (const auto& [version, m] : job.checkpoints) {
      v1::JournalRecord checkpoint;
      *checkpoint.mutable_checkpoint() = m;
      kept.push_back(std::move(checkpoint));
    }
    if (job.restored) {
      v1::JournalRecord fin;
      *fin.mutable_finished() = job.snapshot;
      kept.push_back(std::move(fin));
    }
  }
  return kept;
}

absl::StatusOr<v1::GetTraceResponse> CoordinatorCore::GetTrace(
    const std::string& job_id) const {
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) {
      return JobNotFound(job_id);
    }
    if (!traces_.is_open()) return it->second.ledger.Trace();
  }
  // The file has every event since the job began, whatever restarts of
  // the coordinator came between; it is read without the table's lock.
  absl::StatusOr<v1::GetTraceResponse> kept = traces_.Read(job_id);
  if (kept.ok() || kept.status().code() != absl::StatusCode::kNotFound) {
    return kept;
  }
  return v1::GetTraceResponse();
}

absl::StatusOr<v1::GetTraceResponse> CoordinatorCore::GetTraceTail(
    const std::string& job_id, absl::Duration window) const {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(auto* job, FindJobLocked(job_id));
  return job->ledger.TraceTail(absl::ToInt64Microseconds(window));
}

absl::StatusOr<bool> CoordinatorCore::JobIsFinal(
    const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(auto* job, FindJobLocked(job_id));
  return IsFinal(job->state);
}

void CoordinatorCore::LogJobEventLocked(const Job& job,
                                        const std::string& level,
                                        const std::string& text) {
  logs_.AppendEvent(job.id, absl::ToUnixMillis(clock_->WallNow()), level, text);
}

CoordinatorCore::JobRecords CoordinatorCore::RecordsOfLocked(
    const Job& job, const std::string& worker_id,
    const StageProgress& p) const {
  JobRecords r;
  r.job_id = job.id;
  r.lines.assign(p.log_lines().begin(), p.log_lines().end());
  // Who wrote them comes from the caller's identity, not the report.
  for (v1::LogLine& line : r.lines) {
    line.set_worker(worker_id);
    line.set_stage(p.stage());
  }
  if (p.events_size() == 0 || IsFinal(job.state)) return r;
  r.trace.set_worker_id(worker_id);
  r.trace.set_stage(p.stage());
  r.trace.set_replica(p.replica());
  *r.trace.mutable_events() = p.events();
  return r;
}

void CoordinatorCore::KeepRecords(JobRecords records) {
  if (records.trace.events_size() == 0) return;
  if (absl::Status s = traces_.Append(records.job_id, records.trace); !s.ok()) {
    AQ_LOG_WARN("job {}: trace not kept on disk: {}", records.job_id,
                s.ToString());
  }
}

void CoordinatorCore::SyncJobRecordsLocked(const Job& job) {
  absl::Status s = executor_->Submit([this, id = job.id] {
    if (absl::Status s = logs_.Sync(id); !s.ok()) {
      AQ_LOG_WARN("job {}: log not synced: {}", id, s.ToString());
    }
    if (absl::Status s = traces_.Sync(id); !s.ok()) {
      AQ_LOG_WARN("job {}: trace not synced: {}", id, s.ToString());
    }
  });
  if (!s.ok()) {
    AQ_LOG_DEBUG("job {}: records not synced: {}", job.id, s.ToString());
  }
}

std::vector<WorkerStatus> CoordinatorCore::ListWorkers() const {
  absl::MutexLock lock(&mu_);
  return registry_.List();
}

std::vector<WorkerStatus> CoordinatorCore::ListWorkersPage(
    const std::string& after_id, size_t max_count, size_t max_bytes,
    bool* more) const {
  absl::MutexLock lock(&mu_);
  return registry_.ListPage(after_id, max_count, max_bytes, more);
}

// ------------------------------------------------------------------ Store

absl::Status CoordinatorCore::CheckStoreWriteLocked(
    const std::string& key) const {
  ASSIGN_OR_RETURN(const StoreKey k, KvStore::ParseKey(key));
  auto it = jobs_.find(k.job_id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("store key ", Quoted(key), ": job ",
                                            k.job_id, " does not exist"));
  }
  const Job& job = it->second;
  if (IsFinal(job.state) || k.attempt != job.attempt) {
    return absl::FailedPreconditionError(absl::StrCat(
        "store key ", Quoted(key), " is of attempt ", k.attempt, " of job ",
        job.id, ", which is not running (the job is ", JobStateName(job.state),
        " at attempt ", job.attempt, ")"));
  }
  return absl::OkStatus();
}

absl::Status CoordinatorCore::StoreSet(const std::string& key,
                                       const std::string& value) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckStoreWriteLocked(key));
  return store_.Set(key, value);
}

absl::StatusOr<int64_t> CoordinatorCore::StoreAdd(const std::string& key,
                                                  int64_t delta) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckStoreWriteLocked(key));
  return store_.Add(key, delta);
}

absl::StatusOr<std::string> CoordinatorCore::StoreGet(const std::string& key,
                                                      absl::Time deadline) {
  return store_.Get(key, deadline);
}

absl::Status CoordinatorCore::CheckStoreAccess(const std::string& worker_id,
                                               const std::string& key) const {
  ASSIGN_OR_RETURN(const StoreKey k, KvStore::ParseKey(key));
  absl::MutexLock lock(&mu_);
  auto worker = registry_.Get(worker_id);
  const bool live = worker.ok() && (worker->state() == v1::WORKER_HEALTHY ||
                                    worker->state() == v1::WORKER_SUSPECT);
  if (live && worker->job_id() == k.job_id) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "worker ", Shown(worker_id), " may not use the store keys of job ",
      k.job_id, ": it is not a live worker assigned to that job"));
}

absl::StatusOr<std::pair<JobStatus, int64_t>> CoordinatorCore::WaitForJob(
    const std::string& job_id, int64_t seen_version, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto changed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = jobs_.find(job_id);
    return it == jobs_.end() || it->second.version != seen_version ||
           shutting_down_;
  };
  AwaitMonotonic(mu_, absl::Condition(&changed), deadline);
  ASSIGN_OR_RETURN(auto* job, FindJobLocked(job_id));
  return std::make_pair(StatusOfLocked(*job), job->version);
}

JobStatus CoordinatorCore::StatusOfLocked(const Job& job) const {
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
  auto schedule = ParseSchedule(job.spec.pipeline().schedule());
  s.set_schedule(
      ScheduleName(schedule.ok() ? *schedule : v1::SCHEDULE_UNSPECIFIED));
  if (HasTestSplit(job.spec.data())) {
    s.set_eval_split(job.spec.data().has_text() ? "validation" : "test");
  }
  auto state_of =
      [this](const std::string& worker_id) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        auto worker = registry_.Get(worker_id);
        return worker.ok() ? worker->state() : v1::WORKER_STATE_UNSPECIFIED;
      };
  job.ledger.FillStatus(job.stage_workers, state_of, &s);
  s.set_attempt(job.attempt);
  *s.mutable_restarts() = {job.restarts.begin(), job.restarts.end()};
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

bool CoordinatorCore::TransitionLocked(Job& job, JobEvent event,
                                       const std::string& reason) {
  auto t = NextJobState(job.state, event);
  if (!t.ok()) {
    AQ_LOG_DEBUG("job {}: {}", job.id, t.status().ToString());
    return false;
  }
  job.state = t->to;
  ++job.version;
  if (t->to == v1::JOB_RUNNING) {
    job.started = clock_->WallNow();
    // Timed checkpoints count from here (monotonic; `started` is shown).
    job.checkpoint_asked = std::max(job.checkpoint_asked, clock_->Now());
  }
  LogJobEventLocked(
      job,
      t->to == v1::JOB_FAILED || (t->to == v1::JOB_PENDING && !reason.empty())
          ? "warn"
          : "info",
      absl::StrCat("job ", JobStateName(t->to),
                   reason.empty() ? "" : absl::StrCat(": ", reason)));
  if (!t->finished) return true;
  SyncJobRecordsLocked(job);
  job.reason = reason;
  job.finished = clock_->WallNow();
  if (const std::shared_ptr<JobJournal> journal = Journal()) {
    v1::JournalRecord record;
    *record.mutable_finished() = StatusOfLocked(job);
    journal->AppendAsync(std::move(record));
  }
  ReleaseWorkersLocked(job, t->stop_workers, reason);
  store_.DeletePrefix(absl::StrCat("jobs/", job.id, "/"));
  RemoveUncommittedLocked(job);
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
      logs_.Remove(*it);
      traces_.Remove(*it);
      jobs_.erase(job);
      it = job_order_.erase(it);
      --finished;
    } else {
      ++it;
    }
  }
}

std::string CoordinatorCore::WhereInJob(const Job& job,
                                        const std::string& worker_id) {
  for (size_t st = 0; st < job.stage_workers.size(); ++st) {
    for (size_t r = 0; r < job.stage_workers[st].size(); ++r) {
      if (job.stage_workers[st][r] == worker_id) {
        return absl::StrCat("stage ", st, ", replica ", r);
      }
    }
  }
  return "reserved for the job";
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
    job.awaiting.erase(c.worker_id);
    RestartOrFailLocked(
        job,
        absl::StrCat("worker ", c.worker_id, " (", WhereInJob(job, c.worker_id),
                     ") is ", WorkerStateName(c.to), ": ", c.detail));
  }
}

void CoordinatorCore::ForgetWorkersLocked(
    const std::vector<WorkerStatus>& forgotten) {
  for (const WorkerStatus& w : forgotten) {
    AQ_LOG_INFO("worker {} forgotten: {} for {}", w.info().worker_id(),
                WorkerStateName(w.state()),
                absl::FormatDuration(options_.registry.forget_after));
    // A worker leaves its job when it ends (the transition restarts or
    // fails the job), so none should still hold one; if one did, the job
    // must not wait for a worker nobody knows any more.
    auto it = jobs_.find(w.job_id());
    if (w.job_id().empty() || it == jobs_.end() || IsFinal(it->second.state)) {
      continue;
    }
    RestartOrFailLocked(
        it->second, absl::StrCat("worker ", w.info().worker_id(), " (",
                                 WhereInJob(it->second, w.info().worker_id()),
                                 ") is gone: ", WorkerStateName(w.state()),
                                 " and forgotten"));
  }
}

void CoordinatorCore::Tick() {
  bool retry_journal = false;
  {
    absl::MutexLock lock(&mu_);
    HandleTransitionsLocked(registry_.Tick());
    ForgetWorkersLocked(registry_.ForgetFinal());
    const absl::Time now = clock_->Now();
    CheckAdoptionsLocked(now);
    RequestCheckpointsLocked(now);
    ExpirePendingLocked(now);
    ScheduleLocked();
    retry_journal = !journal_error_.empty() && now >= journal_retry_at_;
  }
  if (retry_journal) RetryJournal();
}

absl::Duration CoordinatorCore::WaitForWorkers(const Job& job) const {
  const int64_t wait_ms = job.spec.pipeline().wait_for_workers_ms();
  const absl::Duration wait = wait_ms > 0 ? absl::Milliseconds(wait_ms)
                                          : options_.default_wait_for_workers;
  return std::min(wait, options_.max_wait_for_workers);
}

void CoordinatorCore::ExpirePendingLocked(absl::Time now) {
  // Ids first: failing a job trims the table, which job_order_ lists.
  std::vector<std::string> expired;
  for (const std::string& id : job_order_) {
    const Job& job = jobs_.at(id);
    if (job.state == v1::JOB_PENDING &&
        now - job.pending_since >= WaitForWorkers(job)) {
      expired.push_back(id);
    }
  }
  for (const std::string& id : expired) {
    auto it = jobs_.find(id);
    if (it == jobs_.end() || it->second.state != v1::JOB_PENDING) continue;
    Job& job = it->second;
    FinishLocked(
        job, JobEvent::kFailed,
        absl::StrFormat(
            "timed out after %.1f s waiting for %d healthy idle worker(s) "
            "(%d available)",
            absl::ToDoubleSeconds(WaitForWorkers(job)), job.workers_needed,
            static_cast<int>(registry_.IdleHealthyWorkers().size())));
  }
}

int CoordinatorCore::LiveWorkersLocked() const {
  int live = 0;
  for (const WorkerStatus& w : registry_.List()) {
    if (w.state() == v1::WORKER_HEALTHY) ++live;
  }
  return live;
}

void CoordinatorCore::ScheduleLocked() {
  if (shutting_down_) return;
  const absl::Time now = clock_->Now();
  std::vector<std::string> pending;
  std::vector<QueuedJob> queue;
  bool reserving = false;
  for (const std::string& id : job_order_) {
    const Job& job = jobs_.at(id);
    if (job.state != v1::JOB_PENDING) continue;
    QueuedJob q;
    // A restarted job goes on with the workers there are (re-planned for
    // fewer, when none is spare); a new one waits for all it asks for.
    q.least = job.attempt > 0 ? 1 : job.workers_needed;
    q.wanted = job.workers_needed;
    q.waited = now - job.pending_since;
    reserving = reserving || q.waited >= options_.reserve_after;
    pending.push_back(id);
    queue.push_back(q);
  }
  if (pending.empty()) return;
  std::vector<std::string> idle = registry_.IdleHealthyWorkers();
  if (idle.empty()) return;
  // Counting every worker is needed only to decide a hold.
  const std::vector<int> placed = PlaceQueuedJobs(
      queue, static_cast<int>(idle.size()), reserving ? LiveWorkersLocked() : 0,
      options_.reserve_after);
  std::vector<std::pair<std::string, std::string>> unstarted;  // Id, why.
  auto next = idle.begin();
  for (size_t i = 0; i < pending.size(); ++i) {
    if (placed[i] == 0) continue;
    Job& job = jobs_.at(pending[i]);
    // Spares before the workers a stage could not reach (the order of
    // the others kept).
    std::stable_partition(next, idle.end(), [&job](const std::string& w) {
      return job.unreachable_peers.count(w) == 0;
    });
    job.reserved.assign(next, next + placed[i]);
    next += placed[i];
    for (const std::string& w : job.reserved) {
      registry_.Assign(w, job.id, -1, -1);
    }
    TransitionLocked(job, JobEvent::kWorkersReserved, "");
    if (absl::Status s = executor_->Submit([this, id = job.id] { Drive(id); });
        !s.ok()) {
      unstarted.emplace_back(job.id, std::string(s.message()));
    }
  }
  // Failing a job schedules again: only once this pass is over.
  for (const auto& [id, why] : unstarted) {
    auto it = jobs_.find(id);
    if (it != jobs_.end()) FinishLocked(it->second, JobEvent::kFailed, why);
  }
}

void CoordinatorCore::StopWorkersAsync(
    std::vector<std::pair<std::string, std::string>> id_and_address,
    std::string job_id, std::string reason, std::optional<int> attempt) {
  auto stop = [this, workers = std::move(id_and_address), job_id,
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
  if (absl::Status s = executor_->Submit(std::move(stop)); !s.ok()) {
    // The workers learn it from their next heartbeat instead.
    AQ_LOG_WARN("stopping job {}: {}", job_id, s.ToString());
  }
}

}  // namespace aqueduct
