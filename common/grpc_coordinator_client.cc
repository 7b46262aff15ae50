#include "common/grpc_coordinator_client.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "common/grpc_security.h"
#include "common/grpc_status.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "proto/service.grpc.pb.h"
#include "zlib.h"

namespace aqueduct {
namespace {

using Stub = v1::Coordinator::Stub;

// The longest wait between two connection attempts to a coordinator that
// does not answer (NewGrpcCoordinatorClient says why).
constexpr int kMaxReconnectBackoffMs = 2000;

template <typename Request, typename Response>
using UnaryMethod = grpc::Status (Stub::*)(grpc::ClientContext*, const Request&,
                                           Response*);

// Deadlines are clamped to [1 ms, 1 year]: an infinite timeout still gets
// one, and a zero or negative one fails fast instead of never.
void SetDeadline(grpc::ClientContext* ctx, absl::Duration timeout) {
  timeout = std::clamp(timeout, absl::Milliseconds(1), absl::Hours(24 * 365));
  ctx->set_deadline(std::chrono::system_clock::now() +
                    absl::ToChronoMilliseconds(timeout));
}

class GrpcCoordinatorClient final : public CoordinatorClient {
 public:
  GrpcCoordinatorClient(std::shared_ptr<grpc::Channel> channel,
                        std::string token)
      : stub_(v1::Coordinator::NewStub(std::move(channel))),
        token_(std::move(token)) {}

  absl::StatusOr<v1::RegisterWorkerResponse> RegisterWorker(
      const v1::RegisterWorkerRequest& request,
      absl::Duration timeout) override {
    return Call(&Stub::RegisterWorker, request, timeout);
  }
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& request, absl::Duration timeout) override {
    return Call(&Stub::Heartbeat, request, timeout);
  }
  absl::Status DeregisterWorker(const v1::DeregisterWorkerRequest& request,
                                absl::Duration timeout) override {
    return Call(&Stub::DeregisterWorker, request, timeout).status();
  }
  absl::Status ReportProgress(const v1::ReportProgressRequest& request,
                              absl::Duration timeout) override {
    return Call(&Stub::ReportProgress, request, timeout).status();
  }

  absl::StatusOr<v1::SubmitJobResponse> SubmitJob(
      const v1::SubmitJobRequest& request, absl::Duration timeout) override {
    return Call(&Stub::SubmitJob, request, timeout);
  }
  absl::StatusOr<v1::JobStatus> GetJob(const v1::GetJobRequest& request,
                                       absl::Duration timeout) override {
    return Call(&Stub::GetJob, request, timeout);
  }
  absl::StatusOr<v1::ListJobsResponse> ListJobs(
      const v1::ListJobsRequest& request, absl::Duration timeout) override {
    return Call(&Stub::ListJobs, request, timeout);
  }
  absl::Status WatchJob(
      const v1::WatchJobRequest& request, absl::Duration timeout,
      const std::function<bool(const v1::JobStatus&)>& on_update) override;
  absl::StatusOr<v1::CancelJobResponse> CancelJob(
      const v1::CancelJobRequest& request, absl::Duration timeout) override {
    return Call(&Stub::CancelJob, request, timeout);
  }
  absl::StatusOr<v1::ListWorkersResponse> ListWorkers(
      const v1::ListWorkersRequest& request, absl::Duration timeout) override {
    return Call(&Stub::ListWorkers, request, timeout);
  }
  absl::StatusOr<v1::PartitionPlan> GetPlan(const v1::GetPlanRequest& request,
                                            absl::Duration timeout) override {
    return Call(&Stub::GetPlan, request, timeout);
  }
  absl::StatusOr<v1::GetTraceResponse> GetTrace(
      const v1::GetTraceRequest& request, absl::Duration timeout) override {
    return Call(&Stub::GetTrace, request, timeout);
  }

  absl::Status StoreSet(const v1::StoreSetRequest& request,
                        absl::Duration timeout) override {
    return Call(&Stub::StoreSet, request, timeout).status();
  }
  absl::StatusOr<v1::StoreGetResponse> StoreGet(
      const v1::StoreGetRequest& request, absl::Duration timeout) override {
    return Call(&Stub::StoreGet, request, timeout);
  }
  absl::StatusOr<v1::StoreAddResponse> StoreAdd(
      const v1::StoreAddRequest& request, absl::Duration timeout) override {
    return Call(&Stub::StoreAdd, request, timeout);
  }

  absl::StatusOr<v1::ListCheckpointsResponse> ListCheckpoints(
      const v1::ListCheckpointsRequest& request,
      absl::Duration timeout) override {
    return Call(&Stub::ListCheckpoints, request, timeout);
  }
  absl::Status GetModel(
      const v1::GetModelRequest& request, absl::Duration timeout,
      const std::function<bool(const v1::ModelChunk&)>& on_chunk) override;
  absl::StatusOr<v1::UploadModelResponse> UploadModel(
      const v1::UploadModelChunk& header, const std::string& bytes,
      absl::Duration timeout) override;
  absl::Status StreamLogs(
      const v1::StreamLogsRequest& request, absl::Duration timeout,
      const std::function<bool(const v1::LogLine&)>& on_line) override;

