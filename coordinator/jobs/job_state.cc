#include "coordinator/jobs/job_state.h"

#include "absl/strings/str_cat.h"

namespace aqueduct {

const char* JobEventName(JobEvent event) {
  switch (event) {
    case JobEvent::kWorkersReserved:
      return "workers reserved";
    case JobEvent::kStarted:
      return "started";
    case JobEvent::kAllReplicasFinished:
      return "all replicas finished";
    case JobEvent::kFailed:
      return "failed";
    case JobEvent::kCancelled:
      return "cancelled";
    case JobEvent::kRestart:
      return "restart";
  }
  return "?";
}

const char* JobStateName(v1::JobState state) {
  switch (state) {
    case v1::JOB_PENDING:
      return "PENDING";
    case v1::JOB_PLANNING:
      return "PLANNING";
    case v1::JOB_RUNNING:
      return "RUNNING";
    case v1::JOB_SUCCEEDED:
      return "SUCCEEDED";
    case v1::JOB_FAILED:
      return "FAILED";
    case v1::JOB_CANCELLED:
      return "CANCELLED";
    default:
      return "UNKNOWN";
  }
}

bool IsFinal(v1::JobState s) {
  return s == v1::JOB_SUCCEEDED || s == v1::JOB_FAILED ||
         s == v1::JOB_CANCELLED;
}

namespace {

// The state `event` leads to from `from`, or JOB_STATE_UNSPECIFIED.
v1::JobState Target(v1::JobState from, JobEvent event) {
  if (IsFinal(from)) return v1::JOB_STATE_UNSPECIFIED;
  switch (event) {
    case JobEvent::kWorkersReserved:
      return from == v1::JOB_PENDING ? v1::JOB_PLANNING
                                     : v1::JOB_STATE_UNSPECIFIED;
    case JobEvent::kStarted:
      return from == v1::JOB_PLANNING ? v1::JOB_RUNNING
                                      : v1::JOB_STATE_UNSPECIFIED;
    case JobEvent::kAllReplicasFinished:
      return from == v1::JOB_RUNNING ? v1::JOB_SUCCEEDED
                                     : v1::JOB_STATE_UNSPECIFIED;
    case JobEvent::kFailed:
      return v1::JOB_FAILED;
    case JobEvent::kCancelled:
      return v1::JOB_CANCELLED;
    case JobEvent::kRestart:
      return from == v1::JOB_PLANNING || from == v1::JOB_RUNNING
                 ? v1::JOB_PENDING
                 : v1::JOB_STATE_UNSPECIFIED;
  }
  return v1::JOB_STATE_UNSPECIFIED;
}

}  // namespace

absl::StatusOr<JobTransition> NextJobState(v1::JobState from, JobEvent event) {
  const v1::JobState to = Target(from, event);
  if (to == v1::JOB_STATE_UNSPECIFIED) {
    return absl::FailedPreconditionError(
        absl::StrCat("a ", JobStateName(from), " job does not take the event '",
                     JobEventName(event), "'"));
  }
  JobTransition t;
  t.from = from;
  t.to = to;
  t.finished = IsFinal(to);
  t.stop_workers =
      (t.finished && to != v1::JOB_SUCCEEDED) || event == JobEvent::kRestart;
  return t;
}

}  // namespace aqueduct
