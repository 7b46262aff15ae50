// The gRPC WorkerClient: calls a worker's Worker service with a deadline on
// every call. Channels are cached per address by GrpcWorkerClients.
//
// Thread-safe.
#ifndef AQUEDUCT_COORDINATOR_GRPC_WORKER_CLIENT_H_
#define AQUEDUCT_COORDINATOR_GRPC_WORKER_CLIENT_H_

#include <map>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "coordinator/worker_client.h"
#include "grpcpp/channel.h"
#include "grpcpp/support/channel_arguments.h"

namespace aqueduct {

std::unique_ptr<WorkerClient> NewGrpcWorkerClient(
    std::shared_ptr<grpc::Channel> channel);

// A WorkerClientFactory over cached insecure channels.
class GrpcWorkerClients {
 public:
  std::unique_ptr<WorkerClient> Get(const std::string& address);
  WorkerClientFactory Factory() {
    return [this](const std::string& address) { return Get(address); };
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels_
      ABSL_GUARDED_BY(mu_);
};

// Channel arguments shared by Aqueduct's clients: message size limits and
// keepalive.
grpc::ChannelArguments AqueductChannelArguments();

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_GRPC_WORKER_CLIENT_H_
