#include "coordinator/jobs/queue.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"

namespace aqueduct {

absl::Status AdmitJob(const QueueLimits& limits, int pending, int owned,
                      const std::string& owner) {
  if (pending >= limits.max_pending) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the queue is full: ", pending,
        " jobs are pending, the most the "
        "coordinator accepts (--max_pending_jobs); submit again once some "
        "have started"));
  }
  if (owned >= limits.max_per_user) {
    return absl::ResourceExhaustedError(absl::StrCat(
        owner.empty() ? "unauthenticated callers have "
                      : absl::StrCat("user '", owner, "' has "),
        owned,
        " unfinished jobs, the most one user may have "
        "(--max_jobs_per_user); submit again once some have finished or "
        "cancel some"));
  }
  return absl::OkStatus();
}

bool QueueBefore(const QueuedJob& a, const QueuedJob& b) {
  if (a.priority != b.priority) return a.priority > b.priority;
  return a.seq < b.seq;
}

std::vector<int> PlaceQueuedJobs(const std::vector<QueuedJob>& queue, int idle,
                                 int live, absl::Duration reserve_after) {
  std::vector<int> placed(queue.size(), 0);
  // 64 bits: holds add up over many jobs. `held` binds every later job;
  // `level` (the waiting jobs of the current priority that have not waited
  // long) binds the later jobs of lower priorities only.
  int64_t free = std::max(idle, 0);
  int64_t held = 0, level = 0;
  for (size_t i = 0; i < queue.size(); ++i) {
    const QueuedJob& job = queue[i];
    if (i > 0 && job.priority != queue[i - 1].priority) {
      held += level;
      level = 0;
    }
    const int64_t least = std::max(job.least, 1);
    const int64_t usable = std::max<int64_t>(free - held, 0);
    if (least <= usable) {
      const int64_t take =
          std::min<int64_t>(std::max(job.wanted, job.least), usable);
      placed[i] = static_cast<int>(take);
      free -= take;
    } else if (least <= live) {
      (job.waited >= reserve_after ? held : level) += least;
    }
  }
  return placed;
}

}  // namespace aqueduct
