#include "coordinator/core.h"

#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/auth.h"
#include "common/logging.h"
#include "common/status.h"
#include "coordinator/job_queries.h"
#include "coordinator/submission.h"

namespace aqueduct {

namespace {

// A random tag for this run of the coordinator (page tokens); the time
// when the kernel gives no randomness, which only uniqueness needs.
uint64_t NewRunTag(absl::Time now) {
  absl::StatusOr<std::string> bytes = SecureRandomBytes(sizeof(uint64_t));
  if (!bytes.ok()) return static_cast<uint64_t>(absl::ToUnixNanos(now));
  uint64_t tag = 0;
  for (char c : *bytes) tag = tag << 8 | static_cast<unsigned char>(c);
  return tag;
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
      jobs_(absl::StrFormat("%x", absl::ToUnixSeconds(clock->WallNow())),
            NewRunTag(clock->WallNow())),
      journal_(clock, mu_, jobs_, *this),
      executor_(std::make_unique<BoundedExecutor>(
          "the job driver", options.driver_threads, options.driver_queue)),
      committer_(std::make_unique<BoundedExecutor>("the checkpoint committer",
                                                   1, options.driver_queue)),
      checkpoints_(
          options_, clock, mu_, jobs_, logs_,
          [this] { return journal_.Journal(); }, *committer_),
      intake_(options_, clock, registry_, jobs_, logs_, checkpoints_, *this),
      workers_(options_, registry_, jobs_, *this),
      scheduler_(options_, clock, registry_, jobs_, *this),
      recovery_(options_, clock, mu_, registry_, jobs_, store_, workers_, *this,
                worker_clients_, *executor_),
      lifecycle_(options_, clock, mu_, jobs_,
                 {store_, logs_, traces_, journal_, checkpoints_, recovery_,
                  *executor_},
                 *this),
      store_access_(registry_, jobs_, store_),
      driver_(
          options_, mu_, registry_, jobs_, *this, worker_clients_,
          [this] { return journal_.Journal(); }, *executor_) {}

CoordinatorCore::~CoordinatorCore() {
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
  }
  committer_.reset();
  executor_.reset();  // Drivers see shutting_down_ and end; joined here.
}

// ------------------------------------------------------------ Job events

bool CoordinatorCore::Transition(Job& job, JobEvent event,
                                 const std::string& reason) {
  mu_.AssertHeld();
  return lifecycle_.TransitionLocked(job, event, reason);
}

void CoordinatorCore::RestartOrFail(Job& job, const std::string& reason) {
  mu_.AssertHeld();
  recovery_.RestartOrFailLocked(job, reason);
}

void CoordinatorCore::WorkerLost(Job& job, const std::string& worker_id,
                                 const std::string& reason) {
  mu_.AssertHeld();
  if (!recovery_.TolerateLossLocked(job, worker_id, reason)) {
    recovery_.RestartOrFailLocked(job, reason);
    return;
  }
  const v1::ToleratedLoss& lost = job.tolerated_losses.back();
  logs_.AppendEvent(
      job.id, ToUnixMillisOr0(clock_->WallNow()), "warn",
      absl::StrCat("worker ", worker_id, " (stage ", lost.stage(), ", replica ",
                   lost.replica(), ") lost at step ", lost.step(),
                   ", tolerated: it hosts no parameter shard; the job goes "
                   "on without its share of each minibatch: ",
                   reason));
}

void CoordinatorCore::Probe(Job& job, const std::string& error) {
  mu_.AssertHeld();
  recovery_.ProbeLocked(job, error);
}

JobStatus CoordinatorCore::StatusOf(const Job& job) const {
  mu_.AssertHeld();
  return StatusOfLocked(job);
}

absl::Status CoordinatorCore::StartDriver(const std::string& job_id) {
  return executor_->Submit([this, job_id] { driver_.Drive(job_id); });
}

bool CoordinatorCore::ShuttingDown() const {
  mu_.AssertHeld();
  return shutting_down_;
}

void CoordinatorCore::Schedule() {
  mu_.AssertHeld();
  ScheduleLocked();
}

void CoordinatorCore::TrimFinished() {
  mu_.AssertHeld();
  lifecycle_.TrimFinishedLocked();
}

// ------------------------------------------------------------------ Workers

absl::Status CoordinatorCore::RegisterWorker(const WorkerInfo& info,
                                             const v1::StageClaim* running) {
  absl::MutexLock lock(&mu_);
  return workers_.Register(info, running);
}

absl::StatusOr<CoordinatorCore::HeartbeatReply> CoordinatorCore::Heartbeat(
    const std::string& worker_id, const std::string& incarnation,
    const std::string& job_id, int attempt) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(WorkerLifecycle::Reply r,
                   workers_.Heartbeat(worker_id, incarnation, job_id, attempt));
  HeartbeatReply reply;
  reply.stop_jobs = std::move(r.stop_jobs);
  reply.checkpoint_at = r.checkpoint_at;
  return reply;
}

absl::Status CoordinatorCore::DeregisterWorker(const std::string& worker_id,
                                               const std::string& incarnation) {
  absl::MutexLock lock(&mu_);
  return workers_.Deregister(worker_id, incarnation);
}

absl::Status CoordinatorCore::ReportProgress(
    const std::string& worker_id, const std::string& incarnation,
    const std::vector<StageProgress>& stages) {
  RETURN_IF_ERROR(ProgressIntake::CheckBatch(worker_id, incarnation, stages));
  std::vector<ProgressIntake::Records> records;
  absl::Status s;
  {
    absl::MutexLock lock(&mu_);
    s = intake_.Report(worker_id, incarnation, stages, &records);
  }
  for (const ProgressIntake::Records& r : records) KeepRecords(r);
  return s;
}

void CoordinatorCore::Tick() {
  bool retry_journal = false;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    workers_.Tick(now);
    checkpoints_.RequestByTimeLocked(
        now, [this](const Job& job) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return StatusOfLocked(job);  // Called under mu_, held here.
        });
    scheduler_.ExpirePending(now);
    ScheduleLocked();
    retry_journal = journal_.RetryDueLocked(now);
  }
  if (retry_journal) RetryJournal();
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

