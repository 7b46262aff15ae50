// The coordinator's queue of pending jobs, as pure code: which jobs may
// enter it (admission) and which of those start now (placement). The
// coordinator counts, calls these under its lock and applies the answer.
//
// Admission: a submission is refused with RESOURCE_EXHAUSTED when
// `max_pending` jobs are already pending, or when its owner already has
// `max_per_user` unfinished jobs (pending, planning or running; the empty
// owner, a caller without authentication, counts as one user).
//
// Placement: jobs are considered by priority (higher first), then in
// submission order (QueueOrder). A job starts as soon as enough idle
// healthy workers are free for it (`least`), taking up to `wanted`. A job
// that cannot start now is skipped and later jobs may start on the workers
// it cannot use (backfill), so one job asking for more workers than exist
// blocks nobody. A job that waits holds back the idle workers it needs
// (when it could run on the healthy workers registered, busy or idle) from
// every later job of lower priority at once, and from later jobs of its
// own priority once it has waited `reserve_after` (against a large job
// starved by a stream of small ones). Later jobs start only on idle
// workers beyond the holds that bind them, so as running jobs end, their
// workers go to the highest-priority, then oldest, waiting jobs first. A
// hold lasts until the job starts or fails.
//
// Thread-safety: stateless functions.
#ifndef AQUEDUCT_COORDINATOR_JOBS_QUEUE_H_
#define AQUEDUCT_COORDINATOR_JOBS_QUEUE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace aqueduct {

struct QueueLimits {
  // Pending jobs, all users together.
  int max_pending = 1000;
  // Unfinished jobs of one owner.
  int max_per_user = 64;
};

// OK when a job of `owner` may be queued while `pending` jobs are pending
// and `owner` has `owned` unfinished jobs; RESOURCE_EXHAUSTED naming the
// limit (and the flag that sets it) otherwise.
absl::Status AdmitJob(const QueueLimits& limits, int pending, int owned,
                      const std::string& owner);

struct QueuedJob {
  int least = 1;   // The fewest workers it can start on.
  int wanted = 1;  // The most it takes.
  absl::Duration waited = absl::ZeroDuration();  // Since it became pending.
  int priority = 0;
  int64_t seq = 0;  // Submission order.
};

// Whether `a` comes before `b` in the queue: higher priority, then
// submitted earlier.
bool QueueBefore(const QueuedJob& a, const QueuedJob& b);

// For each job of `queue` (pending, in QueueBefore order), how many of the
// `idle` idle healthy workers it gets now (0: it waits). `live`: the
// healthy workers registered, busy or idle.
std::vector<int> PlaceQueuedJobs(const std::vector<QueuedJob>& queue, int idle,
                                 int live, absl::Duration reserve_after);

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_JOBS_QUEUE_H_
