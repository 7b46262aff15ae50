#include "coordinator/handler.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "common/version.h"
#include "coordinator/core.h"

namespace aqueduct {

namespace {

class CoreHandler final : public CoordinatorHandler {
 public:
  explicit CoreHandler(CoordinatorCore* core) : core_(core) {}

  absl::StatusOr<v1::RegisterWorkerResponse> RegisterWorker(
      const v1::RegisterWorkerRequest& request) override {
    if (absl::Status s = core_->RegisterWorker(request.info()); !s.ok()) {
      return s;
    }
    const RegistryOptions& r = core_->options().registry;
    v1::RegisterWorkerResponse response;
    response.set_heartbeat_interval_ms(
        absl::ToInt64Milliseconds(r.heartbeat_interval));
    response.set_lease_ms(absl::ToInt64Milliseconds(r.dead_after));
    response.set_coordinator_version(kVersion);
    return response;
  }

  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& request) override {
    std::vector<std::string> stop;
    absl::Status s = core_->Heartbeat(
        request.worker_id(), request.incarnation(), request.job_id(), &stop);
    if (!s.ok()) return s;
    v1::HeartbeatResponse response;
    for (std::string& j : stop) response.add_stop_jobs(std::move(j));
    return response;
  }

  absl::StatusOr<v1::DeregisterWorkerResponse> DeregisterWorker(
      const v1::DeregisterWorkerRequest& request) override {
    absl::Status s =
        core_->DeregisterWorker(request.worker_id(), request.incarnation());
    if (!s.ok()) return s;
    return v1::DeregisterWorkerResponse();
  }

  absl::StatusOr<v1::ReportProgressResponse> ReportProgress(
      const v1::ReportProgressRequest& request) override {
    std::vector<StageProgress> stages(request.stages().begin(),
                                      request.stages().end());
    absl::Status s = core_->ReportProgress(request.worker_id(),
                                           request.incarnation(), stages);
    if (!s.ok()) return s;
    return v1::ReportProgressResponse();
  }

  absl::StatusOr<v1::SubmitJobResponse> SubmitJob(
      const v1::SubmitJobRequest& request) override {
    auto id = core_->SubmitJob(
        request.spec(), request.has_profile() ? &request.profile() : nullptr);
    if (!id.ok()) return id.status();
    v1::SubmitJobResponse response;
    response.set_job_id(*id);
    return response;
  }

  absl::StatusOr<v1::JobStatus> GetJob(
      const v1::GetJobRequest& request) override {
    return core_->GetJob(request.job_id());
  }

  absl::StatusOr<v1::ListJobsResponse> ListJobs(
      const v1::ListJobsRequest&) override {
    v1::ListJobsResponse response;
    for (JobStatus& j : core_->ListJobs()) *response.add_jobs() = std::move(j);
    return response;
  }

  absl::Status WatchJob(
      const v1::WatchJobRequest& request, absl::Time deadline,
      const std::function<bool()>& cancelled,
      const std::function<bool(const v1::JobStatus&)>& write) override;

  absl::StatusOr<v1::CancelJobResponse> CancelJob(
      const v1::CancelJobRequest& request) override {
    auto state = core_->CancelJob(request.job_id());
    if (!state.ok()) return state.status();
    v1::CancelJobResponse response;
    response.set_state(*state);
    return response;
  }

  absl::StatusOr<v1::ListWorkersResponse> ListWorkers(
      const v1::ListWorkersRequest&) override {
    std::vector<WorkerStatus> workers = core_->ListWorkers();
    v1::ListWorkersResponse response;
    response.mutable_workers()->Reserve(static_cast<int>(workers.size()));
    for (WorkerStatus& w : workers) response.add_workers()->Swap(&w);
    return response;
  }

  absl::StatusOr<v1::PartitionPlan> GetPlan(
      const v1::GetPlanRequest& request) override {
    return core_->GetPlan(request.job_id());
  }

  absl::StatusOr<v1::GetTraceResponse> GetTrace(
      const v1::GetTraceRequest& request) override {
    return core_->GetTrace(request.job_id());
  }

  absl::StatusOr<v1::StoreSetResponse> StoreSet(
      const v1::StoreSetRequest& request) override {
    absl::Status s = core_->store()->Set(request.key(), request.value());
    if (!s.ok()) return s;
    return v1::StoreSetResponse();
  }

  absl::StatusOr<v1::StoreGetResponse> StoreGet(
      const v1::StoreGetRequest& request, absl::Time deadline) override {
    if (request.wait_ms() < 0) {
      return absl::InvalidArgumentError(
          "StoreGet.wait_ms must not be negative");
    }
    // Waits are capped at 5 minutes whatever the caller's deadline.
    const absl::Time until =
        std::min({deadline, absl::Now() + absl::Minutes(5),
                  absl::Now() + absl::Milliseconds(request.wait_ms())});
    auto value = core_->store()->Get(request.key(), until);
    if (!value.ok()) return value.status();
    v1::StoreGetResponse response;
    response.set_value(*std::move(value));
    return response;
  }

  absl::StatusOr<v1::StoreAddResponse> StoreAdd(
      const v1::StoreAddRequest& request) override {
    auto value = core_->store()->Add(request.key(), request.delta());
    if (!value.ok()) return value.status();
    v1::StoreAddResponse response;
    response.set_value(*value);
    return response;
  }

 private:
  CoordinatorCore* core_;
};

absl::Status CoreHandler::WatchJob(
    const v1::WatchJobRequest& request, absl::Time deadline,
    const std::function<bool()>& cancelled,
    const std::function<bool(const v1::JobStatus&)>& write) {
  const double rate =
      request.max_rate_hz() > 0 ? std::min(request.max_rate_hz(), 50.0) : 4.0;
  const absl::Duration min_gap = absl::Seconds(1.0 / rate);
  int64_t seen = -1;
  while (!cancelled()) {
    // Wake at least every second to notice a client that went away.
    const absl::Time wake = std::min(deadline, absl::Now() + absl::Seconds(1));
    auto update = core_->WaitForJob(request.job_id(), seen, wake);
    if (!update.ok()) return update.status();
    if (update->second != seen) {
      seen = update->second;
      if (!write(update->first)) return absl::OkStatus();
      if (IsFinal(update->first.state())) return absl::OkStatus();
      absl::SleepFor(min_gap);
    }
    if (deadline <= absl::Now()) {
      return absl::DeadlineExceededError("watch deadline reached");
    }
  }
  return absl::CancelledError("the client went away");
}

}  // namespace

std::unique_ptr<CoordinatorHandler> NewCoordinatorHandler(
    CoordinatorCore* core) {
  return std::make_unique<CoreHandler>(core);
}

}  // namespace aqueduct
