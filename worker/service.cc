#include "worker/service.h"

#include "common/auth.h"
#include "common/device/factory.h"
#include "common/grpc_security.h"
#include "common/grpc_status.h"
#include "worker/profiler.h"

namespace aqueduct {

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
  return ToGrpcStatus(runtime_->Assign(*request));
}

grpc::Status GrpcWorkerService::StartJob(grpc::ServerContext* ctx,
                                         const v1::StartJobRequest* request,
                                         v1::StartJobResponse*) {
  if (grpc::Status s = FromCoordinator(*ctx); !s.ok()) return s;
  return ToGrpcStatus(runtime_->Start(request->job_id()));
}

grpc::Status GrpcWorkerService::StopJob(grpc::ServerContext* ctx,
                                        const v1::StopJobRequest* request,
                                        v1::StopJobResponse*) {
  if (grpc::Status s = FromCoordinator(*ctx); !s.ok()) return s;
  std::optional<int> attempt;
  if (request->has_attempt()) attempt = request->attempt();
  return ToGrpcStatus(
      runtime_->Stop(request->job_id(), request->reason(), attempt));
}

grpc::Status GrpcWorkerService::Profile(grpc::ServerContext* ctx,
                                        const v1::ProfileRequest* request,
                                        ModelProfile* response) {
  if (grpc::Status s = FromCoordinator(*ctx); !s.ok()) return s;
  ProfilerOptions options;
  if (request->warmup_iterations() > 0) {
    options.warmup_iterations = request->warmup_iterations();
  }
  if (request->measured_iterations() > 0) {
    options.measured_iterations = request->measured_iterations();
  }
  // The data is read under the roots the stages read it under.
  options.files = runtime_->files();
  // Its own device: profiling does not touch the running job's state.
  auto device = CreateDevice(device_, threads_);
  if (!device.ok()) return ToGrpcStatus(device.status());
  auto profile = ProfileModel(request->spec(), device->get(), options);
  if (!profile.ok()) return ToGrpcStatus(profile.status());
  *response = *std::move(profile);
  return grpc::Status::OK;
}

grpc::Status GrpcWorkerService::GetStatus(grpc::ServerContext* ctx,
                                          const v1::GetStatusRequest*,
                                          WorkerRuntimeStatus* response) {
  if (grpc::Status s = FromCoordinator(*ctx); !s.ok()) return s;
  *response = runtime_->Status();
  *response->mutable_info() = info_();
  return grpc::Status::OK;
}

}  // namespace aqueduct
