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
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace aqueduct {

// A client sending `control_token` (the worker's, from its registration)
// with every call.
std::unique_ptr<WorkerClient> NewGrpcWorkerClient(
    std::shared_ptr<grpc::Channel> channel, std::string control_token = "");

// A WorkerClientFactory over channels cached per address, each call
// carrying the control token the worker at that address registered with.
class GrpcWorkerClients {
 public:
  // Channels with `credentials` (insecure by default).
  explicit GrpcWorkerClients(
      std::shared_ptr<grpc::ChannelCredentials> credentials =
          grpc::InsecureChannelCredentials())
      : credentials_(std::move(credentials)) {}

  std::unique_ptr<WorkerClient> Get(const std::string& address);
  // Calls to `address` carry `token` from now on.
  void SetControlToken(const std::string& address, const std::string& token);
  WorkerClientFactory Factory() {
    return [this](const std::string& address) { return Get(address); };
  }

 private:
  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels_
      ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> tokens_ ABSL_GUARDED_BY(mu_);
};

// Channel arguments shared by Aqueduct's clients: message size limits and
// keepalive.
grpc::ChannelArguments AqueductChannelArguments();

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_GRPC_WORKER_CLIENT_H_
