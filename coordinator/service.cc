#include "coordinator/service.h"

#include "absl/time/clock.h"
#include "common/grpc_status.h"

namespace aqueduct {

namespace {

// The handler's answer as the RPC's.
template <typename Response>
grpc::Status Reply(absl::StatusOr<Response> result, Response* response) {
  if (!result.ok()) return ToGrpcStatus(result.status());
  *response = *std::move(result);
  return grpc::Status::OK;
}

}  // namespace

grpc::Status GrpcCoordinatorService::RegisterWorker(
    grpc::ServerContext*, const v1::RegisterWorkerRequest* request,
    v1::RegisterWorkerResponse* response) {
  return Reply(handler_->RegisterWorker(*request), response);
}

grpc::Status GrpcCoordinatorService::Heartbeat(
    grpc::ServerContext*, const v1::HeartbeatRequest* request,
    v1::HeartbeatResponse* response) {
  return Reply(handler_->Heartbeat(*request), response);
}

grpc::Status GrpcCoordinatorService::DeregisterWorker(
    grpc::ServerContext*, const v1::DeregisterWorkerRequest* request,
    v1::DeregisterWorkerResponse* response) {
  return Reply(handler_->DeregisterWorker(*request), response);
}

grpc::Status GrpcCoordinatorService::ReportProgress(
    grpc::ServerContext*, const v1::ReportProgressRequest* request,
    v1::ReportProgressResponse* response) {
  return Reply(handler_->ReportProgress(*request), response);
}

grpc::Status GrpcCoordinatorService::SubmitJob(
    grpc::ServerContext*, const v1::SubmitJobRequest* request,
    v1::SubmitJobResponse* response) {
  return Reply(handler_->SubmitJob(*request), response);
}

grpc::Status GrpcCoordinatorService::GetJob(grpc::ServerContext*,
                                            const v1::GetJobRequest* request,
                                            v1::JobStatus* response) {
  return Reply(handler_->GetJob(*request), response);
}

grpc::Status GrpcCoordinatorService::ListJobs(
    grpc::ServerContext*, const v1::ListJobsRequest* request,
    v1::ListJobsResponse* response) {
  return Reply(handler_->ListJobs(*request), response);
}

grpc::Status GrpcCoordinatorService::WatchJob(
    grpc::ServerContext* ctx, const v1::WatchJobRequest* request,
    grpc::ServerWriter<v1::JobStatus>* writer) {
  return ToGrpcStatus(handler_->WatchJob(
      *request, absl::FromChrono(ctx->deadline()),
      [ctx] { return ctx->IsCancelled(); },
      [writer](const v1::JobStatus& s) { return writer->Write(s); }));
}

grpc::Status GrpcCoordinatorService::CancelJob(
    grpc::ServerContext*, const v1::CancelJobRequest* request,
    v1::CancelJobResponse* response) {
  return Reply(handler_->CancelJob(*request), response);
}

grpc::Status GrpcCoordinatorService::ListWorkers(
    grpc::ServerContext*, const v1::ListWorkersRequest* request,
    v1::ListWorkersResponse* response) {
  return Reply(handler_->ListWorkers(*request), response);
}

grpc::Status GrpcCoordinatorService::GetPlan(grpc::ServerContext*,
                                             const v1::GetPlanRequest* request,
                                             v1::PartitionPlan* response) {
  return Reply(handler_->GetPlan(*request), response);
}

grpc::Status GrpcCoordinatorService::GetTrace(
    grpc::ServerContext*, const v1::GetTraceRequest* request,
    v1::GetTraceResponse* response) {
  return Reply(handler_->GetTrace(*request), response);
}

grpc::Status GrpcCoordinatorService::StoreSet(
    grpc::ServerContext*, const v1::StoreSetRequest* request,
    v1::StoreSetResponse* response) {
  return Reply(handler_->StoreSet(*request), response);
}

grpc::Status GrpcCoordinatorService::StoreGet(
    grpc::ServerContext* ctx, const v1::StoreGetRequest* request,
    v1::StoreGetResponse* response) {
  return Reply(handler_->StoreGet(*request, absl::FromChrono(ctx->deadline())),
               response);
}

grpc::Status GrpcCoordinatorService::StoreAdd(
    grpc::ServerContext*, const v1::StoreAddRequest* request,
    v1::StoreAddResponse* response) {
  return Reply(handler_->StoreAdd(*request), response);
}

grpc::Status GrpcCoordinatorService::ListCheckpoints(
    grpc::ServerContext*, const v1::ListCheckpointsRequest* request,
    v1::ListCheckpointsResponse* response) {
  return Reply(handler_->ListCheckpoints(*request), response);
}

grpc::Status GrpcCoordinatorService::GetModel(
    grpc::ServerContext* ctx, const v1::GetModelRequest* request,
    grpc::ServerWriter<v1::ModelChunk>* writer) {
  return ToGrpcStatus(handler_->GetModel(
      *request, [ctx] { return ctx->IsCancelled(); },
      [writer](const v1::ModelChunk& chunk) { return writer->Write(chunk); }));
}

grpc::Status GrpcCoordinatorService::UploadModel(
    grpc::ServerContext*, grpc::ServerReader<v1::UploadModelChunk>* reader,
    v1::UploadModelResponse* response) {
  auto read = [reader](v1::UploadModelChunk* chunk) {
    return reader->Read(chunk);
  };
  return Reply(handler_->UploadModel(read), response);
}

}  // namespace aqueduct
