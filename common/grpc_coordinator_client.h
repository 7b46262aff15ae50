// The gRPC implementation of CoordinatorClient (coordinator_client.h):
// every call gets its timeout as a deadline and its status converted to
// absl::Status. Only the daemons' mains, aq and tests build one; code that
// takes a CoordinatorClient* links no gRPC.
//
// Thread-safety: the clients are thread-safe.
#ifndef AQUEDUCT_COMMON_GRPC_COORDINATOR_CLIENT_H_
#define AQUEDUCT_COMMON_GRPC_COORDINATOR_CLIENT_H_

#include <memory>
#include <string>

#include "common/coordinator_client.h"

namespace grpc {
class Channel;
}  // namespace grpc

namespace aqueduct {

// A client over `channel` (shared: several clients may use one channel).
std::unique_ptr<CoordinatorClient> NewGrpcCoordinatorClient(
    std::shared_ptr<grpc::Channel> channel);

// A client over a new insecure channel to `address` (host:port), with
// Aqueduct's message size limits (64 MiB each way). The
// channel connects lazily: an unreachable coordinator shows as UNAVAILABLE
// on the first calls, not here.
std::unique_ptr<CoordinatorClient> NewGrpcCoordinatorClient(
    const std::string& address);

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_GRPC_COORDINATOR_CLIENT_H_
