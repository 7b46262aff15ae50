// The job state machine, as pure code: which event moves a job from which
// state to which, and what the coordinator must do on the way (journal the
// final status, release the job's workers, tell them to stop). The
// coordinator applies the returned transition; nothing here has threads,
// clocks or I/O.
//
//   PENDING --reserved--> PLANNING --started--> RUNNING --all finished-->
//   SUCCEEDED; any unfinished state --failed--> FAILED, --cancelled-->
//   CANCELLED; PLANNING or RUNNING --restart--> PENDING (a new attempt).
//   Final states accept no event.
//
// Thread-safety: stateless functions.
#ifndef AQUEDUCT_COORDINATOR_JOBS_JOB_STATE_H_
#define AQUEDUCT_COORDINATOR_JOBS_JOB_STATE_H_

#include "absl/status/statusor.h"
#include "proto/control.pb.h"

namespace aqueduct {

enum class JobEvent {
  kWorkersReserved,      // Enough healthy idle workers were reserved.
  kStarted,              // Every stage was assigned and started.
  kAllReplicasFinished,  // Every stage replica reported it finished.
  kFailed,               // A worker died or left, a stage or an RPC failed,
                         // or the wait for workers timed out.
  kCancelled,            // A client cancelled the job.
  kRestart,              // A worker was lost or a stage failed and the job
                         // has restarts left: back to PENDING for a new
                         // attempt from its latest checkpoint.
};

const char* JobEventName(JobEvent event);
const char* JobStateName(v1::JobState state);
bool IsFinal(v1::JobState state);

struct JobTransition {
  v1::JobState from, to;
  // The job ended: journal its final status and free its workers.
  bool finished = false;
  // Workers still running the job must be told to stop (not on success:
  // they stop by themselves).
  bool stop_workers = false;
};

// FAILED_PRECONDITION naming the state and the event when the event does
// not apply (e.g. kStarted for a job already CANCELLED: the caller drops
// the event).
absl::StatusOr<JobTransition> NextJobState(v1::JobState from, JobEvent event);

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_JOBS_JOB_STATE_H_
