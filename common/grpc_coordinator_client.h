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
#include "common/security.h"

namespace grpc {
class Channel;
}  // namespace grpc

namespace aqueduct {

// A client over `channel` (shared: several clients may use one channel),
// sending `token` (if any) as a bearer token with every call.
std::unique_ptr<CoordinatorClient> NewGrpcCoordinatorClient(
    std::shared_ptr<grpc::Channel> channel, const std::string& token = "");

// A client over a new channel to `address` (host:port): TLS and the bearer
// token as `security` says (default: insecure, no token), with Aqueduct's
// message size limits (64 MiB each way). The
// channel connects lazily: an unreachable coordinator shows as UNAVAILABLE
// on the first calls, not here.
std::unique_ptr<CoordinatorClient> NewGrpcCoordinatorClient(
    const std::string& address, const SecurityConfig& security = {});

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_GRPC_COORDINATOR_CLIENT_H_
