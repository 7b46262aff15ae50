#include "coordinator/scheduler.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "coordinator/jobs/queue.h"

namespace aqueduct {

Scheduler::Scheduler(const CoordinatorOptions& options, const Clock* clock,
                     Registry& registry, JobTable& jobs, JobEvents& events)
    : options_(options),
      clock_(clock),
      registry_(registry),
      jobs_(jobs),
      events_(events) {}

absl::Duration Scheduler::WaitForWorkers(const Job& job) const {
  const int64_t wait_ms = job.spec.pipeline().wait_for_workers_ms();
  const absl::Duration wait = wait_ms > 0 ? absl::Milliseconds(wait_ms)
                                          : options_.default_wait_for_workers;
  return std::min(wait, options_.max_wait_for_workers);
}

void Scheduler::ExpirePending(absl::Time now) {
  // Ids first: failing a job trims the table, which order() lists.
  std::vector<std::string> expired;
  for (const std::string& id : jobs_.order()) {
    const Job& job = jobs_.At(id);
    if (job.state == v1::JOB_PENDING &&
        now - job.pending_since >= WaitForWorkers(job)) {
      expired.push_back(id);
    }
  }
  for (const std::string& id : expired) {
    Job* job = jobs_.Get(id);
    if (job == nullptr || job->state != v1::JOB_PENDING) continue;
    events_.Transition(
        *job, JobEvent::kFailed,
        absl::StrFormat(
            "timed out after %.1f s waiting for %d healthy idle worker(s) "
            "(%d available)",
            absl::ToDoubleSeconds(WaitForWorkers(*job)), job->workers_needed,
            static_cast<int>(registry_.IdleHealthyWorkers().size())));
  }
}

int Scheduler::LiveWorkers() const {
  int live = 0;
  for (const WorkerStatus& w : registry_.List()) {
    if (w.state() == v1::WORKER_HEALTHY) ++live;
  }
  return live;
}

void Scheduler::Schedule() {
  if (events_.ShuttingDown()) return;
  const absl::Time now = clock_->Now();
  std::vector<std::string> pending;
  std::vector<QueuedJob> queue;
  bool reserving = false;
  for (const std::string& id : jobs_.order()) {
    const Job& job = jobs_.At(id);
    if (job.state != v1::JOB_PENDING) continue;
    QueuedJob q;
    // A restarted job goes on with the workers there are (re-planned for
    // fewer, when none is spare); a new one waits for all it asks for.
    q.least = job.attempt > 0 ? 1 : job.workers_needed;
    q.wanted = job.workers_needed;
    q.waited = now - job.pending_since;
    reserving = reserving || q.waited >= options_.reserve_after;
    pending.push_back(id);
    queue.push_back(q);
  }
  if (pending.empty()) return;
  std::vector<std::string> idle = registry_.IdleHealthyWorkers();
  if (idle.empty()) return;
  // Counting every worker is needed only to decide a hold.
  const std::vector<int> placed =
      PlaceQueuedJobs(queue, static_cast<int>(idle.size()),
                      reserving ? LiveWorkers() : 0, options_.reserve_after);
  std::vector<std::pair<std::string, std::string>> unstarted;  // Id, why.
  auto next = idle.begin();
  for (size_t i = 0; i < pending.size(); ++i) {
    if (placed[i] == 0) continue;
    Job& job = jobs_.At(pending[i]);
    // Spares before the workers a stage could not reach (the order of
    // the others kept).
    std::stable_partition(next, idle.end(), [&job](const std::string& w) {
      return job.unreachable_peers.count(w) == 0;
    });
    job.reserved.assign(next, next + placed[i]);
    next += placed[i];
    for (const std::string& w : job.reserved) {
      registry_.Assign(w, job.id, -1, -1);
    }
    events_.Transition(job, JobEvent::kWorkersReserved, "");
    if (absl::Status s = events_.StartDriver(job.id); !s.ok()) {
      unstarted.emplace_back(job.id, std::string(s.message()));
    }
  }
  // Failing a job schedules again: only once this pass is over.
  for (const auto& [id, why] : unstarted) {
    if (Job* job = jobs_.Get(id)) {
      events_.Transition(*job, JobEvent::kFailed, why);
    }
  }
}

}  // namespace aqueduct
