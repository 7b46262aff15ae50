// A hand-written in-memory CoordinatorClient for tests (testonly).
//
// It keeps just enough of the coordinator's rules to exercise its callers:
// - workers: RegisterWorker records the incarnation (a new one fences the
//   old); Heartbeat, ReportProgress and DeregisterWorker answer NOT_FOUND
//   for an unknown worker and FAILED_PRECONDITION for a stale or fenced
//   incarnation, as coordinator/registry.cc does. Forget() is a coordinator
//   restart; Fence() a newer incarnation registered elsewhere.
// - jobs: a table filled by SubmitJob or SetJob; WatchJob sends the job's
//   current status once and ends.
// - the rendezvous store: a map; StoreGet waits (real time) up to the
//   smaller of wait_ms and the timeout, then DEADLINE_EXCEEDED.
// - checkpoints and models: ListCheckpoints answers what SetCheckpoints
//   set; UploadModel accepts a model from a live worker incarnation (as
//   Heartbeat checks it) and keeps it, with its header, for uploads() and
//   GetModel; GetModel streams a kept model (or one SetModel set) in
//   chunks of kModelChunkBytes, FAILED_PRECONDITION for a job without one.
// Faults: set_unavailable(true) makes every call UNAVAILABLE (the
// coordinator is down); FailNext(rpc, status, n) fails the next n calls of
// one RPC. Every call is counted, failed or not.
//
// Thread-safe.
#ifndef AQUEDUCT_COMMON_FAKE_COORDINATOR_CLIENT_H_
#define AQUEDUCT_COMMON_FAKE_COORDINATOR_CLIENT_H_

#include <deque>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/coordinator_client.h"
#include "common/status.h"
#include "zlib.h"

namespace aqueduct {

class FakeCoordinatorClient final : public CoordinatorClient {
 public:
  enum class Rpc {
    kRegisterWorker,
    kHeartbeat,
    kDeregisterWorker,
    kReportProgress,
    kSubmitJob,
    kGetJob,
    kListJobs,
    kWatchJob,
    kCancelJob,
    kListWorkers,
    kGetPlan,
    kGetTrace,
    kStoreSet,
    kStoreGet,
    kStoreAdd,
    kListCheckpoints,
    kGetModel,
    kUploadModel,
  };

  // An accepted UploadModel call.
  struct Upload {
    v1::UploadModelChunk header;
    std::string bytes;
  };

  // ---- Faults and scripting.
  void set_unavailable(bool down) {
    absl::MutexLock lock(&mu_);
    unavailable_ = down;
  }
  void FailNext(Rpc rpc, absl::Status status, int times = 1) {
    absl::MutexLock lock(&mu_);
    for (int i = 0; i < times; ++i) failures_[rpc].push_back(status);
  }
  // A coordinator restart: every worker registration is forgotten.
  void Forget() {
    absl::MutexLock lock(&mu_);
    workers_.clear();
  }
  // Marks the worker's current incarnation final (fenced, dead or left).
  void Fence(const std::string& worker_id) {
    absl::MutexLock lock(&mu_);
    auto it = workers_.find(worker_id);
    if (it != workers_.end()) it->second.fenced = true;
  }
  // Heartbeat replies list these jobs to stop (once).
  void StopJobsOnNextHeartbeat(std::vector<std::string> jobs) {
    absl::MutexLock lock(&mu_);
    stop_jobs_ = std::move(jobs);
  }
  // RegisterWorker's answer (default 100 ms).
  void set_heartbeat_interval(absl::Duration interval) {
    absl::MutexLock lock(&mu_);
    heartbeat_interval_ms_ = absl::ToInt64Milliseconds(interval);
  }
  void SetJob(const v1::JobStatus& job) {
    absl::MutexLock lock(&mu_);
    jobs_[job.job_id()] = job;
  }
  void SetCheckpoints(const std::string& job_id,
                      std::vector<v1::CheckpointManifest> checkpoints) {
    absl::MutexLock lock(&mu_);
    checkpoints_[job_id] = std::move(checkpoints);
  }
  void SetModel(const std::string& job_id, std::string bytes) {
    absl::MutexLock lock(&mu_);
    models_[job_id] = std::move(bytes);
  }

