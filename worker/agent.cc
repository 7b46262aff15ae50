#include "worker/agent.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "worker/runtime/stage_runtime.h"

namespace aqueduct {

namespace {

// The daemon's StageRuntime as the agent's AgentRuntime.
class StageRuntimeAdapter final : public AgentRuntime {
 public:
  explicit StageRuntimeAdapter(StageRuntime* runtime) : runtime_(runtime) {}
  std::vector<StageProgress> TakeProgress() override {
    return runtime_->TakeProgress();
  }
  std::string current_job() const override { return runtime_->current_job(); }
  absl::Status Stop(const std::string& job_id,
                    const std::string& reason) override {
    return runtime_->Stop(job_id, reason);
  }
  std::optional<v1::StageClaim> Claim() const override {
    return runtime_->Claim();
  }
  absl::Status StopAttempt(const std::string& job_id, int attempt,
                           const std::string& reason) override {
    return runtime_->Stop(job_id, reason, attempt);
  }
  void RequestCheckpoint(const std::string& job_id, int64_t version) override {
    runtime_->RequestCheckpoint(job_id, version);
  }

 private:
  StageRuntime* const runtime_;
};

// Worth keeping a report for: the coordinator may not have seen it.
bool Unreached(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s);
}

}  // namespace

std::string NewIncarnationId() {
  std::random_device rd;
  const uint64_t a = (uint64_t{rd()} << 32) ^ rd();
  return absl::StrFormat("%016x-%x", a,
                         absl::ToUnixMicros(absl::Now()) & 0xffffff);
}

WorkerAgent::WorkerAgent(const AgentOptions& options, AgentRuntime* runtime,
                         CoordinatorClient* client, const Clock* clock)
    : options_(options),
      runtime_(runtime),
      client_(client),
      clock_(clock),
      backoff_(options.initial_backoff),
      rng_(options.seed != 0 ? options.seed : std::random_device{}()) {
  info_ = options_.info;
  if (info_.incarnation().empty()) info_.set_incarnation(NewIncarnationId());
}

WorkerAgent::WorkerAgent(const AgentOptions& options,
                         std::unique_ptr<AgentRuntime> owned_runtime,
                         CoordinatorClient* client)
    : WorkerAgent(options, owned_runtime.get(), client, RealClock::Get()) {
  // The delegated constructor only stored the pointer; take ownership.
  owned_runtime_ = std::move(owned_runtime);
}

WorkerAgent::WorkerAgent(const AgentOptions& options, StageRuntime* runtime,
                         CoordinatorClient* client)
    : WorkerAgent(options, std::make_unique<StageRuntimeAdapter>(runtime),
                  client) {}

WorkerAgent::~WorkerAgent() { Stop(); }

void WorkerAgent::Start() {
  thread_ = std::thread([this] { Loop(); });
}

WorkerInfo WorkerAgent::info() const {
  absl::MutexLock lock(&mu_);
  return info_;
}

bool WorkerAgent::registered() const {
  absl::MutexLock lock(&mu_);
  return registered_;
}

bool WorkerAgent::WaitRegistered(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(&registered_), timeout);
}

void WorkerAgent::Loop() {
  while (SleepUntil(RunOnce())) {
  }
}

bool WorkerAgent::SleepUntil(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  // The clock says how long; the wait itself is real time, cut short by
  // Stop().
  mu_.AwaitWithTimeout(absl::Condition(&stopping_), deadline - clock_->Now());
  return !stopping_;
}

absl::Time WorkerAgent::RunOnce() {
  absl::MutexLock loop_lock(&loop_mu_);
  const absl::Time now = clock_->Now();
  if (!registered()) {
    if (now < next_register_ || !RegisterLocked(now)) return next_register_;
  }
  if (now >= next_heartbeat_) {
    HeartbeatLocked(now);
    if (!registered()) return next_register_;
  }
  if (now >= next_progress_) {
    next_progress_ = now + options_.progress_interval;
    SendProgressLocked();
  }
  return std::min(next_heartbeat_, next_progress_);
}

absl::Duration WorkerAgent::NextBackoffLocked() {
  // Exponential backoff with jitter: half to all of the current step.
  std::uniform_real_distribution<double> jitter(0.5, 1.0);
  const absl::Duration wait = backoff_ * jitter(rng_);
  backoff_ = std::min(backoff_ * 2, options_.max_backoff);
  return wait;
}

