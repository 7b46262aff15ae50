// Typed causes of a stage's failure (v1::StageFailure), carried from where
// the failure happens to the coordinator's reaction as an absl::Status
// payload (and across gRPC in the status's details: common/grpc_status.h),
// never as text to be matched. Pure; thread-safe.
#ifndef AQUEDUCT_PIPELINE_FAILURE_H_
#define AQUEDUCT_PIPELINE_FAILURE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "proto/control.pb.h"

namespace aqueduct {

// `status` (not OK) carrying `failure`.
absl::Status WithFailure(absl::Status status, const v1::StageFailure& failure);
// `status` carrying just `cause`.
absl::Status WithCause(absl::Status status, v1::FailureCause cause);

// `status` with its message replaced by `message`, its code and payloads
// (the failure) kept.
absl::Status WithMessage(const absl::Status& status, std::string message);

// The failure `status` carries: FAILURE_CAUSE_UNSPECIFIED for OK,
// FAILURE_OTHER for an error without (a readable) one.
v1::StageFailure FailureOf(const absl::Status& status);

// The short name of a cause ("non-finite loss", "peer unreachable", ...).
const char* FailureCauseName(v1::FailureCause cause);

}  // namespace aqueduct

#endif  // AQUEDUCT_PIPELINE_FAILURE_H_
