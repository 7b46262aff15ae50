#include "worker/runtime/stage_runtime.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log_buffer.h"
#include "common/logging.h"
#include "pipeline/failure.h"
#include "worker/runtime/layout.h"
#include "worker/runtime/stage_job.h"

namespace aqueduct {

namespace {

ProgressOptions ProgressOptionsFor(const StageRuntimeOptions& options) {
  ProgressOptions progress;
  progress.clock = options.clock;
  progress.logs = options.logs;
  return progress;
}

}  // namespace

StageRuntime::StageRuntime(const StageRuntimeOptions& options,
                           DataPlaneFactory* data_plane, RendezvousStore* store)
    : options_(options),
      data_plane_(data_plane),
      store_(store),
      progress_(ProgressOptionsFor(options)) {}

StageRuntime::~StageRuntime() { Shutdown(); }

bool StageRuntime::IdleFor(const StageAssignment& a) const {
  return !(has_assignment_ && HoldsWorker(phase_) &&
           (assignment_.job_id() != a.job_id() ||
            assignment_.attempt() != a.attempt()));
}

absl::Status StageRuntime::Assign(const StageAssignment& a) {
  if (absl::Status s = CheckAssignment(a); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  if (has_assignment_ && HoldsWorker(phase_) &&
      assignment_.job_id() == a.job_id() &&
      assignment_.attempt() < a.attempt()) {
    AQ_LOG_INFO("job {}: attempt {} replaces attempt {} here", a.job_id(),
                a.attempt(), assignment_.attempt());
    stop_ = true;
    AbortLocked();
    if (phase_ == RuntimePhase::kAssigned) phase_ = RuntimePhase::kStopped;
  }
  auto idle = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return IdleFor(a); };
  // The coordinator may assign the next job just before this worker has
  // seen, or finished, the stop of its previous one (stops are sent
  // asynchronously): give the previous run a moment to end.
  mu_.AwaitWithTimeout(absl::Condition(&idle), options_.busy_wait);
  if (!idle()) {
    v1::StageFailure busy;
    busy.set_cause(v1::FAILURE_BUSY_WITH_EARLIER_ATTEMPT);
    busy.set_job_id(assignment_.job_id());
    return WithFailure(
        absl::FailedPreconditionError(absl::StrCat(
            "this worker is busy with job ", assignment_.job_id())),
        busy);
  }
  if (phase_ == RuntimePhase::kRunning) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", a.job_id(), " is already running here"));
  }
  assignment_ = a;
  has_assignment_ = true;
  phase_ = RuntimePhase::kAssigned;
  progress_.Reset(a.job_id(), a.stage(), a.replica(), a.attempt());
  chunk_progress_.clear();
  for (int s = 0; s < a.plan().stages_size(); ++s) {
    const auto& ranks = a.plan().stages(s).worker_ranks();
    if (s == a.stage() ||
        std::find(ranks.begin(), ranks.end(), a.rank()) == ranks.end()) {
      continue;
    }
    ProgressOptions chunk_options = ProgressOptionsFor(options_);
    chunk_options.logs = nullptr;  // The job's log goes with its first stage.
    auto chunk = std::make_unique<ProgressAccumulator>(chunk_options);
    chunk->Reset(a.job_id(), s, a.replica(), a.attempt());
    chunk_progress_[s] = std::move(chunk);
  }
  return absl::OkStatus();
}

absl::Status StageRuntime::Start(const std::string& job_id) {
  StageAssignment a;
  {
    absl::MutexLock lock(&mu_);
    if (!has_assignment_ || assignment_.job_id() != job_id) {
      return absl::NotFoundError(
          absl::StrCat("job ", job_id, " is not assigned to this worker"));
    }
    if (phase_ == RuntimePhase::kRunning) return absl::OkStatus();
    if (phase_ != RuntimePhase::kAssigned) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job_id, " already ", PhaseName(phase_)));
    }
    phase_ = RuntimePhase::kRunning;
    a = assignment_;
  }
  absl::MutexLock lock(&thread_mu_);
  if (thread_.joinable()) thread_.join();
  stop_ = false;
  checkpoint_at_ = 0;
  thread_ = std::thread([this, a = std::move(a)] { Run(a); });
  return absl::OkStatus();
}

void StageRuntime::AbortLocked() {
  // Ends waits on peers now rather than at the peer deadline.
  if (active_plane_ != nullptr) active_plane_->Abort();
}

absl::Status StageRuntime::Stop(const std::string& job_id,
                                const std::string& reason,
                                std::optional<int> attempt) {
  absl::MutexLock lock(&mu_);
  if (!has_assignment_ || assignment_.job_id() != job_id ||
      (attempt.has_value() && *attempt != assignment_.attempt())) {
    return absl::OkStatus();
  }
  AQ_LOG_INFO("stopping job {}: {}", job_id, reason);
  stop_ = true;
  AbortLocked();
  if (phase_ == RuntimePhase::kAssigned) phase_ = RuntimePhase::kStopped;
  return absl::OkStatus();
}

void StageRuntime::RequestCheckpoint(const std::string& job_id,
                                     int64_t version) {
  absl::MutexLock lock(&mu_);
  if (has_assignment_ && assignment_.job_id() == job_id) {
    checkpoint_at_ = version;
  }
}

void StageRuntime::Shutdown() {
  stop_ = true;
  {
    absl::MutexLock lock(&mu_);
    AbortLocked();
  }
  absl::MutexLock lock(&thread_mu_);
  if (thread_.joinable()) thread_.join();
}

