#include "pipeline/failure.h"

#include <optional>
#include <string>
#include <utility>

#include "absl/strings/cord.h"
#include "common/grpc_status_payload.h"

namespace aqueduct {

absl::Status WithFailure(absl::Status status, const v1::StageFailure& failure) {
  if (status.ok()) return status;
  status.SetPayload(kStageFailurePayloadUrl,
                    absl::Cord(failure.SerializeAsString()));
  return status;
}

absl::Status WithCause(absl::Status status, v1::FailureCause cause) {
  v1::StageFailure failure;
  failure.set_cause(cause);
  return WithFailure(std::move(status), failure);
}

absl::Status WithMessage(const absl::Status& status, std::string message) {
  absl::Status out(status.code(), message);
  status.ForEachPayload(
      [&out](absl::string_view url, const absl::Cord& payload) {
        out.SetPayload(url, payload);
      });
  return out;
}

v1::StageFailure FailureOf(const absl::Status& status) {
  v1::StageFailure failure;
  if (status.ok()) return failure;
  const auto payload = status.GetPayload(kStageFailurePayloadUrl);
  if (!payload.has_value() || !failure.ParseFromString(std::string(*payload)) ||
      !v1::FailureCause_IsValid(failure.cause()) ||
      failure.cause() == v1::FAILURE_CAUSE_UNSPECIFIED) {
    failure.Clear();
    failure.set_cause(v1::FAILURE_OTHER);
  }
  return failure;
}

const char* FailureCauseName(v1::FailureCause cause) {
  switch (cause) {
    case v1::FAILURE_CAUSE_UNSPECIFIED:
      return "none";
    case v1::FAILURE_NONFINITE_LOSS:
      return "non-finite loss";
    case v1::FAILURE_PEER_UNREACHABLE:
      return "peer unreachable";
    case v1::FAILURE_CHECKPOINT_UNLOADABLE:
      return "checkpoint unloadable";
    case v1::FAILURE_BUSY_WITH_EARLIER_ATTEMPT:
      return "busy with an earlier attempt";
    default:
      return "other";
  }
}

}  // namespace aqueduct
