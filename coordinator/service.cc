#include "coordinator/service.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/grpc_security.h"
#include "common/grpc_status.h"
#include "common/status.h"

namespace aqueduct {

namespace {

// The handler's answer as the RPC's.
template <typename Response>
grpc::Status Reply(absl::StatusOr<Response> result, Response* response) {
  if (!result.ok()) return ToGrpcStatus(result.status());
  *response = *std::move(result);
  return grpc::Status::OK;
}

// OK if `caller` may act as worker `worker_id`.
absl::Status ActsAsWorker(const Principal& caller, const std::string& worker_id,
                          bool tls, const grpc::ServerContext& ctx) {
  if (caller.anonymous) return absl::OkStatus();
  if (caller.role != Role::kWorker) {
    return absl::PermissionDeniedError(
        absl::StrCat("the ", RoleName(caller.role), " credential of '",
                     caller.name, "' cannot act as a worker"));
  }
  if (caller.name != worker_id) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the credential of worker '", caller.name, "' cannot act as worker '",
        worker_id.substr(0, 128), "'"));
  }
  if (tls && !PeerHasVerifiedCertificate(ctx)) {
    return absl::UnauthenticatedError(
        "workers must present a client certificate the CA signed (mutual "
        "TLS): give the worker --tls_cert and --tls_key");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status GrpcCoordinatorService::Allow(const grpc::ServerContext& ctx,
                                           Access access,
                                           const std::string& worker_id,
                                           Principal* caller) const {
  absl::StatusOr<Principal> who = Authenticate(ctx, security_.tokens);
  if (!who.ok()) return who.status();
  if (caller != nullptr) *caller = *who;
  switch (access) {
    case Access::kRead:
      return absl::OkStatus();
    case Access::kUser:
      if (who->anonymous || who->role != Role::kWorker) {
        return absl::OkStatus();
      }
      return absl::PermissionDeniedError(
          absl::StrCat("the worker credential of '", who->name,
                       "' cannot submit or cancel jobs"));
    case Access::kWorker:
      return ActsAsWorker(*who, worker_id, security_.tls, ctx);
  }
  return absl::InternalError("unknown access");
}

absl::Status GrpcCoordinatorService::AllowStore(const grpc::ServerContext& ctx,
                                                const std::string& key) const {
  Principal caller;
  RETURN_IF_ERROR(Allow(ctx, Access::kRead, "", &caller));
  if (caller.anonymous) return absl::OkStatus();
  RETURN_IF_ERROR(ActsAsWorker(caller, caller.name, security_.tls, ctx));
  if (!security_.store_access) return absl::OkStatus();
  return security_.store_access(caller.name, key);
}

grpc::Status GrpcCoordinatorService::RegisterWorker(
    grpc::ServerContext* ctx, const v1::RegisterWorkerRequest* request,
    v1::RegisterWorkerResponse* response) {
  absl::Status s = Allow(*ctx, Access::kWorker, request->info().worker_id());
  if (s.ok() && security_.check_worker_address) {
    s = CheckAdvertisedAddress(request->info().address(), PeerHost(ctx->peer()),
                               security_.allowed_worker_hosts);
  }
  if (s.ok() && request->control_token().size() > 256) {
    s = absl::InvalidArgumentError("control_token is longer than 256 bytes");
  }
  if (!s.ok()) return ToGrpcStatus(s);
  if (security_.on_control_token) {
    security_.on_control_token(request->info().address(),
                               request->control_token());
  }
  return Reply(handler_->RegisterWorker(*request), response);
}

grpc::Status GrpcCoordinatorService::Heartbeat(
    grpc::ServerContext* ctx, const v1::HeartbeatRequest* request,
    v1::HeartbeatResponse* response) {
  if (absl::Status s = Allow(*ctx, Access::kWorker, request->worker_id());
      !s.ok())
    return ToGrpcStatus(s);
  return Reply(handler_->Heartbeat(*request), response);
}

grpc::Status GrpcCoordinatorService::DeregisterWorker(
    grpc::ServerContext* ctx, const v1::DeregisterWorkerRequest* request,
    v1::DeregisterWorkerResponse* response) {
  if (absl::Status s = Allow(*ctx, Access::kWorker, request->worker_id());
      !s.ok())
    return ToGrpcStatus(s);
  return Reply(handler_->DeregisterWorker(*request), response);
}

grpc::Status GrpcCoordinatorService::ReportProgress(
    grpc::ServerContext* ctx, const v1::ReportProgressRequest* request,
    v1::ReportProgressResponse* response) {
  if (absl::Status s = Allow(*ctx, Access::kWorker, request->worker_id());
      !s.ok())
    return ToGrpcStatus(s);
  return Reply(handler_->ReportProgress(*request), response);
}

grpc::Status GrpcCoordinatorService::SubmitJob(
    grpc::ServerContext* ctx, const v1::SubmitJobRequest* request,
    v1::SubmitJobResponse* response) {
  Principal caller;
  if (absl::Status s = Allow(*ctx, Access::kUser, "", &caller); !s.ok()) {
    return ToGrpcStatus(s);
  }
  v1::SubmitJobRequest owned = *request;
  owned.set_owner(caller.anonymous ? "" : caller.name);
  owned.set_owner_role(caller.anonymous ? "" : RoleName(caller.role));
  return Reply(handler_->SubmitJob(owned), response);
}

grpc::Status GrpcCoordinatorService::GetJob(grpc::ServerContext* ctx,
                                            const v1::GetJobRequest* request,
                                            v1::JobStatus* response) {
  if (absl::Status s = Allow(*ctx, Access::kRead); !s.ok())
    return ToGrpcStatus(s);
  return Reply(handler_->GetJob(*request), response);
}

grpc::Status GrpcCoordinatorService::ListJobs(
    grpc::ServerContext* ctx, const v1::ListJobsRequest* request,
    v1::ListJobsResponse* response) {
  if (absl::Status s = Allow(*ctx, Access::kRead); !s.ok())
    return ToGrpcStatus(s);
  return Reply(handler_->ListJobs(*request), response);
}

grpc::Status GrpcCoordinatorService::WatchJob(
    grpc::ServerContext* ctx, const v1::WatchJobRequest* request,
    grpc::ServerWriter<v1::JobStatus>* writer) {
  Principal caller;
  if (absl::Status s = Allow(*ctx, Access::kRead, "", &caller); !s.ok()) {
    return ToGrpcStatus(s);
  }
  // Waiting calls are counted per caller (handler.h).
  return ToGrpcStatus(handler_->WatchJob(
      caller.anonymous ? "" : caller.name, *request,
      MonotonicDeadline(absl::FromChrono(ctx->deadline())),
      [ctx] { return ctx->IsCancelled(); },
      [writer](const v1::JobStatus& s) { return writer->Write(s); }));
}

grpc::Status GrpcCoordinatorService::CancelJob(
    grpc::ServerContext* ctx, const v1::CancelJobRequest* request,
    v1::CancelJobResponse* response) {
  if (absl::Status s = Allow(*ctx, Access::kUser); !s.ok())
    return ToGrpcStatus(s);
  return Reply(handler_->CancelJob(*request), response);
}

grpc::Status GrpcCoordinatorService::ListWorkers(
    grpc::ServerContext* ctx, const v1::ListWorkersRequest* request,
    v1::ListWorkersResponse* response) {
  if (absl::Status s = Allow(*ctx, Access::kRead); !s.ok())
    return ToGrpcStatus(s);
  return Reply(handler_->ListWorkers(*request), response);
}

grpc::Status GrpcCoordinatorService::GetPlan(grpc::ServerContext* ctx,
                                             const v1::GetPlanRequest* request,
                                             v1::PartitionPlan* response) {
  if (absl::Status s = Allow(*ctx, Access::kRead); !s.ok())
    return ToGrpcStatus(s);
  return Reply(handler_->GetPlan(*request), response);
}

grpc::Status GrpcCoordinatorService::GetTrace(
    grpc::ServerContext* ctx, const v1::GetTraceRequest* request,
    v1::GetTraceResponse* response) {
  if (absl::Status s = Allow(*ctx, Access::kRead); !s.ok())
    return ToGrpcStatus(s);
  return Reply(handler_->GetTrace(*request), response);
}

grpc::Status GrpcCoordinatorService::StreamLogs(
    grpc::ServerContext* ctx, const v1::StreamLogsRequest* request,
    grpc::ServerWriter<v1::LogLine>* writer) {
  Principal caller;
  if (absl::Status s = Allow(*ctx, Access::kRead, "", &caller); !s.ok()) {
    return ToGrpcStatus(s);
  }
  return ToGrpcStatus(handler_->StreamLogs(
      caller.anonymous ? "" : caller.name, *request,
      MonotonicDeadline(absl::FromChrono(ctx->deadline())),
      [ctx] { return ctx->IsCancelled(); },
      [writer](const v1::LogLine& line) { return writer->Write(line); }));
}

grpc::Status GrpcCoordinatorService::StoreSet(
    grpc::ServerContext* ctx, const v1::StoreSetRequest* request,
    v1::StoreSetResponse* response) {
  if (absl::Status s = AllowStore(*ctx, request->key()); !s.ok())
    return ToGrpcStatus(s);
  return Reply(handler_->StoreSet(*request), response);
}

grpc::Status GrpcCoordinatorService::StoreGet(
    grpc::ServerContext* ctx, const v1::StoreGetRequest* request,
    v1::StoreGetResponse* response) {
  if (absl::Status s = AllowStore(*ctx, request->key()); !s.ok())
    return ToGrpcStatus(s);
  return Reply(
      handler_->StoreGet(*request,
                         MonotonicDeadline(absl::FromChrono(ctx->deadline()))),
      response);
}

grpc::Status GrpcCoordinatorService::StoreAdd(
    grpc::ServerContext* ctx, const v1::StoreAddRequest* request,
    v1::StoreAddResponse* response) {
  if (absl::Status s = AllowStore(*ctx, request->key()); !s.ok())
    return ToGrpcStatus(s);
  return Reply(handler_->StoreAdd(*request), response);
}

grpc::Status GrpcCoordinatorService::ListCheckpoints(
    grpc::ServerContext* ctx, const v1::ListCheckpointsRequest* request,
    v1::ListCheckpointsResponse* response) {
  if (absl::Status s = Allow(*ctx, Access::kRead); !s.ok())
    return ToGrpcStatus(s);
  return Reply(handler_->ListCheckpoints(*request), response);
}

grpc::Status GrpcCoordinatorService::GetModel(
    grpc::ServerContext* ctx, const v1::GetModelRequest* request,
    grpc::ServerWriter<v1::ModelChunk>* writer) {
  if (absl::Status s = Allow(*ctx, Access::kRead); !s.ok())
    return ToGrpcStatus(s);
  return ToGrpcStatus(handler_->GetModel(
      *request, [ctx] { return ctx->IsCancelled(); },
      [writer](const v1::ModelChunk& chunk) { return writer->Write(chunk); }));
}

grpc::Status GrpcCoordinatorService::UploadModel(
    grpc::ServerContext* ctx, grpc::ServerReader<v1::UploadModelChunk>* reader,
    v1::UploadModelResponse* response) {
  Principal caller;
  if (absl::Status s = Allow(*ctx, Access::kRead, "", &caller); !s.ok()) {
    return ToGrpcStatus(s);
  }
  // Every chunk names the uploading worker: it must be the caller.
  absl::Status denied;
  auto read = [&](v1::UploadModelChunk* chunk) {
    if (!reader->Read(chunk)) return false;
    denied = ActsAsWorker(caller, chunk->worker_id(), security_.tls, *ctx);
    return denied.ok();
  };
  absl::StatusOr<v1::UploadModelResponse> result = handler_->UploadModel(read);
  if (!denied.ok()) return ToGrpcStatus(denied);
  return Reply(std::move(result), response);
}

}  // namespace aqueduct