  // ---- Observations.
  int calls(Rpc rpc) const {
    absl::MutexLock lock(&mu_);
    auto it = calls_.find(rpc);
    return it == calls_.end() ? 0 : it->second;
  }
  // Every accepted registration, in order.
  std::vector<v1::WorkerInfo> registrations() const {
    absl::MutexLock lock(&mu_);
    return registrations_;
  }
  // The incarnation registered for `worker_id` ("" if none).
  std::string incarnation(const std::string& worker_id) const {
    absl::MutexLock lock(&mu_);
    auto it = workers_.find(worker_id);
    return it == workers_.end() ? "" : it->second.info.incarnation();
  }
  // Every accepted stage progress report, in order of arrival.
  std::vector<v1::StageProgress> progress() const {
    absl::MutexLock lock(&mu_);
    return progress_;
  }
  // Accepted ReportProgress calls (each may carry several stages).
  int progress_requests() const {
    absl::MutexLock lock(&mu_);
    return progress_requests_;
  }
  std::vector<std::string> deregistered() const {
    absl::MutexLock lock(&mu_);
    return deregistered_;
  }
  absl::Duration last_timeout() const {
    absl::MutexLock lock(&mu_);
    return last_timeout_;
  }
  // Every accepted model upload, in order.
  std::vector<Upload> uploads() const {
    absl::MutexLock lock(&mu_);
    return uploads_;
  }

  // ---- CoordinatorClient.
  absl::StatusOr<v1::RegisterWorkerResponse> RegisterWorker(
      const v1::RegisterWorkerRequest& request,
      absl::Duration timeout) override {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(EnterLocked(Rpc::kRegisterWorker, timeout));
    const v1::WorkerInfo& info = request.info();
    if (info.worker_id().empty() || info.incarnation().empty()) {
      return absl::InvalidArgumentError("worker_id and incarnation needed");
    }
    auto it = workers_.find(info.worker_id());
    if (it != workers_.end() &&
        it->second.info.incarnation() == info.incarnation() &&
        it->second.fenced) {
      return absl::FailedPreconditionError("incarnation is final");
    }
    workers_[info.worker_id()] = Worker{info, false};
    registrations_.push_back(info);
    v1::RegisterWorkerResponse response;
    response.set_heartbeat_interval_ms(heartbeat_interval_ms_);
    response.set_lease_ms(10 * heartbeat_interval_ms_);
    response.set_coordinator_version("fake");
    return response;
  }

  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& request, absl::Duration timeout) override {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(EnterLocked(Rpc::kHeartbeat, timeout));
    RETURN_IF_ERROR(
        CheckLiveLocked(request.worker_id(), request.incarnation()));
    v1::HeartbeatResponse response;
    for (const std::string& job : stop_jobs_) response.add_stop_jobs(job);
    stop_jobs_.clear();
    return response;
  }

  absl::Status DeregisterWorker(const v1::DeregisterWorkerRequest& request,
                                absl::Duration timeout) override {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(EnterLocked(Rpc::kDeregisterWorker, timeout));
    RETURN_IF_ERROR(
        CheckLiveLocked(request.worker_id(), request.incarnation()));
    workers_[request.worker_id()].fenced = true;
    deregistered_.push_back(request.worker_id());
    return absl::OkStatus();
  }

  absl::Status ReportProgress(const v1::ReportProgressRequest& request,
                              absl::Duration timeout) override {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(EnterLocked(Rpc::kReportProgress, timeout));
    RETURN_IF_ERROR(
        CheckLiveLocked(request.worker_id(), request.incarnation()));
    ++progress_requests_;
    progress_.insert(progress_.end(), request.stages().begin(),
                     request.stages().end());
    return absl::OkStatus();
  }

  absl::StatusOr<v1::SubmitJobResponse> SubmitJob(
      const v1::SubmitJobRequest& request, absl::Duration timeout) override {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(EnterLocked(Rpc::kSubmitJob, timeout));
    v1::JobStatus job;
    job.set_job_id(absl::StrCat("job-", jobs_.size() + 1));
    job.set_name(request.spec().name());
    job.set_state(v1::JOB_PENDING);
    jobs_[job.job_id()] = job;
    v1::SubmitJobResponse response;
    response.set_job_id(job.job_id());
    return response;
  }

  absl::StatusOr<v1::JobStatus> GetJob(const v1::GetJobRequest& request,
                                       absl::Duration timeout) override {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(EnterLocked(Rpc::kGetJob, timeout));
    return FindJobLocked(request.job_id());
  }

