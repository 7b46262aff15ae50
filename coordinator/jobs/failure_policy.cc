#include "coordinator/jobs/failure_policy.h"

namespace aqueduct {

bool NoRestartMends(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnimplemented:
      return true;
    default:
      return false;
  }
}

FailureReaction ReactToStageFailure(const v1::StageFailure& failure,
                                    absl::StatusCode code,
                                    bool rollback_on_nonfinite) {
  FailureReaction r;
  switch (failure.cause()) {
    case v1::FAILURE_NONFINITE_LOSS:
      // Rolling back to a checkpoint is the only mend; without it, the
      // same data and weights diverge again.
      r.action = rollback_on_nonfinite ? FailureAction::kRestart
                                       : FailureAction::kFail;
      return r;
    case v1::FAILURE_CHECKPOINT_UNLOADABLE:
      r.forget_checkpoint = failure.checkpoint_version() > 0;
      break;
    case v1::FAILURE_PEER_UNREACHABLE:
      r.note_unreachable_peer = !failure.peer_worker_id().empty();
      break;
    default:
      break;
  }
  r.action =
      NoRestartMends(code) ? FailureAction::kFail : FailureAction::kProbe;
  return r;
}

}  // namespace aqueduct