bool WorkerAgent::RegisterLocked(absl::Time now) {
  v1::RegisterWorkerRequest request;
  *request.mutable_info() = info();
  request.set_control_token(options_.control_token);
  const std::optional<v1::StageClaim> claim = runtime_->Claim();
  if (claim.has_value()) *request.mutable_running() = *claim;
  absl::StatusOr<v1::RegisterWorkerResponse> response =
      client_->RegisterWorker(request, options_.rpc_timeout);
  if (!response.ok()) {
    AQ_LOG_WARN("registering with {} failed: {}", options_.coordinator_address,
                response.status().ToString());
    // Our incarnation is final (or the versions differ, which a new
    // incarnation does not mend, but does not harm either).
    if (absl::IsFailedPrecondition(response.status())) {
      LoseIncarnationLocked(response.status());
    }
    next_register_ = now + NextBackoffLocked();
    return false;
  }
  backoff_ = options_.initial_backoff;
  heartbeat_interval_ =
      std::max(options_.min_heartbeat_interval,
               absl::Milliseconds(response->heartbeat_interval_ms()));
  next_heartbeat_ = now + heartbeat_interval_;
  next_progress_ = now;
  if (claim.has_value() && final_report_.has_value() &&
      final_report_->job_id() == claim->job_id() &&
      final_report_->attempt() == claim->attempt()) {
    KeepProgressLocked(*final_report_);
  }
  absl::MutexLock lock(&mu_);
  registered_ = true;
  AQ_LOG_INFO(
      "registered with coordinator {} (version {}) as {} incarnation {}",
      options_.coordinator_address, response->coordinator_version(),
      info_.worker_id(), info_.incarnation());
  return true;
}

void WorkerAgent::HeartbeatLocked(absl::Time now) {
  next_heartbeat_ = now + heartbeat_interval_;
  const WorkerInfo me = info();
  v1::HeartbeatRequest request;
  request.set_worker_id(me.worker_id());
  request.set_incarnation(me.incarnation());
  request.set_job_id(runtime_->current_job());
  const std::optional<v1::StageClaim> claim = runtime_->Claim();
  if (claim.has_value()) request.set_attempt(claim->attempt());
  absl::StatusOr<v1::HeartbeatResponse> response =
      client_->Heartbeat(request, options_.rpc_timeout);
  if (response.ok()) {
    if (response->checkpoint_at() > 0 && claim.has_value()) {
      runtime_->RequestCheckpoint(claim->job_id(), response->checkpoint_at());
    }
    // The answer is about the attempt this heartbeat named: a later one,
    // assigned while it was on its way, keeps running.
    for (const std::string& job : response->stop_jobs()) {
      const char* why = "the coordinator says the job is over";
      (void)(claim.has_value() && claim->job_id() == job
                 ? runtime_->StopAttempt(job, claim->attempt(), why)
                 : runtime_->Stop(job, why));
    }
  } else if (absl::IsFailedPrecondition(response.status())) {
    // Fenced or expired: our job was failed; start over.
    AQ_LOG_WARN("coordinator refused the heartbeat: {}; re-registering",
                response.status().ToString());
    LoseIncarnationLocked(response.status());
    SetUnregisteredLocked(now, /*keep_progress=*/false);
  } else if (absl::IsNotFound(response.status())) {
    AQ_LOG_WARN(
        "the coordinator does not know this worker ({}); "
        "re-registering",
        response.status().ToString());
    SetUnregisteredLocked(now, /*keep_progress=*/runtime_->Claim().has_value());
  } else {
    AQ_LOG_WARN("heartbeat failed: {}", response.status().ToString());
  }
}

void WorkerAgent::LoseIncarnationLocked(const absl::Status& why) {
  const std::string job = runtime_->current_job();
  if (!job.empty()) {
    (void)runtime_->Stop(
        job,
        absl::StrFormat("this worker's lease was lost: %s", why.message()));
  }
  absl::MutexLock lock(&mu_);
  info_.set_incarnation(NewIncarnationId());
}

