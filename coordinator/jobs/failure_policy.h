// The coordinator's reaction to a stage's failure report: a pure function
// of the failure's typed cause (v1::StageFailure, pipeline/failure.h), its
// status code and the job's fault-tolerance policy. No text is matched.
// Thread-safe: stateless.
#ifndef AQUEDUCT_COORDINATOR_JOBS_FAILURE_POLICY_H_
#define AQUEDUCT_COORDINATOR_JOBS_FAILURE_POLICY_H_

#include "absl/status/status.h"
#include "proto/control.pb.h"

namespace aqueduct {

enum class FailureAction {
  kFail,     // The job fails: no restart mends it.
  kRestart,  // The job restarts from its latest checkpoint (or fails when
             // it has no restart left).
  kProbe,    // Find out first whether a worker died (then it restarts
             // without that worker), else restart.
};

struct FailureReaction {
  FailureAction action = FailureAction::kProbe;
  // The checkpoint failure.checkpoint_version does not load: later restarts
  // use an older one.
  bool forget_checkpoint = false;
  // failure.peer_worker_id is unreachable from the reporting stage: the
  // restart avoids placing the two together.
  bool note_unreachable_peer = false;
};

// Whether a failure of this status code is one no restart mends (a bad
// spec, missing data): INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION,
// OUT_OF_RANGE, PERMISSION_DENIED, UNIMPLEMENTED.
bool NoRestartMends(absl::StatusCode code);

// `rollback_on_nonfinite`: FaultToleranceSpec.on_nonfinite is "rollback".
FailureReaction ReactToStageFailure(const v1::StageFailure& failure,
                                    absl::StatusCode code,
                                    bool rollback_on_nonfinite);

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_JOBS_FAILURE_POLICY_H_
