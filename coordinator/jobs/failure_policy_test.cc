#include "coordinator/jobs/failure_policy.h"

#include <string>

#include "gtest/gtest.h"

namespace aqueduct {
namespace {

using Code = absl::StatusCode;

v1::StageFailure Failure(v1::FailureCause cause, const std::string& peer = "",
                         int64_t version = 0) {
  v1::StageFailure f;
  f.set_cause(cause);
  f.set_peer_worker_id(peer);
  f.set_checkpoint_version(version);
  return f;
}

TEST(FailurePolicyTest, TheTable) {
  struct Case {
    v1::StageFailure failure;
    Code code;
    bool rollback;
    FailureAction action;
    bool forget, note;
  };
  const Case cases[] = {
      // Non-finite: fail, unless the job rolls back.
      {Failure(v1::FAILURE_NONFINITE_LOSS), Code::kDataLoss, false,
       FailureAction::kFail, false, false},
      {Failure(v1::FAILURE_NONFINITE_LOSS), Code::kDataLoss, true,
       FailureAction::kRestart, false, false},
      // A checkpoint that does not load: forgotten, and the job probes
      // (then restarts from an older one).
      {Failure(v1::FAILURE_CHECKPOINT_UNLOADABLE, "", 500), Code::kDataLoss,
       false, FailureAction::kProbe, true, false},
      {Failure(v1::FAILURE_CHECKPOINT_UNLOADABLE), Code::kDataLoss, false,
       FailureAction::kProbe, false, false},
      // A partition: the pair is noted, and the job probes.
      {Failure(v1::FAILURE_PEER_UNREACHABLE, "w2"), Code::kDeadlineExceeded,
       false, FailureAction::kProbe, false, true},
      {Failure(v1::FAILURE_PEER_UNREACHABLE), Code::kDeadlineExceeded, false,
       FailureAction::kProbe, false, false},
      // Anything else: by the code.
      {Failure(v1::FAILURE_OTHER), Code::kInvalidArgument, false,
       FailureAction::kFail, false, false},
      {Failure(v1::FAILURE_OTHER), Code::kNotFound, true, FailureAction::kFail,
       false, false},
      {Failure(v1::FAILURE_OTHER), Code::kUnavailable, false,
       FailureAction::kProbe, false, false},
      {Failure(v1::FAILURE_OTHER), Code::kInternal, false,
       FailureAction::kProbe, false, false},
      {Failure(v1::FAILURE_CAUSE_UNSPECIFIED), Code::kFailedPrecondition, false,
       FailureAction::kFail, false, false},
  };
  int i = 0;
  for (const Case& c : cases) {
    const FailureReaction r =
        ReactToStageFailure(c.failure, c.code, c.rollback);
    EXPECT_EQ(r.action, c.action) << "case " << i;
    EXPECT_EQ(r.forget_checkpoint, c.forget) << "case " << i;
    EXPECT_EQ(r.note_unreachable_peer, c.note) << "case " << i;
    ++i;
  }
}

}  // namespace
}  // namespace aqueduct
