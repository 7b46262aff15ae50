#include "worker/service.h"

#include "common/auth.h"
#include "common/clock.h"
#include "common/grpc_security.h"
#include "common/grpc_status.h"

namespace aqueduct {

GrpcWorkerService::GrpcWorkerService(StageRuntime* runtime, DeviceSpec device,
                                     int threads,
                                     std::function<WorkerInfo()> info,
                                     std::string control_token)
    : handler_(runtime, std::move(device), threads, std::move(info)),
      control_token_(std::move(control_token)) {}

grpc::Status GrpcWorkerService::FromCoordinator(
    const grpc::ServerContext& ctx) const {
  if (ConstantTimeEquals(IncomingBearerToken(ctx), control_token_)) {
    return grpc::Status::OK;
  }
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      "only the coordinator this worker registered with may "
                      "call its Worker service (control token missing or "
                      "wrong)");
}

grpc::Status GrpcWorkerService::AssignStage(grpc::ServerContext* ctx,
                                            const StageAssignment* request,
                                            v1::AssignStageResponse*) {
  if (grpc::Status s = FromCoordinator(*ctx); !s.ok()) return s;
  return ToGrpcStatus(handler_.AssignStage(*request));
}

grpc::Status GrpcWorkerService::StartJob(grpc::ServerContext* ctx,
                                         const v1::StartJobRequest* request,
                                         v1::StartJobResponse*) {
  if (grpc::Status s = FromCoordinator(*ctx); !s.ok()) return s;
  return ToGrpcStatus(handler_.StartJob(*request));
}

grpc::Status GrpcWorkerService::StopJob(grpc::ServerContext* ctx,
                                        const v1::StopJobRequest* request,
                                        v1::StopJobResponse*) {
  if (grpc::Status s = FromCoordinator(*ctx); !s.ok()) return s;
  return ToGrpcStatus(handler_.StopJob(*request));
}

grpc::Status GrpcWorkerService::Profile(grpc::ServerContext* ctx,
                                        const v1::ProfileRequest* request,
                                        ModelProfile* response) {
  if (grpc::Status s = FromCoordinator(*ctx); !s.ok()) return s;
  absl::StatusOr<ModelProfile> profile = handler_.Profile(
      *request, MonotonicDeadline(absl::FromChrono(ctx->deadline())));
  if (!profile.ok()) return ToGrpcStatus(profile.status());
  *response = *std::move(profile);
  return grpc::Status::OK;
}

grpc::Status GrpcWorkerService::GetStatus(grpc::ServerContext* ctx,
                                          const v1::GetStatusRequest*,
                                          WorkerRuntimeStatus* response) {
  if (grpc::Status s = FromCoordinator(*ctx); !s.ok()) return s;
  *response = handler_.GetStatus();
  return grpc::Status::OK;
}

grpc::Status GrpcWorkerService::MeasureLinks(
    grpc::ServerContext* ctx, const v1::MeasureLinksRequest* request,
    v1::MeasureLinksResponse* response) {
  if (grpc::Status s = FromCoordinator(*ctx); !s.ok()) return s;
  absl::StatusOr<v1::MeasureLinksResponse> measured = handler_.MeasureLinks(
      *request, MonotonicDeadline(absl::FromChrono(ctx->deadline())),
      [ctx] { return ctx->IsCancelled(); });
  if (!measured.ok()) return ToGrpcStatus(measured.status());
  *response = *std::move(measured);
  return grpc::Status::OK;
}

}  // namespace aqueduct