void WorkerAgent::SetUnregisteredLocked(absl::Time register_at,
                                        bool keep_progress) {
  if (!keep_progress && !unsent_.empty()) {
    AQ_LOG_WARN("dropping {} unsent progress reports: registering again",
                unsent_.size());
  }
  if (!keep_progress) {
    unsent_.clear();
    unsent_bytes_ = 0;
  }
  backoff_ = options_.initial_backoff;
  next_register_ = register_at;
  absl::MutexLock lock(&mu_);
  registered_ = false;
}

namespace {

// What a finished report says for good: where, how far, and the final
// figures.
StageProgress FinalSummary(const StageProgress& p) {
  StageProgress s;
  s.set_job_id(p.job_id());
  s.set_stage(p.stage());
  s.set_replica(p.replica());
  s.set_attempt(p.attempt());
  s.set_committed_version(p.committed_version());
  s.set_minibatches_done(p.minibatches_done());
  s.set_total_steps(p.total_steps());
  s.set_finished(true);
  s.set_test_accuracy(p.test_accuracy());
  s.set_test_loss(p.test_loss());
  return s;
}

}  // namespace

void WorkerAgent::KeepProgressLocked(StageProgress progress) {
  if (progress.finished() && progress.error().empty()) {
    final_report_ = FinalSummary(progress);
  }
  const int64_t bytes = static_cast<int64_t>(progress.ByteSizeLong());
  unsent_.push_back({std::move(progress), bytes});
  unsent_bytes_ += bytes;
  int dropped = 0;
  while (unsent_bytes_ > options_.max_unsent_progress_bytes &&
         unsent_.size() > 1) {
    unsent_bytes_ -= unsent_.front().bytes;
    unsent_.pop_front();
    ++dropped;
  }
  if (dropped > 0) {
    AQ_LOG_WARN("dropped the {} oldest unsent progress reports (over {} bytes)",
                dropped, options_.max_unsent_progress_bytes);
  }
}

void WorkerAgent::SendProgressLocked() {
  for (StageProgress& p : runtime_->TakeProgress()) {
    KeepProgressLocked(std::move(p));
  }
  while (!unsent_.empty() && SendUnsentBatchLocked()) {
  }
}

bool WorkerAgent::SendUnsentBatchLocked() {
  const WorkerInfo me = info();
  v1::ReportProgressRequest request;
  request.set_worker_id(me.worker_id());
  request.set_incarnation(me.incarnation());
  size_t n = 0;
  int64_t bytes = 0;
  while (n < unsent_.size() &&
         (n == 0 || bytes + unsent_[n].bytes <= options_.max_report_bytes)) {
    *request.add_stages() = unsent_[n].progress;
    bytes += unsent_[n].bytes;
    ++n;
  }
  const absl::Status s = client_->ReportProgress(request, options_.rpc_timeout);
  if (Unreached(s)) {
    AQ_LOG_WARN("progress report not delivered ({}); {} reports kept",
                s.ToString(), unsent_.size());
    return false;
  }
  if (absl::IsNotFound(s) && runtime_->Claim().has_value() &&
      ++refused_as_unknown_ <= kMaxRefusedAsUnknown) {
    // The coordinator restarted and does not know this worker (or its job)
    // yet: keep the reports and heartbeat now, which registers again with
    // the claim (or learns that the job is over and stops it).
    AQ_LOG_WARN("progress report refused ({}); {} reports kept", s.ToString(),
                unsent_.size());
    next_heartbeat_ = absl::InfinitePast();
    return false;
  }
  if (!s.ok()) {
    AQ_LOG_WARN("progress report refused: {}", s.ToString());
  } else {
    refused_as_unknown_ = 0;
  }
  unsent_.erase(unsent_.begin(), unsent_.begin() + n);
  unsent_bytes_ -= bytes;
  return true;
}

void WorkerAgent::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
  {
    absl::MutexLock loop_lock(&loop_mu_);
    if (registered()) SendProgressLocked();
  }
  Deregister();
}

void WorkerAgent::Deregister() {
  if (!registered()) return;
  const WorkerInfo me = info();
  v1::DeregisterWorkerRequest request;
  request.set_worker_id(me.worker_id());
  request.set_incarnation(me.incarnation());
  const absl::Status s =
      client_->DeregisterWorker(request, options_.rpc_timeout);
  if (s.ok()) {
    AQ_LOG_INFO("deregistered {}", me.worker_id());
  } else {
    AQ_LOG_WARN("deregistering failed: {}", s.ToString());
  }
}

}  // namespace aqueduct
