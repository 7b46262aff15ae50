// GrpcCoordinatorService: the Coordinator gRPC service, a thin adapter over
// a CoordinatorHandler (handler.h): each call is translated, given the
// client's deadline and its status converted. Blocking calls (StoreGet with
// a wait, WatchJob, GetModel) end by their deadline or when the client
// goes away.
//
// Every call is authenticated and authorised here (docs/security.md): with
// a token table, each call must carry a known bearer token (else
// UNAUTHENTICATED); user credentials may submit, cancel and read, worker
// credentials may read and act only as the worker they name (register,
// heartbeat, deregister, report progress, upload a model) and use only the
// store keys of the job they are assigned to; with TLS, workers must also
// present a verified client certificate. A registering worker must
// advertise its own address (the peer's) or one the operator allowed.
// Without a token table (loopback development) callers are anonymous and
// may do anything.
//
// Private to the coordinator daemon (and its process-level tests).
// Thread-safe (the handler is).
#ifndef AQUEDUCT_COORDINATOR_SERVICE_H_
#define AQUEDUCT_COORDINATOR_SERVICE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/auth.h"
#include "coordinator/handler.h"
#include "proto/service.grpc.pb.h"

namespace aqueduct {

// Who may call: see the top comment.
struct ServiceSecurity {
  // Null: authentication off (every caller anonymous).
  const TokenTable* tokens = nullptr;
  // TLS is on: worker calls must come with a verified client certificate.
  bool tls = false;
  // Hosts a worker may advertise besides its own address.
  std::vector<std::string> allowed_worker_hosts;
  // Whether a worker must advertise the address it calls from.
  bool check_worker_address = true;
  // Given a registering worker's address and control token, before the
  // registration reaches the core (null: not recorded).
  std::function<void(const std::string& address, const std::string& token)>
      on_control_token;
  // OK if worker `worker` may use store key `key` (PERMISSION_DENIED
  // otherwise); consulted for worker credentials. Null: any key.
  std::function<absl::Status(const std::string& worker, const std::string& key)>
      store_access;
};

class GrpcCoordinatorService final : public v1::Coordinator::Service {
 public:
  // `handler` is not owned.
  explicit GrpcCoordinatorService(CoordinatorHandler* handler,
                                  ServiceSecurity security = {})
      : handler_(handler), security_(std::move(security)) {}
  // Serves `core` through the handler over it (NewCoordinatorHandler),
  // keeping trained models in `models` (none: null). Neither is owned.
  explicit GrpcCoordinatorService(CoordinatorCore* core,
                                  ModelStore* models = nullptr,
                                  ServiceSecurity security = {})
      : owned_(NewCoordinatorHandler(core, models)),
        handler_(owned_.get()),
        security_(std::move(security)) {}

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
  grpc::Status StreamLogs(grpc::ServerContext* ctx,
                          const v1::StreamLogsRequest* request,
                          grpc::ServerWriter<v1::LogLine>* writer) override;
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
  // What a call needs of its caller.
  enum class Access { kRead, kUser, kWorker };
  // OK if the caller may make a call needing `access`; for kWorker, acting
  // as worker `worker_id`. The caller is put in `*caller` when not null.
  absl::Status Allow(const grpc::ServerContext& ctx, Access access,
                     const std::string& worker_id = "",
                     Principal* caller = nullptr) const;
  // Allow(kWorker, ...) for the worker's own store key `key` (anonymous and
  // user callers: authentication off / PERMISSION_DENIED).
  absl::Status AllowStore(const grpc::ServerContext& ctx,
                          const std::string& key) const;

  std::unique_ptr<CoordinatorHandler> owned_;
  CoordinatorHandler* handler_;
  const ServiceSecurity security_;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_SERVICE_H_