  absl::StatusOr<v1::ListJobsResponse> ListJobs(
      const v1::ListJobsRequest&, absl::Duration timeout) override {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(EnterLocked(Rpc::kListJobs, timeout));
    v1::ListJobsResponse response;
    for (const auto& [id, job] : jobs_) *response.add_jobs() = job;
    return response;
  }

  absl::Status WatchJob(
      const v1::WatchJobRequest& request, absl::Duration timeout,
      const std::function<bool(const v1::JobStatus&)>& on_update) override {
    absl::StatusOr<v1::JobStatus> job;
    {
      absl::MutexLock lock(&mu_);
      RETURN_IF_ERROR(EnterLocked(Rpc::kWatchJob, timeout));
      job = FindJobLocked(request.job_id());
    }
    if (!job.ok()) return job.status();
    (void)on_update(*job);  // Outside the lock: the callback may call us.
    return absl::OkStatus();
  }

  absl::StatusOr<v1::CancelJobResponse> CancelJob(
      const v1::CancelJobRequest& request, absl::Duration timeout) override {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(EnterLocked(Rpc::kCancelJob, timeout));
    auto it = jobs_.find(request.job_id());
    if (it == jobs_.end()) return absl::NotFoundError("no such job");
    if (it->second.state() < v1::JOB_SUCCEEDED) {
      it->second.set_state(v1::JOB_CANCELLED);
    }
    v1::CancelJobResponse response;
    response.set_state(it->second.state());
    return response;
  }

  absl::StatusOr<v1::ListWorkersResponse> ListWorkers(
      const v1::ListWorkersRequest&, absl::Duration timeout) override {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(EnterLocked(Rpc::kListWorkers, timeout));
    v1::ListWorkersResponse response;
    for (const auto& [id, w] : workers_) {
      v1::WorkerStatus* status = response.add_workers();
      *status->mutable_info() = w.info;
      status->set_state(w.fenced ? v1::WORKER_FENCED : v1::WORKER_HEALTHY);
    }
    return response;
  }

  absl::StatusOr<v1::PartitionPlan> GetPlan(const v1::GetPlanRequest& request,
                                            absl::Duration timeout) override {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(EnterLocked(Rpc::kGetPlan, timeout));
    absl::StatusOr<v1::JobStatus> job = FindJobLocked(request.job_id());
    if (!job.ok()) return job.status();
    return job->plan();
  }

  absl::StatusOr<v1::GetTraceResponse> GetTrace(
      const v1::GetTraceRequest& request, absl::Duration timeout) override {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(EnterLocked(Rpc::kGetTrace, timeout));
    RETURN_IF_ERROR(FindJobLocked(request.job_id()).status());
    return v1::GetTraceResponse();
  }

  absl::Status StoreSet(const v1::StoreSetRequest& request,
                        absl::Duration timeout) override {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(EnterLocked(Rpc::kStoreSet, timeout));
    store_[request.key()] = request.value();
    return absl::OkStatus();
  }

