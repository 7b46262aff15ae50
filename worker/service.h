// GrpcWorkerService: the Worker gRPC service, a thin adapter over
// WorkerHandler (worker/handler.h, where the logic is): it authenticates
// the caller, turns the call's deadline into a monotonic one and
// translates messages and statuses.
//
// Only the coordinator may call it: every call must carry the worker's
// control token (a secret made at start and sent with the registration,
// over TLS when it is on) as a bearer token; others are UNAUTHENTICATED.
//
// Thread-safe.
#ifndef AQUEDUCT_WORKER_SERVICE_H_
#define AQUEDUCT_WORKER_SERVICE_H_

#include <functional>
#include <string>

#include "common/device/factory.h"
#include "proto/service.grpc.pb.h"
#include "worker/handler.h"
#include "worker/runtime/stage_runtime.h"

namespace aqueduct {

class GrpcWorkerService final : public v1::Worker::Service {
 public:
  // `info` returns the worker's current identity (for GetStatus); Profile
  // measures on a fresh `device` (CPU: `threads` BLAS threads).
  // `control_token` must not be empty.
  GrpcWorkerService(StageRuntime* runtime, DeviceSpec device, int threads,
                    std::function<WorkerInfo()> info,
                    std::string control_token);

  grpc::Status AssignStage(grpc::ServerContext* ctx,
                           const StageAssignment* request,
                           v1::AssignStageResponse* response) override;
  grpc::Status StartJob(grpc::ServerContext* ctx,
                        const v1::StartJobRequest* request,
                        v1::StartJobResponse* response) override;
  grpc::Status StopJob(grpc::ServerContext* ctx,
                       const v1::StopJobRequest* request,
                       v1::StopJobResponse* response) override;
  grpc::Status Profile(grpc::ServerContext* ctx,
                       const v1::ProfileRequest* request,
                       ModelProfile* response) override;
  grpc::Status GetStatus(grpc::ServerContext* ctx,
                         const v1::GetStatusRequest* request,
                         WorkerRuntimeStatus* response) override;
  grpc::Status MeasureLinks(grpc::ServerContext* ctx,
                            const v1::MeasureLinksRequest* request,
                            v1::MeasureLinksResponse* response) override;

 private:
  WorkerHandler handler_;
  const std::string control_token_;

  // UNAUTHENTICATED unless `ctx` carries the control token.
  grpc::Status FromCoordinator(const grpc::ServerContext& ctx) const;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_SERVICE_H_