 private:
  // One unary call with a deadline; the status converted to absl.
  template <typename Request, typename Response>
  absl::StatusOr<Response> Call(UnaryMethod<Request, Response> method,
                                const Request& request,
                                absl::Duration timeout) {
    grpc::ClientContext ctx;
    Prepare(&ctx, timeout);
    Response response;
    const grpc::Status s = (stub_.get()->*method)(&ctx, request, &response);
    if (!s.ok()) return FromGrpcStatus(s);
    return response;
  }

  // The deadline and the bearer token.
  void Prepare(grpc::ClientContext* ctx, absl::Duration timeout) const {
    SetDeadline(ctx, timeout);
    AddBearerToken(ctx, token_);
  }

  const std::unique_ptr<Stub> stub_;
  const std::string token_;
};

absl::Status GrpcCoordinatorClient::WatchJob(
    const v1::WatchJobRequest& request, absl::Duration timeout,
    const std::function<bool(const v1::JobStatus&)>& on_update) {
  grpc::ClientContext ctx;
  Prepare(&ctx, timeout);
  std::unique_ptr<grpc::ClientReader<v1::JobStatus>> reader =
      stub_->WatchJob(&ctx, request);
  v1::JobStatus status;
  while (reader->Read(&status)) {
    if (on_update(status)) continue;
    // The caller has seen enough: cancel, drain, and report success.
    ctx.TryCancel();
    while (reader->Read(&status)) {
    }
    (void)reader->Finish();
    return absl::OkStatus();
  }
  return FromGrpcStatus(reader->Finish());
}

absl::Status GrpcCoordinatorClient::StreamLogs(
    const v1::StreamLogsRequest& request, absl::Duration timeout,
    const std::function<bool(const v1::LogLine&)>& on_line) {
  grpc::ClientContext ctx;
  Prepare(&ctx, timeout);
  std::unique_ptr<grpc::ClientReader<v1::LogLine>> reader =
      stub_->StreamLogs(&ctx, request);
  v1::LogLine line;
  while (reader->Read(&line)) {
    if (on_line(line)) continue;
    ctx.TryCancel();
    while (reader->Read(&line)) {
    }
    (void)reader->Finish();
    return absl::OkStatus();
  }
  return FromGrpcStatus(reader->Finish());
}

absl::Status GrpcCoordinatorClient::GetModel(
    const v1::GetModelRequest& request, absl::Duration timeout,
    const std::function<bool(const v1::ModelChunk&)>& on_chunk) {
  grpc::ClientContext ctx;
  Prepare(&ctx, timeout);
  std::unique_ptr<grpc::ClientReader<v1::ModelChunk>> reader =
      stub_->GetModel(&ctx, request);
  v1::ModelChunk chunk;
  while (reader->Read(&chunk)) {
    if (on_chunk(chunk)) continue;
    ctx.TryCancel();
    while (reader->Read(&chunk)) {
    }
    (void)reader->Finish();
    return absl::OkStatus();
  }
  return FromGrpcStatus(reader->Finish());
}

absl::StatusOr<v1::UploadModelResponse> GrpcCoordinatorClient::UploadModel(
    const v1::UploadModelChunk& header, const std::string& bytes,
    absl::Duration timeout) {
  grpc::ClientContext ctx;
  Prepare(&ctx, timeout);
  v1::UploadModelResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::UploadModelChunk>> writer =
      stub_->UploadModel(&ctx, &response);
  v1::UploadModelChunk chunk;
  chunk.set_worker_id(header.worker_id());
  chunk.set_incarnation(header.incarnation());
  chunk.set_job_id(header.job_id());
  chunk.set_attempt(header.attempt());
  chunk.set_total_bytes(static_cast<int64_t>(bytes.size()));
  chunk.set_crc32(static_cast<uint32_t>(
      crc32_z(0L, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size())));
  // At least one chunk, so that an empty file still names its job.
  size_t offset = 0;
  do {
    const size_t n =
        std::min(bytes.size() - offset, static_cast<size_t>(kModelChunkBytes));
    chunk.set_offset(static_cast<int64_t>(offset));
    chunk.set_data(bytes.data() + offset, n);
    offset += n;
    // A failed write means the call is over; Finish() says why.
    if (!writer->Write(chunk)) break;
  } while (offset < bytes.size());
  (void)writer->WritesDone();
  const grpc::Status s = writer->Finish();
  if (!s.ok()) return FromGrpcStatus(s);
  return response;
}

}  // namespace

std::unique_ptr<CoordinatorClient> NewGrpcCoordinatorClient(
    std::shared_ptr<grpc::Channel> channel, const std::string& token) {
  return std::make_unique<GrpcCoordinatorClient>(std::move(channel), token);
}

std::unique_ptr<CoordinatorClient> NewGrpcCoordinatorClient(
    const std::string& address, const SecurityConfig& security) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  // gRPC's reconnect backoff grows to 120 s: a worker whose coordinator was
  // away a minute or more found it again up to 2 minutes after it came
  // back, past the 15 s a restarted coordinator waits for the workers of
  // its running jobs (which it then restarted from their last checkpoint).
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kMaxReconnectBackoffMs);
  return NewGrpcCoordinatorClient(
      grpc::CreateCustomChannel(address, ChannelCredentials(security), args),
      security.token);
}

}  // namespace aqueduct