// ------------------------------------------------------------------ Jobs

absl::StatusOr<std::string> CoordinatorCore::SubmitJob(
    const JobSpec& spec, const ModelProfile* profile,
    const std::string& resume_from, const std::string& owner,
    const std::string& owner_role) {
  RETURN_IF_ERROR(CheckSubmissionSizes(spec, profile, resume_from, owner));
  // Sizes are checked against the largest live worker's memory
  // (pipeline/limits.h's default while none has registered).
  int64_t memory = 0;
  int registered = std::numeric_limits<int>::max();  // Not settled: unknown.
  {
    absl::MutexLock lock(&mu_);
    memory = LargestLiveWorkerMemory(registry_);
    if (scheduler_.Settled(clock_->Now())) {
      registered = static_cast<int>(registry_.size());
    }
  }
  ASSIGN_OR_RETURN(const SpecSummary valid,
                   CheckSpecAndProfile(spec, profile, memory));
  RETURN_IF_ERROR(CheckPriority(spec, owner_role, options_.max_user_priority));
  RETURN_IF_ERROR(CheckWorkersExist(spec, valid.pipeline.workers, registered));
  RETURN_IF_ERROR(checkpoints_.CheckDir(spec));
  v1::CheckpointManifest resume;
  if (!resume_from.empty()) {
    ASSIGN_OR_RETURN(resume, checkpoints_.ResolveResume(spec, resume_from));
  }
  ASSIGN_OR_RETURN(const int64_t total, KnownTotalSteps(spec, valid));
  std::string id;
  {
    absl::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(id, AdmitLocked(owner));
  }
  // Submitted is shown; intervals use Now().
  Job job = NewJob(id, owner, spec, profile, valid, total, resume,
                   clock_->WallNow(), clock_->Now());
  // Durable before the client hears of it, without holding the lock.
  absl::Status journaled = journal_.AppendSubmission(job);
  absl::MutexLock lock(&mu_);
  jobs_.EndAdmission(owner);
  if (!journaled.ok()) return journaled;
  jobs_.Add(std::move(job));
  AQ_LOG_INFO("job {} submitted by {}: {} on {} worker(s), {} steps", id,
              owner.empty() ? "an unauthenticated caller" : owner, spec.name(),
              valid.pipeline.workers, total);
  ScheduleLocked();
  return id;
}

