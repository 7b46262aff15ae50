#include "coordinator/service.h"

#include <algorithm>

#include "common/grpc_status.h"
#include "common/version.h"

namespace aqueduct {

namespace {

absl::Time DeadlineOf(grpc::ServerContext* ctx, absl::Duration cap) {
  const absl::Time call = absl::FromChrono(ctx->deadline());
  return std::min(call, absl::Now() + cap);
}

}  // namespace

grpc::Status GrpcCoordinatorService::RegisterWorker(
    grpc::ServerContext*, const v1::RegisterWorkerRequest* request,
    v1::RegisterWorkerResponse* response) {
  absl::Status s = core_->RegisterWorker(request->info());
  if (!s.ok()) return ToGrpcStatus(s);
  const RegistryOptions& r = core_->options().registry;
  response->set_heartbeat_interval_ms(
      absl::ToInt64Milliseconds(r.heartbeat_interval));
  response->set_lease_ms(absl::ToInt64Milliseconds(r.dead_after));
  response->set_coordinator_version(kVersion);
  return grpc::Status::OK;
}

grpc::Status GrpcCoordinatorService::Heartbeat(
    grpc::ServerContext*, const v1::HeartbeatRequest* request,
    v1::HeartbeatResponse* response) {
  std::vector<std::string> stop;
  absl::Status s = core_->Heartbeat(
      request->worker_id(), request->incarnation(), request->job_id(), &stop);
  for (std::string& j : stop) response->add_stop_jobs(std::move(j));
  return ToGrpcStatus(s);
}

grpc::Status GrpcCoordinatorService::DeregisterWorker(
    grpc::ServerContext*, const v1::DeregisterWorkerRequest* request,
    v1::DeregisterWorkerResponse*) {
  return ToGrpcStatus(
      core_->DeregisterWorker(request->worker_id(), request->incarnation()));
}

grpc::Status GrpcCoordinatorService::ReportProgress(
    grpc::ServerContext*, const v1::ReportProgressRequest* request,
    v1::ReportProgressResponse*) {
  std::vector<StageProgress> stages(request->stages().begin(),
                                    request->stages().end());
  return ToGrpcStatus(core_->ReportProgress(request->worker_id(),
                                            request->incarnation(), stages));
}

grpc::Status GrpcCoordinatorService::SubmitJob(
    grpc::ServerContext*, const v1::SubmitJobRequest* request,
    v1::SubmitJobResponse* response) {
  auto id = core_->SubmitJob(
      request->spec(), request->has_profile() ? &request->profile() : nullptr);
  if (!id.ok()) return ToGrpcStatus(id.status());
  response->set_job_id(*id);
  return grpc::Status::OK;
}

grpc::Status GrpcCoordinatorService::GetJob(grpc::ServerContext*,
                                            const v1::GetJobRequest* request,
                                            JobStatus* response) {
  auto s = core_->GetJob(request->job_id());
  if (!s.ok()) return ToGrpcStatus(s.status());
  *response = *std::move(s);
  return grpc::Status::OK;
}

grpc::Status GrpcCoordinatorService::ListJobs(grpc::ServerContext*,
                                              const v1::ListJobsRequest*,
                                              v1::ListJobsResponse* response) {
  for (JobStatus& j : core_->ListJobs()) *response->add_jobs() = std::move(j);
  return grpc::Status::OK;
}

grpc::Status GrpcCoordinatorService::WatchJob(
    grpc::ServerContext* ctx, const v1::WatchJobRequest* request,
    grpc::ServerWriter<JobStatus>* writer) {
  const double rate =
      request->max_rate_hz() > 0 ? std::min(request->max_rate_hz(), 50.0) : 4.0;
  const absl::Duration min_gap = absl::Seconds(1.0 / rate);
  int64_t seen = -1;
  while (!ctx->IsCancelled()) {
    // Wake at least every second to notice a client that went away.
    const absl::Time deadline = DeadlineOf(ctx, absl::Seconds(1));
    auto update = core_->WaitForJob(request->job_id(), seen, deadline);
    if (!update.ok()) return ToGrpcStatus(update.status());
    if (update->second != seen) {
      seen = update->second;
      if (!writer->Write(update->first)) return grpc::Status::OK;
      const JobState state = update->first.state();
      if (state == v1::JOB_SUCCEEDED || state == v1::JOB_FAILED ||
          state == v1::JOB_CANCELLED) {
        return grpc::Status::OK;
      }
      absl::SleepFor(min_gap);
    }
    if (absl::FromChrono(ctx->deadline()) <= absl::Now()) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                          "watch deadline reached");
    }
  }
  return grpc::Status::CANCELLED;
}

grpc::Status GrpcCoordinatorService::CancelJob(
    grpc::ServerContext*, const v1::CancelJobRequest* request,
    v1::CancelJobResponse* response) {
  auto state = core_->CancelJob(request->job_id());
  if (!state.ok()) return ToGrpcStatus(state.status());
  response->set_state(*state);
  return grpc::Status::OK;
}

grpc::Status GrpcCoordinatorService::ListWorkers(
    grpc::ServerContext*, const v1::ListWorkersRequest*,
    v1::ListWorkersResponse* response) {
  std::vector<WorkerStatus> workers = core_->ListWorkers();
  response->mutable_workers()->Reserve(static_cast<int>(workers.size()));
  for (WorkerStatus& w : workers) response->add_workers()->Swap(&w);
  return grpc::Status::OK;
}

grpc::Status GrpcCoordinatorService::GetPlan(grpc::ServerContext*,
                                             const v1::GetPlanRequest* request,
                                             PartitionPlan* response) {
  auto plan = core_->GetPlan(request->job_id());
  if (!plan.ok()) return ToGrpcStatus(plan.status());
  *response = *std::move(plan);
  return grpc::Status::OK;
}

grpc::Status GrpcCoordinatorService::GetTrace(
    grpc::ServerContext*, const v1::GetTraceRequest* request,
    v1::GetTraceResponse* response) {
  auto trace = core_->GetTrace(request->job_id());
  if (!trace.ok()) return ToGrpcStatus(trace.status());
  *response = *std::move(trace);
  return grpc::Status::OK;
}

grpc::Status GrpcCoordinatorService::StoreSet(
    grpc::ServerContext*, const v1::StoreSetRequest* request,
    v1::StoreSetResponse*) {
  return ToGrpcStatus(core_->store()->Set(request->key(), request->value()));
}

grpc::Status GrpcCoordinatorService::StoreGet(
    grpc::ServerContext* ctx, const v1::StoreGetRequest* request,
    v1::StoreGetResponse* response) {
  if (request->wait_ms() < 0) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "StoreGet.wait_ms must not be negative");
  }
  // Waits are capped at 5 minutes whatever the caller's deadline.
  const absl::Time deadline =
      std::min(DeadlineOf(ctx, absl::Minutes(5)),
               absl::Now() + absl::Milliseconds(request->wait_ms()));
  auto value = core_->store()->Get(request->key(), deadline);
  if (!value.ok()) return ToGrpcStatus(value.status());
  response->set_value(*std::move(value));
  return grpc::Status::OK;
}

grpc::Status GrpcCoordinatorService::StoreAdd(
    grpc::ServerContext*, const v1::StoreAddRequest* request,
    v1::StoreAddResponse* response) {
  auto value = core_->store()->Add(request->key(), request->delta());
  if (!value.ok()) return ToGrpcStatus(value.status());
  response->set_value(*value);
  return grpc::Status::OK;
}

}  // namespace aqueduct
