// GrpcCoordinatorService: the Coordinator gRPC service, a thin adapter that
// translates each call to CoordinatorCore and converts the status. Blocking
// calls (StoreGet with a wait, WatchJob) wait with deadlines and end when the
// client goes away.
//
// Thread-safe (the core is).
#ifndef AQUEDUCT_COORDINATOR_SERVICE_H_
#define AQUEDUCT_COORDINATOR_SERVICE_H_

#include "coordinator/core.h"
#include "proto/service.grpc.pb.h"

namespace aqueduct {

class GrpcCoordinatorService final : public v1::Coordinator::Service {
 public:
  explicit GrpcCoordinatorService(CoordinatorCore* core) : core_(core) {}

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
                      JobStatus* response) override;
  grpc::Status ListJobs(grpc::ServerContext* ctx,
                        const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override;
  grpc::Status WatchJob(grpc::ServerContext* ctx,
                        const v1::WatchJobRequest* request,
                        grpc::ServerWriter<JobStatus>* writer) override;
  grpc::Status CancelJob(grpc::ServerContext* ctx,
                         const v1::CancelJobRequest* request,
                         v1::CancelJobResponse* response) override;
  grpc::Status ListWorkers(grpc::ServerContext* ctx,
                           const v1::ListWorkersRequest* request,
                           v1::ListWorkersResponse* response) override;
  grpc::Status GetPlan(grpc::ServerContext* ctx,
                       const v1::GetPlanRequest* request,
                       PartitionPlan* response) override;
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

 private:
  CoordinatorCore* core_;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_SERVICE_H_
