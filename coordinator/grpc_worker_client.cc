#include "coordinator/grpc_worker_client.h"

#include "common/grpc_security.h"
#include "common/grpc_status.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "proto/service.grpc.pb.h"

namespace aqueduct {

namespace {

class GrpcWorkerClient final : public WorkerClient {
 public:
  GrpcWorkerClient(std::shared_ptr<grpc::Channel> channel, std::string token)
      : stub_(v1::Worker::NewStub(std::move(channel))),
        token_(std::move(token)) {}

  absl::Status AssignStage(const StageAssignment& assignment,
                           absl::Duration timeout) override {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, timeout);
    v1::AssignStageResponse response;
    return FromGrpcStatus(stub_->AssignStage(&ctx, assignment, &response));
  }

  absl::Status StartJob(const std::string& job_id,
                        absl::Duration timeout) override {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, timeout);
    v1::StartJobRequest request;
    request.set_job_id(job_id);
    v1::StartJobResponse response;
    return FromGrpcStatus(stub_->StartJob(&ctx, request, &response));
  }

  absl::Status StopJob(const std::string& job_id, const std::string& reason,
                       absl::Duration timeout,
                       std::optional<int> attempt) override {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, timeout);
    v1::StopJobRequest request;
    request.set_job_id(job_id);
    request.set_reason(reason);
    if (attempt.has_value()) request.set_attempt(*attempt);
    v1::StopJobResponse response;
    return FromGrpcStatus(stub_->StopJob(&ctx, request, &response));
  }

  absl::StatusOr<WorkerRuntimeStatus> GetStatus(
      absl::Duration timeout) override {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, timeout);
    WorkerRuntimeStatus response;
    const grpc::Status s =
        stub_->GetStatus(&ctx, v1::GetStatusRequest(), &response);
    if (!s.ok()) return FromGrpcStatus(s);
    return response;
  }

  absl::StatusOr<ModelProfile> Profile(const JobSpec& spec,
                                       absl::Duration timeout) override {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, timeout);
    v1::ProfileRequest request;
    *request.mutable_spec() = spec;
    ModelProfile response;
    const grpc::Status s = stub_->Profile(&ctx, request, &response);
    if (!s.ok()) return FromGrpcStatus(s);
    return response;
  }

  absl::StatusOr<v1::MeasureLinksResponse> MeasureLinks(
      const v1::MeasureLinksRequest& request, absl::Duration timeout) override {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, timeout);
    v1::MeasureLinksResponse response;
    const grpc::Status s = stub_->MeasureLinks(&ctx, request, &response);
    if (!s.ok()) return FromGrpcStatus(s);
    return response;
  }

 private:
  // The deadline, and the worker's control token.
  void SetDeadline(grpc::ClientContext* ctx, absl::Duration timeout) const {
    ctx->set_deadline(std::chrono::system_clock::now() +
                      absl::ToChronoMilliseconds(timeout));
    AddBearerToken(ctx, token_);
  }
  std::unique_ptr<v1::Worker::Stub> stub_;
  const std::string token_;
};

}  // namespace

grpc::ChannelArguments AqueductChannelArguments() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  // A worker back after an outage is reached within 2 s, not after gRPC's
  // default backoff of up to 120 s (the coordinator's probes and restarts
  // have deadlines shorter than that).
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  return args;
}

std::unique_ptr<WorkerClient> NewGrpcWorkerClient(
    std::shared_ptr<grpc::Channel> channel, std::string control_token) {
  return std::make_unique<GrpcWorkerClient>(std::move(channel),
                                            std::move(control_token));
}

void GrpcWorkerClients::SetControlToken(const std::string& address,
                                        const std::string& token) {
  absl::MutexLock lock(&mu_);
  tokens_[address] = token;
}

std::unique_ptr<WorkerClient> GrpcWorkerClients::Get(
    const std::string& address) {
  absl::MutexLock lock(&mu_);
  auto& channel = channels_[address];
  if (channel == nullptr) {
    channel = grpc::CreateCustomChannel(address, credentials_,
                                        AqueductChannelArguments());
  }
  auto token = tokens_.find(address);
  return NewGrpcWorkerClient(channel,
                             token != tokens_.end() ? token->second : "");
}

}  // namespace aqueduct