absl::StatusOr<std::string> CoordinatorCore::AdmitLocked(
    const std::string& owner) {
  if (const std::string error = journal_.ErrorLocked(); !error.empty()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the coordinator cannot record new jobs (", error,
        "); it accepts them again once its state directory has room (it "
        "tries every 5 s)"));
  }
  QueueLimits limits;
  limits.max_pending = options_.max_pending_jobs;
  limits.max_per_user = options_.max_jobs_per_user;
  return jobs_.Admit(owner, limits);
}

absl::StatusOr<JobStatus> CoordinatorCore::GetJob(
    const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(const Job* job, jobs_.Find(job_id));
  return StatusOfLocked(*job);
}

absl::StatusOr<JobPage> CoordinatorCore::ListJobs(
    int64_t page_size, const std::string& page_token) const {
  absl::MutexLock lock(&mu_);
  // The queue's order once for the page, not once per pending job.
  const std::vector<const Job*> order = scheduler_.QueueOrder();
  return jobs_.Page(page_size, page_token, options_.max_jobs_page_bytes,
                    [this, &order](const Job& job)
                        ABSL_NO_THREAD_SAFETY_ANALYSIS {
                          // Under mu_, held here.
                          return StatusOfLocked(job, &order);
                        });
}

absl::StatusOr<JobState> CoordinatorCore::CancelJob(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Job * job, jobs_.Find(job_id));
  if (!IsFinal(job->state)) {
    lifecycle_.TransitionLocked(*job, JobEvent::kCancelled,
                                "cancelled by a client");
  }
  return job->state;
}

absl::StatusOr<PartitionPlan> CoordinatorCore::GetPlan(
    const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(const Job* job, jobs_.Find(job_id));
  return PlanOf(*job);
}

absl::StatusOr<v1::GetTraceResponse> CoordinatorCore::GetTrace(
    const std::string& job_id) const {
  std::string id;  // Whole: `job_id` may be a unique prefix of it.
  {
    absl::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(const Job* job, jobs_.Find(job_id));
    if (!traces_.is_open()) return job->ledger.Trace();
    id = job->id;
  }
  // The file has every event since the job began, whatever restarts of
  // the coordinator came between; it is read without the table's lock.
  absl::StatusOr<v1::GetTraceResponse> kept = traces_.Read(id);
  if (kept.ok() || kept.status().code() != absl::StatusCode::kNotFound) {
    return kept;
  }
  return v1::GetTraceResponse();
}

absl::StatusOr<v1::GetTraceResponse> CoordinatorCore::GetTraceTail(
    const std::string& job_id, absl::Duration window) const {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(const Job* job, jobs_.Find(job_id));
  return job->ledger.TraceTail(absl::ToInt64Microseconds(window));
}

absl::StatusOr<bool> CoordinatorCore::JobIsFinal(
    const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(const Job* job, jobs_.Find(job_id));
  return IsFinal(job->state);
}

