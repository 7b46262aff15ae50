// The one absl::Status payload that crosses gRPC (in grpc::Status's error
// details; common/grpc_status.h): a v1::StageFailure, serialized
// (pipeline/failure.h). Defined here so that the conversions need no proto.
#ifndef AQUEDUCT_COMMON_GRPC_STATUS_PAYLOAD_H_
#define AQUEDUCT_COMMON_GRPC_STATUS_PAYLOAD_H_

namespace aqueduct {

inline constexpr char kStageFailurePayloadUrl[] =
    "type.googleapis.com/aqueduct.v1.StageFailure";

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_GRPC_STATUS_PAYLOAD_H_
