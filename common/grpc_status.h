// Conversions between absl::Status and grpc::Status, for the edges of the
// gRPC services and clients. Thread-safe: stateless.
#ifndef AQUEDUCT_COMMON_GRPC_STATUS_H_
#define AQUEDUCT_COMMON_GRPC_STATUS_H_

#include <cstddef>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "common/grpc_status_payload.h"
#include "grpcpp/support/status.h"

namespace aqueduct {

// Most bytes of a stage-failure payload carried across (a serialized
// v1::StageFailure is a few hundred bytes at most; more is dropped).
inline constexpr size_t kMaxStatusPayloadBytes = 1024;

// The two code enums share numbering (both follow google.rpc.Code). A
// stage-failure payload (common/grpc_status_payload.h) travels in the
// error details.
inline grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  std::string details;
  if (auto payload = status.GetPayload(kStageFailurePayloadUrl)) {
    details = std::string(*payload);
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()), std::move(details));
}

inline absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  absl::Status out(static_cast<absl::StatusCode>(status.error_code()),
                   status.error_message());
  const std::string& details = status.error_details();
  if (!details.empty() && details.size() <= kMaxStatusPayloadBytes) {
    out.SetPayload(kStageFailurePayloadUrl, absl::Cord(details));
  }
  return out;
}

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_GRPC_STATUS_H_
