// CoordinatorHandler: the Coordinator service's calls as messages and
// absl::Status, without gRPC. The gRPC adapter (service.h) translates each
// call, applies the deadline and converts the status; the handler checks
// the request and calls the coordinator's logic (core.h). Tests call the
// handler directly.
//
// Trained models are kept by a ModelStore (model_store.h): UploadModel
// receives one from the worker the core allows (CoordinatorCore::
// CheckModelUpload), stores it and records it with the job; GetModel streams
// the job's recorded model.
//
// Thread-safety: implementations are thread-safe. Calls that wait (StoreGet
// with a wait, WatchJob, StreamLogs with follow) end by `deadline`, and
// each holds a server thread meanwhile: at most
// CoordinatorOptions::max_waiting_calls of them wait at once, at most half
// of those for one job's store keys, for watches or for log follows, and at
// most a quarter for one caller (the authenticated caller's name the gRPC
// adapter passes; anonymous callers share no such count); a further one is
// RESOURCE_EXHAUSTED "too many waiting calls ..." at once rather than
// queued (a StoreGet whose key is already set answers without waiting,
// whatever the count).
#ifndef AQUEDUCT_COORDINATOR_HANDLER_H_
#define AQUEDUCT_COORDINATOR_HANDLER_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/control.pb.h"

namespace aqueduct {

class CoordinatorCore;
class ModelStore;

class CoordinatorHandler {
 public:
  virtual ~CoordinatorHandler() = default;

  // Workers.
  virtual absl::StatusOr<v1::RegisterWorkerResponse> RegisterWorker(
      const v1::RegisterWorkerRequest& request) = 0;
  virtual absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& request) = 0;
  virtual absl::StatusOr<v1::DeregisterWorkerResponse> DeregisterWorker(
      const v1::DeregisterWorkerRequest& request) = 0;
  // The text of the report's log lines and its error are escaped
  // (EscapeLogLines in progress_checks.h: a control character becomes a
  // visible "\xNN") before the core applies the report.
  virtual absl::StatusOr<v1::ReportProgressResponse> ReportProgress(
      const v1::ReportProgressRequest& request) = 0;

  // Jobs.
  // INVALID_ARGUMENT naming the field for a string of the spec or profile,
  // or the resume, that is not UTF-8 or holds a control character
  // (jobs/field_limits.h), before the core's checks.
  virtual absl::StatusOr<v1::SubmitJobResponse> SubmitJob(
      const v1::SubmitJobRequest& request) = 0;
  virtual absl::StatusOr<v1::JobStatus> GetJob(
      const v1::GetJobRequest& request) = 0;
  virtual absl::StatusOr<v1::ListJobsResponse> ListJobs(
      const v1::ListJobsRequest& request) = 0;
  // Calls `write` with the job's status whenever it changes (at most
  // max_rate_hz times a second), until the job is final, `write` returns
  // false (the client went away), `cancelled` returns true, or `deadline`
  // (DEADLINE_EXCEEDED). RESOURCE_EXHAUSTED when too many calls wait, or
  // too many of `caller`'s: the name of the caller's credential, "" when
  // anonymous (see the top comment).
  virtual absl::Status WatchJob(
      const std::string& caller, const v1::WatchJobRequest& request,
      absl::Time deadline, const std::function<bool()>& cancelled,
      const std::function<bool(const v1::JobStatus&)>& write) = 0;
  // WatchJob of an anonymous caller.
  absl::Status WatchJob(
      const v1::WatchJobRequest& request, absl::Time deadline,
      const std::function<bool()>& cancelled,
      const std::function<bool(const v1::JobStatus&)>& write) {
    return WatchJob("", request, deadline, cancelled, write);
  }
  virtual absl::StatusOr<v1::CancelJobResponse> CancelJob(
      const v1::CancelJobRequest& request) = 0;
  // Workers in id order, a page at a time: page_size (0: 500, at most 5000;
  // INVALID_ARGUMENT when negative) and at most 3 MiB; next_page_token
  // names the last worker returned ("" after the last page). Incarnations
  // are not shown: they prove a worker's own calls.
  virtual absl::StatusOr<v1::ListWorkersResponse> ListWorkers(
      const v1::ListWorkersRequest& request) = 0;
  virtual absl::StatusOr<v1::PartitionPlan> GetPlan(
      const v1::GetPlanRequest& request) = 0;
  virtual absl::StatusOr<v1::GetTraceResponse> GetTrace(
      const v1::GetTraceRequest& request) = 0;
  // Calls `write` with the job's log lines numbered after since_seq (of
  // request.stage only, when set), oldest first. Without `follow`, ends
  // once they are written; with it, waits for more until the job is final
  // and its log drained (OK), `write` returns false (OK), `cancelled`
  // returns true (CANCELLED) or `deadline` (DEADLINE_EXCEEDED). A follow
  // that waits holds a waiting-call slot (group "log follows", counted
  // for `caller` as WatchJob's are). NOT_FOUND for an unknown job.
  virtual absl::Status StreamLogs(
      const std::string& caller, const v1::StreamLogsRequest& request,
      absl::Time deadline, const std::function<bool()>& cancelled,
      const std::function<bool(const v1::LogLine&)>& write) = 0;
  // StreamLogs of an anonymous caller.
  absl::Status StreamLogs(
      const v1::StreamLogsRequest& request, absl::Time deadline,
      const std::function<bool()>& cancelled,
      const std::function<bool(const v1::LogLine&)>& write) {
    return StreamLogs("", request, deadline, cancelled, write);
  }