absl::StatusOr<std::pair<JobStatus, int64_t>> CoordinatorCore::WaitForJob(
    const std::string& job_id, int64_t seen_version, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto changed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const Job* job = jobs_.Get(job_id);
    return job == nullptr || job->version != seen_version || shutting_down_;
  };
  AwaitMonotonic(mu_, absl::Condition(&changed), deadline);
  ASSIGN_OR_RETURN(const Job* job, jobs_.Find(job_id));
  return std::make_pair(StatusOfLocked(*job), job->version);
}

JobStatus CoordinatorCore::StatusOfLocked(
    const Job& job, const std::vector<const Job*>* order) const {
  JobStatus status = aqueduct::StatusOf(
      job, [this](const std::string& worker_id) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        auto worker = registry_.Get(worker_id);  // Under mu_, held here.
        return worker.ok() ? worker->state() : v1::WORKER_STATE_UNSPECIFIED;
      });
  status.set_priority(job.spec.priority());
  if (job.state == v1::JOB_PENDING) {
    const Scheduler::Standing standing =
        order != nullptr ? scheduler_.StandingOf(job, *order)
                         : scheduler_.StandingOf(job, scheduler_.QueueOrder());
    status.set_queue_position(standing.position);
    status.set_waiting_for(standing.waiting_for);
  }
  return status;
}

void CoordinatorCore::ScheduleLocked() { scheduler_.Schedule(); }

// ------------------------------------------------------------------ Store

absl::Status CoordinatorCore::StoreSet(const std::string& key,
                                       const std::string& value) {
  absl::MutexLock lock(&mu_);
  return store_access_.Set(key, value);
}

absl::StatusOr<int64_t> CoordinatorCore::StoreAdd(const std::string& key,
                                                  int64_t delta) {
  absl::MutexLock lock(&mu_);
  return store_access_.Add(key, delta);
}

absl::StatusOr<std::string> CoordinatorCore::StoreGet(const std::string& key,
                                                      absl::Time deadline) {
  return store_.Get(key, deadline);
}

absl::Status CoordinatorCore::CheckStoreAccess(const std::string& worker_id,
                                               const std::string& key) const {
  absl::MutexLock lock(&mu_);
  return store_access_.CheckWorker(worker_id, key);
}

// ------------------------------------------- Checkpoints and trained models

absl::StatusOr<std::vector<v1::CheckpointManifest>>
CoordinatorCore::ListCheckpoints(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(const Job* job, jobs_.Find(job_id));
  return CheckpointsOf(*job);
}

absl::Status CoordinatorCore::CheckModelUpload(const std::string& worker_id,
                                               const std::string& incarnation,
                                               const std::string& job_id,
                                               int attempt) const {
  absl::MutexLock lock(&mu_);
  return CheckModelUploader(registry_, jobs_, worker_id, incarnation, job_id,
                            attempt);
}

absl::Status CoordinatorCore::RecordModel(const std::string& job_id,
                                          const std::string& path,
                                          int64_t bytes) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Job * job, jobs_.Find(job_id));
  job->model_path = path;
  job->model_bytes = bytes;
  ++job->version;
  AQ_LOG_INFO("job {}: trained model stored as {} ({} bytes)", job_id, path,
              bytes);
  return absl::OkStatus();
}

// ---------------------------------------------------------------- Journal

absl::Status CoordinatorCore::OpenJournal(const std::string& path) {
  const std::string dir = DirName(path);
  RETURN_IF_ERROR(logs_.Open(dir + "/logs"));
  RETURN_IF_ERROR(traces_.Open(dir + "/traces"));
  return journal_.Open(path);
}

void CoordinatorCore::RetryJournal() { journal_.Retry(); }

// ------------------------------------------------------ Job logs and traces

void CoordinatorCore::KeepRecords(const ProgressIntake::Records& records) {
  if (absl::Status s = traces_.Append(records.job_id, records.trace); !s.ok()) {
    AQ_LOG_WARN("job {}: trace not kept on disk: {}", records.job_id,
                s.ToString());
  }
}

}  // namespace aqueduct
