// How workers, the `aq` client and tools talk to the coordinator's
// aqueduct.v1.Coordinator service: one method per RPC, taking the request
// message and a timeout and returning absl::Status or the response. The gRPC
// implementation is built by NewGrpcCoordinatorClient
// (grpc_coordinator_client.h); tests pass fakes.
//
// Every call carries a deadline of `timeout` from when it is made (clamped
// to between 1 ms and a year, so an infinite timeout still has one). Errors are
// the coordinator's status codes (see docs/protocol.md, "Errors"): e.g.
// UNAVAILABLE when it cannot be reached, DEADLINE_EXCEEDED when it did not
// answer in time, FAILED_PRECONDITION for a fenced or expired worker
// incarnation, NOT_FOUND for an unknown worker or job.
//
// Code that takes a CoordinatorClient* links no gRPC.
//
// Implementations must be thread-safe: one client may be shared by several
// threads (the agent, the stage runtime's rendezvous store).
#ifndef AQUEDUCT_COMMON_COORDINATOR_CLIENT_H_
#define AQUEDUCT_COMMON_COORDINATOR_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/control.pb.h"

namespace aqueduct {

class CoordinatorClient {
 public:
  virtual ~CoordinatorClient() = default;

  // ---- Workers.
  virtual absl::StatusOr<v1::RegisterWorkerResponse> RegisterWorker(
      const v1::RegisterWorkerRequest& request, absl::Duration timeout) = 0;
  virtual absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& request, absl::Duration timeout) = 0;
  virtual absl::Status DeregisterWorker(
      const v1::DeregisterWorkerRequest& request, absl::Duration timeout) = 0;
  virtual absl::Status ReportProgress(const v1::ReportProgressRequest& request,
                                      absl::Duration timeout) = 0;

  // ---- Jobs.
  virtual absl::StatusOr<v1::SubmitJobResponse> SubmitJob(
      const v1::SubmitJobRequest& request, absl::Duration timeout) = 0;
  virtual absl::StatusOr<v1::JobStatus> GetJob(const v1::GetJobRequest& request,
                                               absl::Duration timeout) = 0;
  virtual absl::StatusOr<v1::ListJobsResponse> ListJobs(
      const v1::ListJobsRequest& request, absl::Duration timeout) = 0;
  // Streams the job's status: calls `on_update` (on the calling thread) for
  // every update until the coordinator ends the stream (the job reached a
  // final state: OK), `on_update` returns false (the call is cancelled;
  // OK), or `timeout` passes since the call began (DEADLINE_EXCEEDED).
  // Blocks until then.
  virtual absl::Status WatchJob(
      const v1::WatchJobRequest& request, absl::Duration timeout,
      const std::function<bool(const v1::JobStatus&)>& on_update) = 0;
  virtual absl::StatusOr<v1::CancelJobResponse> CancelJob(
      const v1::CancelJobRequest& request, absl::Duration timeout) = 0;
  virtual absl::StatusOr<v1::ListWorkersResponse> ListWorkers(
      const v1::ListWorkersRequest& request, absl::Duration timeout) = 0;
  virtual absl::StatusOr<v1::PartitionPlan> GetPlan(
      const v1::GetPlanRequest& request, absl::Duration timeout) = 0;
  virtual absl::StatusOr<v1::GetTraceResponse> GetTrace(
      const v1::GetTraceRequest& request, absl::Duration timeout) = 0;

  // ---- Rendezvous store. StoreGet waits up to `request.wait_ms` for the
  // key on the coordinator; `timeout` must cover that wait.
  virtual absl::Status StoreSet(const v1::StoreSetRequest& request,
                                absl::Duration timeout) = 0;
  virtual absl::StatusOr<v1::StoreGetResponse> StoreGet(
      const v1::StoreGetRequest& request, absl::Duration timeout) = 0;
  virtual absl::StatusOr<v1::StoreAddResponse> StoreAdd(
      const v1::StoreAddRequest& request, absl::Duration timeout) = 0;

  // ---- Checkpoints and trained models.
  virtual absl::StatusOr<v1::ListCheckpointsResponse> ListCheckpoints(
      const v1::ListCheckpointsRequest& request, absl::Duration timeout) = 0;
  // Streams a job's trained model: calls `on_chunk` (on the calling thread)
  // for every chunk, in order, until the coordinator ends the stream (the
  // whole file was sent: OK), `on_chunk` returns false (the call is
  // cancelled; OK), or `timeout` passes since the call began
  // (DEADLINE_EXCEEDED). FAILED_PRECONDITION when the job has no model yet.
  // Blocks until then. The caller checks offsets, size and CRC-32.
  virtual absl::Status GetModel(
      const v1::GetModelRequest& request, absl::Duration timeout,
      const std::function<bool(const v1::ModelChunk&)>& on_chunk) = 0;
  // Uploads `bytes` (a safetensors file) as the trained model of
  // header.job_id() / header.attempt(), from header.worker_id() as
  // header.incarnation(): client-streamed in chunks of kModelChunkBytes,
  // each carrying the header's identity, its offset, the total size and the
  // zlib CRC-32 of the whole of `bytes` (header's offset, data, total_bytes
  // and crc32 are ignored). Blocks until the coordinator has made it durable
  // or refused it (FAILED_PRECONDITION: this worker may not upload it;
  // ABORTED: another upload of the job is in progress; DATA_LOSS: the bytes
  // arrived damaged).
  virtual absl::StatusOr<v1::UploadModelResponse> UploadModel(
      const v1::UploadModelChunk& header, const std::string& bytes,
      absl::Duration timeout) = 0;
  // Streams a job's log lines (StreamLogs): calls `on_line` (on the calling
  // thread) for each until the coordinator ends the stream (OK), `on_line`
  // returns false (cancelled; OK) or `timeout` (DEADLINE_EXCEEDED). Blocks
  // until then. UNIMPLEMENTED in clients without it (fakes).
  virtual absl::Status StreamLogs(
      const v1::StreamLogsRequest& request, absl::Duration timeout,
      const std::function<bool(const v1::LogLine&)>& on_line) {
    (void)request;
    (void)timeout;
    (void)on_line;
    return absl::UnimplementedError("StreamLogs is not implemented here");
  }
};

// The size of the chunks trained models travel in (UploadModel, GetModel).
inline constexpr int64_t kModelChunkBytes = int64_t{1} << 20;

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_COORDINATOR_CLIENT_H_