void StageRuntime::SetDataPlane(const DataPlane* plane) {
  absl::MutexLock lock(&mu_);
  // The plane is forgotten just before it closes: a stop requested by then
  // came before any peer could see this stage's connections close.
  if (plane == nullptr && active_plane_ != nullptr) {
    stopped_before_close_ = stop_.load();
  }
  active_plane_ = plane;
  if (plane != nullptr && stop_.load()) plane->Abort();  // Stopped meanwhile.
}

void StageRuntime::Run(const StageAssignment& a) {
  // What this thread logs from here on belongs to the job's log (aq logs).
  ScopedJobLogContext log_context(a.job_id(), a.stage());
  AQ_LOG_INFO("job {}: stage {} replica {} (attempt {}) starting", a.job_id(),
              a.stage(), a.replica(), a.attempt());
  {
    absl::MutexLock lock(&mu_);
    stopped_before_close_ = false;
  }
  JobEnv env;
  env.device = options_.device;
  env.threads = options_.threads;
  env.memory_bytes = options_.memory_bytes;
  env.data_plane = data_plane_;
  env.store = store_;
  env.peer_timeout = options_.peer_timeout;
  env.evaluate_in_background = options_.evaluate_in_background;
  env.slowdown = options_.slowdown;
  env.stop = &stop_;
  env.progress = &progress_;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [stage, chunk] : chunk_progress_) {
      env.chunk_progress[stage] = chunk.get();
    }
  }
  env.on_data_plane = [this](const DataPlane* plane) { SetDataPlane(plane); };
  env.model_sink = options_.model_sink;
  env.checkpoint_at = &checkpoint_at_;
  env.files = options_.files;
  env.files.stop = &stop_;
  const absl::Status status =
      RunsLocally(a.plan()) ? RunLocalJob(a, env) : RunPipelineJob(a, env);
  End(a, status);
}

void StageRuntime::End(const StageAssignment& a, const absl::Status& status) {
  RuntimePhase phase = RuntimePhase::kFinished;
  if (status.ok()) {
    progress_.Finish();
    absl::MutexLock lock(&mu_);
    for (auto& [stage, chunk] : chunk_progress_) chunk->Finish();
  } else if (StopExplains(status)) {
    phase = RuntimePhase::kStopped;
    AQ_LOG_INFO("job {}: stopped ({})", a.job_id(),
                std::string(status.message()));
  } else {
    phase = RuntimePhase::kFailed;
    progress_.Fail(status);
    AQ_LOG_WARN("job {} failed: {}", a.job_id(), status.ToString());
  }
  absl::MutexLock lock(&mu_);
  phase_ = phase;
}

bool StageRuntime::StopExplains(const absl::Status& status) {
  if (status.code() == absl::StatusCode::kCancelled) return true;
  absl::MutexLock lock(&mu_);
  if (stopped_before_close_) return true;
  // A stop that came later (the plane already closed, or there was none)
  // still explains a peer's closed connection or an interrupted wait: the
  // stop closes the peers too. It does not explain this stage's own failure
  // (a missing file, a bad spec): the stop is often the coordinator's answer
  // to that very failure, seen first at a peer once this stage's connections
  // closed, and arriving before End() ran.
  return stop_.load() && (status.code() == absl::StatusCode::kUnavailable ||
                          status.code() == absl::StatusCode::kDeadlineExceeded);
}

std::vector<StageProgress> StageRuntime::TakeProgress() {
  std::vector<StageProgress> out;
  if (std::optional<StageProgress> p = progress_.Take()) {
    out.push_back(*std::move(p));
  }
  absl::MutexLock lock(&mu_);
  for (auto& [stage, chunk] : chunk_progress_) {
    if (std::optional<StageProgress> p = chunk->Take()) {
      out.push_back(*std::move(p));
    }
  }
  return out;
}

std::string StageRuntime::current_job() const {
  absl::MutexLock lock(&mu_);
  return has_assignment_ && HoldsWorker(phase_) ? assignment_.job_id() : "";
}

std::optional<v1::StageClaim> StageRuntime::Claim() const {
  absl::MutexLock lock(&mu_);
  // A finished or failed stage still claims its job: its last reports (the
  // end of the job, or its failure) may not have reached a coordinator that
  // restarted.
  if (!has_assignment_ ||
      !(HoldsWorker(phase_) || phase_ == RuntimePhase::kFinished ||
        phase_ == RuntimePhase::kFailed)) {
    return std::nullopt;
  }
  v1::StageClaim claim;
  claim.set_job_id(assignment_.job_id());
  claim.set_attempt(assignment_.attempt());
  claim.set_stage(assignment_.stage());
  claim.set_replica(assignment_.replica());
  return claim;
}

RuntimePhase StageRuntime::phase() const {
  absl::MutexLock lock(&mu_);
  return phase_;
}

WorkerRuntimeStatus StageRuntime::Status() const {
  WorkerRuntimeStatus s;
  s.set_minibatches_done(progress_.minibatches_done());
  absl::MutexLock lock(&mu_);
  s.set_phase(PhaseName(phase_));
  if (has_assignment_) {
    s.set_job_id(assignment_.job_id());
    s.set_stage(assignment_.stage());
    s.set_replica(assignment_.replica());
  }
  return s;
}

}  // namespace aqueduct
