// GrpcCoordinatorService: the Coordinator gRPC service, a thin adapter over
// a CoordinatorHandler (handler.h): each call is translated, given the
// client's deadline and its status converted. Blocking calls (StoreGet with
// a wait, WatchJob, GetModel) end by their deadline or when the client
// goes away.
//
// Private to the coordinator daemon (and its process-level tests).
// Thread-safe (the handler is).
#ifndef AQUEDUCT_COORDINATOR_SERVICE_H_
#define AQUEDUCT_COORDINATOR_SERVICE_H_

#include <memory>

#include "coordinator/handler.h"
#include "proto/service.grpc.pb.h"

namespace aqueduct {

class GrpcCoordinatorService final : public v1::Coordinator::Service {
 public:
  // `handler` is not owned.
  explicit GrpcCoordinatorService(CoordinatorHandler* handler)
      : handler_(handler) {}
  // Serves `core` through the handler over it (NewCoordinatorHandler),
  // keeping trained models in `models` (none: null). Neither is owned.
  explicit GrpcCoordinatorService(CoordinatorCore* core,
                                  ModelStore* models = nullptr)
      : owned_(NewCoordinatorHandler(core, models)), handler_(owned_.get()) {}

  grpc::Status RegisterWorker(grpc::ServerContext* ctx,
                              const v1::RegisterWorkerRequest* request,
                              v1::RegisterWorkerResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext* ctx,
                         const v1::HeartbeatRequest* request,
                         v1::HeartbeatResponse* response) override;
  grpc::Status DeregisterWorker(
      grpc::ServerContext* ctx, const v1::DeregisterWorkerRequest* request,
      v1::DeregisterWorkerResponse* response) override;
  grpc::Status ReportProgress(grpc::ServerContext* ctx,
                              const v1::ReportProgressRequest* request,
                              v1::ReportProgressResponse* response) override;
  grpc::Status SubmitJob(grpc::ServerContext* ctx,
                         const v1::SubmitJobRequest* request,
                         v1::SubmitJobResponse* response) override;
  grpc::Status GetJob(grpc::ServerContext* ctx,
                      const v1::GetJobRequest* request,
                      v1::JobStatus* response) override;
  grpc::Status ListJobs(grpc::ServerContext* ctx,
                        const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override;
  grpc::Status WatchJob(grpc::ServerContext* ctx,
                        const v1::WatchJobRequest* request,
                        grpc::ServerWriter<v1::JobStatus>* writer) override;
  grpc::Status CancelJob(grpc::ServerContext* ctx,
                         const v1::CancelJobRequest* request,
                         v1::CancelJobResponse* response) override;
  grpc::Status ListWorkers(grpc::ServerContext* ctx,
                           const v1::ListWorkersRequest* request,
                           v1::ListWorkersResponse* response) override;
  grpc::Status GetPlan(grpc::ServerContext* ctx,
                       const v1::GetPlanRequest* request,
                       v1::PartitionPlan* response) override;
  grpc::Status GetTrace(grpc::ServerContext* ctx,
                        const v1::GetTraceRequest* request,
                        v1::GetTraceResponse* response) override;
  grpc::Status StoreSet(grpc::ServerContext* ctx,
                        const v1::StoreSetRequest* request,
                        v1::StoreSetResponse* response) override;
  grpc::Status StoreGet(grpc::ServerContext* ctx,
                        const v1::StoreGetRequest* request,
                        v1::StoreGetResponse* response) override;
  grpc::Status StoreAdd(grpc::ServerContext* ctx,
                        const v1::StoreAddRequest* request,
                        v1::StoreAddResponse* response) override;
  grpc::Status ListCheckpoints(grpc::ServerContext* ctx,
                               const v1::ListCheckpointsRequest* request,
                               v1::ListCheckpointsResponse* response) override;
  grpc::Status GetModel(grpc::ServerContext* ctx,
                        const v1::GetModelRequest* request,
                        grpc::ServerWriter<v1::ModelChunk>* writer) override;
  grpc::Status UploadModel(grpc::ServerContext* ctx,
                           grpc::ServerReader<v1::UploadModelChunk>* reader,
                           v1::UploadModelResponse* response) override;

 private:
  std::unique_ptr<CoordinatorHandler> owned_;
  CoordinatorHandler* handler_;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_SERVICE_H_
