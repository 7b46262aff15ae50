#include "worker/agent.h"

#include <chrono>

#include "absl/strings/str_format.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace aqueduct {

namespace {

void SetDeadline(grpc::ClientContext* ctx, absl::Duration timeout) {
  ctx->set_deadline(std::chrono::system_clock::now() +
                    absl::ToChronoMilliseconds(timeout));
}

}  // namespace

std::string NewIncarnationId() {
  std::random_device rd;
  const uint64_t a = (uint64_t{rd()} << 32) ^ rd();
  return absl::StrFormat("%016x-%x", a,
                         absl::ToUnixMicros(absl::Now()) & 0xffffff);
}

WorkerAgent::WorkerAgent(const AgentOptions& options, StageRuntime* runtime)
    : options_(options), runtime_(runtime), rng_(std::random_device{}()) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  stub_ = v1::Coordinator::NewStub(grpc::CreateCustomChannel(
      options_.coordinator_address, grpc::InsecureChannelCredentials(), args));
  info_ = options_.info;
  if (info_.incarnation().empty()) info_.set_incarnation(NewIncarnationId());
}

WorkerAgent::~WorkerAgent() { Stop(); }

void WorkerAgent::Start() {
  thread_ = std::thread([this] { Loop(); });
}

WorkerInfo WorkerAgent::info() const {
  absl::MutexLock lock(&mu_);
  return info_;
}

bool WorkerAgent::WaitRegistered(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(&registered_), timeout);
}

void WorkerAgent::NewIncarnation() {
  absl::MutexLock lock(&mu_);
  info_.set_incarnation(NewIncarnationId());
  registered_ = false;
}

bool WorkerAgent::Register() {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, options_.rpc_timeout);
  v1::RegisterWorkerRequest request;
  *request.mutable_info() = info();
  v1::RegisterWorkerResponse response;
  const grpc::Status s = stub_->RegisterWorker(&ctx, request, &response);
  if (!s.ok()) {
    AQ_LOG_WARN("registering with {} failed: {} ({})",
                options_.coordinator_address, s.error_message(),
                static_cast<int>(s.error_code()));
    return false;
  }
  absl::MutexLock lock(&mu_);
  registered_ = true;
  heartbeat_interval_ = absl::Milliseconds(
      std::max<int64_t>(50, response.heartbeat_interval_ms()));
  AQ_LOG_INFO(
      "registered with coordinator {} (version {}) as {} incarnation {}",
      options_.coordinator_address, response.coordinator_version(),
      info_.worker_id(), info_.incarnation());
  return true;
}

void WorkerAgent::SendProgress() {
  std::vector<StageProgress> stages = runtime_->TakeProgress();
  if (stages.empty()) return;
  const WorkerInfo me = info();
  grpc::ClientContext ctx;
  SetDeadline(&ctx, options_.rpc_timeout);
  v1::ReportProgressRequest request;
  request.set_worker_id(me.worker_id());
  request.set_incarnation(me.incarnation());
  for (StageProgress& p : stages) *request.add_stages() = std::move(p);
  v1::ReportProgressResponse response;
  const grpc::Status s = stub_->ReportProgress(&ctx, request, &response);
  if (!s.ok()) {
    AQ_LOG_WARN("progress report refused: {}", s.error_message());
  }
}

void WorkerAgent::Loop() {
  absl::Duration backoff = options_.initial_backoff;
  absl::Time next_heartbeat = absl::InfinitePast();
  while (!stopping_) {
    bool registered;
    absl::Duration interval;
    {
      absl::MutexLock lock(&mu_);
      registered = registered_;
      interval = heartbeat_interval_;
    }
    if (!registered) {
      if (Register()) {
        backoff = options_.initial_backoff;
        next_heartbeat = absl::Now() + interval;
        continue;
      }
      // Exponential backoff with full jitter.
      std::uniform_real_distribution<double> jitter(0.5, 1.0);
      const absl::Duration wait = backoff * jitter(rng_);
      backoff = std::min(backoff * 2, options_.max_backoff);
      const absl::Time until = absl::Now() + wait;
      while (!stopping_ && absl::Now() < until) {
        absl::SleepFor(std::min(absl::Milliseconds(50), until - absl::Now()));
      }
      continue;
    }
    if (absl::Now() >= next_heartbeat) {
      next_heartbeat = absl::Now() + interval;
      const WorkerInfo me = info();
      grpc::ClientContext ctx;
      SetDeadline(&ctx, options_.rpc_timeout);
      v1::HeartbeatRequest request;
      request.set_worker_id(me.worker_id());
      request.set_incarnation(me.incarnation());
      request.set_job_id(runtime_->current_job());
      v1::HeartbeatResponse response;
      const grpc::Status s = stub_->Heartbeat(&ctx, request, &response);
      if (s.ok()) {
        for (const std::string& job : response.stop_jobs()) {
          (void)runtime_->Stop(job, "the coordinator says the job is over");
        }
      } else if (s.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
        // Fenced or expired: our job was failed; start over.
        AQ_LOG_WARN("coordinator refused the heartbeat: {}; re-registering",
                    s.error_message());
        const std::string job = runtime_->current_job();
        if (!job.empty()) {
          (void)runtime_->Stop(job, "this worker's lease was lost");
        }
        NewIncarnation();
      } else if (s.error_code() == grpc::StatusCode::NOT_FOUND) {
        // The coordinator restarted and forgot us.
        absl::MutexLock lock(&mu_);
        registered_ = false;
      } else {
        AQ_LOG_WARN("heartbeat failed: {}", s.error_message());
      }
    }
    SendProgress();
    const absl::Time wake =
        std::min(next_heartbeat, absl::Now() + options_.progress_interval);
    while (!stopping_ && absl::Now() < wake) {
      absl::SleepFor(std::min(absl::Milliseconds(20), wake - absl::Now()));
    }
  }
}

void WorkerAgent::Stop() {
  if (stopping_.exchange(true)) return;
  if (thread_.joinable()) thread_.join();
  SendProgress();
  bool registered;
  {
    absl::MutexLock lock(&mu_);
    registered = registered_;
  }
  if (!registered) return;
  const WorkerInfo me = info();
  grpc::ClientContext ctx;
  SetDeadline(&ctx, options_.rpc_timeout);
  v1::DeregisterWorkerRequest request;
  request.set_worker_id(me.worker_id());
  request.set_incarnation(me.incarnation());
  v1::DeregisterWorkerResponse response;
  const grpc::Status s = stub_->DeregisterWorker(&ctx, request, &response);
  if (s.ok()) {
    AQ_LOG_INFO("deregistered {}", me.worker_id());
  } else {
    AQ_LOG_WARN("deregistering failed: {}", s.error_message());
  }
}

}  // namespace aqueduct