  absl::StatusOr<v1::StoreGetResponse> StoreGet(
      const v1::StoreGetRequest& request, absl::Duration timeout) override {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(EnterLocked(Rpc::kStoreGet, timeout));
    const std::string& key = request.key();
    auto present = [this, &key]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return store_.count(key) > 0;
    };
    const absl::Duration wait =
        std::min(absl::Milliseconds(request.wait_ms()), timeout);
    if (!mu_.AwaitWithTimeout(absl::Condition(&present), wait)) {
      return absl::DeadlineExceededError(
          absl::StrCat("store key '", key, "' not set in time"));
    }
    v1::StoreGetResponse response;
    response.set_value(store_[key]);
    return response;
  }

  absl::StatusOr<v1::StoreAddResponse> StoreAdd(
      const v1::StoreAddRequest& request, absl::Duration timeout) override {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(EnterLocked(Rpc::kStoreAdd, timeout));
    int64_t value = 0;
    auto it = store_.find(request.key());
    if (it != store_.end() && !absl::SimpleAtoi(it->second, &value)) {
      return absl::InvalidArgumentError("not a counter");
    }
    value += request.delta();
    store_[request.key()] = absl::StrCat(value);
    v1::StoreAddResponse response;
    response.set_value(value);
    return response;
  }

  absl::StatusOr<v1::ListCheckpointsResponse> ListCheckpoints(
      const v1::ListCheckpointsRequest& request,
      absl::Duration timeout) override {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(EnterLocked(Rpc::kListCheckpoints, timeout));
    v1::ListCheckpointsResponse response;
    for (const v1::CheckpointManifest& m : checkpoints_[request.job_id()]) {
      *response.add_checkpoints() = m;
    }
    return response;
  }

  absl::Status GetModel(
      const v1::GetModelRequest& request, absl::Duration timeout,
      const std::function<bool(const v1::ModelChunk&)>& on_chunk) override {
    std::string bytes;
    {
      absl::MutexLock lock(&mu_);
      RETURN_IF_ERROR(EnterLocked(Rpc::kGetModel, timeout));
      auto it = models_.find(request.job_id());
      if (it == models_.end()) {
        return absl::FailedPreconditionError(
            absl::StrCat("job ", request.job_id(), " has no trained model"));
      }
      bytes = it->second;
    }
    // Outside the lock: the callback may call us.
    v1::ModelChunk chunk;
    chunk.set_total_bytes(static_cast<int64_t>(bytes.size()));
    chunk.set_crc32(static_cast<uint32_t>(crc32_z(
        0L, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size())));
    for (size_t offset = 0; offset < bytes.size(); offset += kModelChunkBytes) {
      chunk.set_offset(static_cast<int64_t>(offset));
      chunk.set_data(bytes.substr(offset, kModelChunkBytes));
      if (!on_chunk(chunk)) break;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<v1::UploadModelResponse> UploadModel(
      const v1::UploadModelChunk& header, const std::string& bytes,
      absl::Duration timeout) override {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(EnterLocked(Rpc::kUploadModel, timeout));
    RETURN_IF_ERROR(CheckLiveLocked(header.worker_id(), header.incarnation()));
    uploads_.push_back(Upload{header, bytes});
    models_[header.job_id()] = bytes;
    v1::UploadModelResponse response;
    response.set_path(absl::StrCat("models/", header.job_id(), ".safetensors"));
    return response;
  }

 private:
  struct Worker {
    v1::WorkerInfo info;
    bool fenced = false;  // Final: fenced, dead or left.
  };

  // Counts the call and applies the injected faults.
  absl::Status EnterLocked(Rpc rpc, absl::Duration timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ++calls_[rpc];
    last_timeout_ = timeout;
    if (unavailable_) return absl::UnavailableError("coordinator down");
    std::deque<absl::Status>& queue = failures_[rpc];
    if (queue.empty()) return absl::OkStatus();
    absl::Status s = queue.front();
    queue.pop_front();
    return s;
  }

  absl::Status CheckLiveLocked(const std::string& worker_id,
                               const std::string& incarnation) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = workers_.find(worker_id);
    if (it == workers_.end()) {
      return absl::NotFoundError(
          absl::StrCat("worker ", worker_id, " is not registered"));
    }
    if (it->second.info.incarnation() != incarnation || it->second.fenced) {
      return absl::FailedPreconditionError(absl::StrCat(
          "worker ", worker_id, " incarnation ", incarnation, " is fenced"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<v1::JobStatus> FindJobLocked(const std::string& job_id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) {
      return absl::NotFoundError(
          absl::StrCat("job '", job_id, "' does not exist"));
    }
    return it->second;
  }

  mutable absl::Mutex mu_;
  bool unavailable_ ABSL_GUARDED_BY(mu_) = false;
  int64_t heartbeat_interval_ms_ ABSL_GUARDED_BY(mu_) = 100;
  std::map<Rpc, std::deque<absl::Status>> failures_ ABSL_GUARDED_BY(mu_);
  std::map<Rpc, int> calls_ ABSL_GUARDED_BY(mu_);
  absl::Duration last_timeout_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Worker> workers_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::WorkerInfo> registrations_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> deregistered_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> stop_jobs_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::StageProgress> progress_ ABSL_GUARDED_BY(mu_);
  int progress_requests_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, v1::JobStatus> jobs_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> store_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::vector<v1::CheckpointManifest>> checkpoints_
      ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> models_ ABSL_GUARDED_BY(mu_);
  std::vector<Upload> uploads_ ABSL_GUARDED_BY(mu_);
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_FAKE_COORDINATOR_CLIENT_H_
