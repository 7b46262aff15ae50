// How the coordinator talks to one worker's Worker service. The gRPC
// implementation is NewGrpcWorkerClient (coordinator/grpc_worker_client.h);
// tests pass fakes through the factory. Every call has a timeout.
//
// Implementations must be thread-safe.
#ifndef AQUEDUCT_COORDINATOR_WORKER_CLIENT_H_
#define AQUEDUCT_COORDINATOR_WORKER_CLIENT_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/service_types.h"

namespace aqueduct {

class WorkerClient {
 public:
  virtual ~WorkerClient() = default;
  virtual absl::Status AssignStage(const StageAssignment& assignment,
                                   absl::Duration timeout) = 0;
  virtual absl::Status StartJob(const std::string& job_id,
                                absl::Duration timeout) = 0;
  // Stops the job on the worker; when `attempt` is set, only that attempt
  // of it (a later one already assigned keeps running).
  virtual absl::Status StopJob(const std::string& job_id,
                               const std::string& reason,
                               absl::Duration timeout,
                               std::optional<int> attempt = std::nullopt) = 0;
  // What the worker runs. The coordinator asks a job's workers when a stage
  // reports a failure, to tell a dead worker from the peer that noticed.
  virtual absl::StatusOr<WorkerRuntimeStatus> GetStatus(
      absl::Duration timeout) = 0;
  virtual absl::StatusOr<ModelProfile> Profile(const JobSpec& spec,
                                               absl::Duration timeout) = 0;
  // The worker measures its links to the request's targets (pipeline
  // topology "measured"). UNIMPLEMENTED unless overridden: fakes that do
  // not measure need not.
  virtual absl::StatusOr<v1::MeasureLinksResponse> MeasureLinks(
      const v1::MeasureLinksRequest& /*request*/, absl::Duration /*timeout*/) {
    return absl::UnimplementedError("MeasureLinks is not implemented");
  }
};

// Builds a client for the worker at `address` (host:port).
using WorkerClientFactory =
    std::function<std::unique_ptr<WorkerClient>(const std::string& address)>;

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_WORKER_CLIENT_H_