  // The rendezvous store (CoordinatorCore::StoreSet and friends: keys of
  // the attempt a job runs). StoreGet waits at most wait_ms, at most
  // CoordinatorOptions::max_store_wait and until `deadline`.
  virtual absl::StatusOr<v1::StoreSetResponse> StoreSet(
      const v1::StoreSetRequest& request) = 0;
  virtual absl::StatusOr<v1::StoreGetResponse> StoreGet(
      const v1::StoreGetRequest& request, absl::Time deadline) = 0;
  virtual absl::StatusOr<v1::StoreAddResponse> StoreAdd(
      const v1::StoreAddRequest& request) = 0;

  // Checkpoints and trained models.
  virtual absl::StatusOr<v1::ListCheckpointsResponse> ListCheckpoints(
      const v1::ListCheckpointsRequest& request) = 0;
  // Calls `write` with the job's trained model in chunks, in order, each
  // with the file's size and CRC-32, until the end of the file, `write`
  // returns false or `cancelled` returns true (CANCELLED).
  // FAILED_PRECONDITION naming the job's state when it has no model;
  // NOT_FOUND for an unknown job; DATA_LOSS when the file changed while it
  // was read.
  virtual absl::Status GetModel(
      const v1::GetModelRequest& request,
      const std::function<bool()>& cancelled,
      const std::function<bool(const v1::ModelChunk&)>& write) = 0;
  // Receives a model: `read` fills in the next chunk and returns false at
  // the end of the stream. The first chunk must come from the worker the
  // core allows to upload the job's model (FAILED_PRECONDITION or NOT_FOUND
  // otherwise); every chunk must carry the same job, worker, incarnation,
  // attempt, size and CRC-32 (INVALID_ARGUMENT). Then the errors of
  // ModelStore::BeginUpload, ModelUpload::Append and Commit. Returns where
  // the model is kept once it is durable and recorded with the job.
  virtual absl::StatusOr<v1::UploadModelResponse> UploadModel(
      const std::function<bool(v1::UploadModelChunk*)>& read) = 0;
};

// The handler over the coordinator's core, keeping trained models in
// `models` (neither is owned; both must outlive it). Without a model store
// (null), UploadModel and GetModel are FAILED_PRECONDITION.
std::unique_ptr<CoordinatorHandler> NewCoordinatorHandler(
    CoordinatorCore* core, ModelStore* models = nullptr);

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_HANDLER_H_
