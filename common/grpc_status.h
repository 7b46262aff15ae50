// Conversions between absl::Status and grpc::Status, for the edges of the
// gRPC services and clients. Thread-safe: stateless.
#ifndef AQUEDUCT_COMMON_GRPC_STATUS_H_
#define AQUEDUCT_COMMON_GRPC_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace aqueduct {

// The two code enums share numbering (both follow google.rpc.Code).
inline grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

inline absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_GRPC_STATUS_H_
