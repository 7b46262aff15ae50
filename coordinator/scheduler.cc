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
      events_(events),
      since_(clock->Now()) {}

absl::Duration Scheduler::WaitForWorkers(const Job& job) const {
  const int64_t wait_ms = job.spec.pipeline().wait_for_workers_ms();
  if (wait_ms > 0) {
    return std::min(absl::Milliseconds(wait_ms), options_.max_wait_for_workers);
  }
  return options_.default_wait_for_workers;
}

std::string Scheduler::WhyFail(const Job& job, absl::Time now) const {
  if (now - job.pending_since >= WaitForWorkers(job)) {
    return absl::StrFormat(
        "timed out after %.1f s waiting for %d healthy idle worker(s) "
        "(%d available)",
        absl::ToDoubleSeconds(WaitForWorkers(job)), job.workers_needed,
        static_cast<int>(registry_.IdleHealthyWorkers().size()));
  }
  const int registered = static_cast<int>(registry_.size());
  if (Settled(now) && job.attempt == 0 &&
      job.spec.pipeline().wait_for_workers_ms() == 0 &&
      job.workers_needed > registered) {
    return absl::StrFormat(
        "the registered workers shrank below the job: it needs %d and %d "
        "%s registered",
        job.workers_needed, registered, registered == 1 ? "is" : "are");
  }
  return "";
}

void Scheduler::ExpirePending(absl::Time now) {
  // Ids first: failing a job trims the table, which order() lists.
  std::vector<std::pair<std::string, std::string>> failed;  // Id, why.
  for (const std::string& id : jobs_.order()) {
    const Job& job = jobs_.At(id);
    if (job.state != v1::JOB_PENDING) continue;
    std::string why = WhyFail(job, now);
    if (!why.empty()) failed.emplace_back(id, std::move(why));
  }
  for (const auto& [id, why] : failed) {
    Job* job = jobs_.Get(id);
    if (job == nullptr || job->state != v1::JOB_PENDING) continue;
    events_.Transition(*job, JobEvent::kFailed, why);
  }
}

QueuedJob Scheduler::QueuedOf(const Job& job, absl::Time now) const {
  QueuedJob q;
  // A restarted job goes on with the workers there are (re-planned for
  // fewer, when none is spare); a new one waits for all it asks for.
  q.least = job.attempt > 0 ? 1 : job.workers_needed;
  q.wanted = job.workers_needed;
  q.waited = now - job.pending_since;
  q.priority = job.spec.priority();
  q.seq = job.seq;
  return q;
}

std::vector<const Job*> Scheduler::QueueOrder() const {
  const absl::Time now = clock_->Now();
  std::vector<std::pair<QueuedJob, const Job*>> queue;
  for (const std::string& id : jobs_.order()) {
    const Job& job = jobs_.At(id);
    if (job.state == v1::JOB_PENDING)
      queue.emplace_back(QueuedOf(job, now), &job);
  }
  std::stable_sort(queue.begin(), queue.end(),
                   [](const auto& a, const auto& b) {
                     return QueueBefore(a.first, b.first);
                   });
  std::vector<const Job*> order;
  order.reserve(queue.size());
  for (const auto& [q, job] : queue) order.push_back(job);
  return order;
}

Scheduler::Standing Scheduler::StandingOf(
    const Job& job, const std::vector<const Job*>& order) const {
  Standing s;
  const auto at = std::find(order.begin(), order.end(), &job);
  if (at == order.end()) return s;
  s.position = static_cast<int>(at - order.begin()) + 1;
  const QueuedJob q = QueuedOf(job, clock_->Now());
  const int idle = static_cast<int>(registry_.IdleHealthyWorkers().size());
  s.waiting_for = absl::StrFormat("needs %d worker%s, %d idle", q.least,
                                  q.least == 1 ? "" : "s", idle);
  if (static_cast<int>(registry_.size()) < q.least) {
    absl::StrAppendFormat(&s.waiting_for, ", %d registered",
                          static_cast<int>(registry_.size()));
  }
  if (s.position > 1) {
    absl::StrAppendFormat(&s.waiting_for, "; %d job%s ahead", s.position - 1,
                          s.position == 2 ? "" : "s");
  }
  const absl::Duration wait = WaitForWorkers(job);
  if (wait != absl::InfiniteDuration()) {
    absl::StrAppendFormat(
        &s.waiting_for, "; fails in %.0f s",
        std::max(0.0, absl::ToDoubleSeconds(wait - q.waited)));
  }
  return s;
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
  for (const Job* job : QueueOrder()) {
    pending.push_back(job->id);
    queue.push_back(QueuedOf(*job, now));
  }
  if (pending.empty()) return;
  std::vector<std::string> idle = registry_.IdleHealthyWorkers();
  if (idle.empty()) return;
  const std::vector<int> placed =
      PlaceQueuedJobs(queue, static_cast<int>(idle.size()), LiveWorkers(),
                      options_.reserve_after);
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
