// How the coordinator talks to one worker's Worker service. The gRPC
// implementation is NewGrpcWorkerClient (coordinator/grpc_worker_client.h);
// tests pass fakes through the factory. Every call has a timeout.
//
// Implementations must be thread-safe.
#ifndef AQUEDUCT_COORDINATOR_WORKER_CLIENT_H_
#define AQUEDUCT_COORDINATOR_WORKER_CLIENT_H_

#include <functional>
#include <memory>
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
  virtual absl::Status StopJob(const std::string& job_id,
                               const std::string& reason,
                               absl::Duration timeout) = 0;
  virtual absl::StatusOr<ModelProfile> Profile(const JobSpec& spec,
                                               absl::Duration timeout) = 0;
};

// Builds a client for the worker at `address` (host:port).
using WorkerClientFactory =
    std::function<std::unique_ptr<WorkerClient>(const std::string& address)>;

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_WORKER_CLIENT_H_
