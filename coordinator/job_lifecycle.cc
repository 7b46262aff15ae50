#include "coordinator/job_lifecycle.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace aqueduct {

JobLifecycle::JobLifecycle(const CoordinatorOptions& options,
                           const Clock* clock, absl::Mutex& mu, JobTable& jobs,
                           JobEndParts parts, JobEvents& events)
    : options_(options),
      clock_(clock),
      mu_(mu),
      jobs_(jobs),
      parts_(parts),
      events_(events) {}

bool JobLifecycle::TransitionLocked(Job& job, JobEvent event,
                                    const std::string& reason) {
  mu_.AssertHeld();
  auto t = NextJobState(job.state, event);
  if (!t.ok()) {
    AQ_LOG_DEBUG("job {}: {}", job.id, t.status().ToString());
    return false;
  }
  job.state = t->to;
  ++job.version;
  if (t->to == v1::JOB_RUNNING) {
    job.started = clock_->WallNow();
    // Timed checkpoints count from here (monotonic; `started` is shown).
    job.checkpoint_asked = std::max(job.checkpoint_asked, clock_->Now());
  }
  const bool warn =
      t->to == v1::JOB_FAILED || (t->to == v1::JOB_PENDING && !reason.empty());
  LogEvent(job, warn ? "warn" : "info",
           absl::StrCat("job ", JobStateName(t->to), reason.empty() ? "" : ": ",
                        reason));
  if (t->finished) EndLocked(job, t->stop_workers, reason);
  return true;
}

void JobLifecycle::TrimFinishedLocked() {
  mu_.AssertHeld();
  for (const std::string& id : jobs_.TrimFinished(options_.max_finished_jobs)) {
    parts_.logs.Remove(id);
    parts_.traces.Remove(id);
  }
}

void JobLifecycle::EndLocked(Job& job, bool stop, const std::string& reason) {
  SyncRecords(job);
  job.reason = reason;
  job.finished = clock_->WallNow();
  parts_.journal.AppendFinishedLocked(job);
  parts_.recovery.ReleaseWorkersLocked(job, stop, reason);
  parts_.store.DeletePrefix(absl::StrCat("jobs/", job.id, "/"));
  parts_.checkpoints.RemoveUncommittedLocked(job);
  if (job.state == v1::JOB_SUCCEEDED) {
    AQ_LOG_INFO("job {} succeeded", job.id);
  } else {
    AQ_LOG_WARN("job {} {}: {}", job.id, JobStateName(job.state), reason);
  }
  TrimFinishedLocked();
  events_.Schedule();
}

void JobLifecycle::LogEvent(const Job& job, const std::string& level,
                            const std::string& text) {
  parts_.logs.AppendEvent(job.id, absl::ToUnixMillis(clock_->WallNow()), level,
                          text);
}

void JobLifecycle::SyncRecords(const Job& job) {
  JobLogStore& logs = parts_.logs;
  TraceStore& traces = parts_.traces;
  absl::Status s = parts_.executor.Submit([&logs, &traces, id = job.id] {
    if (absl::Status s = logs.Sync(id); !s.ok()) {
      AQ_LOG_WARN("job {}: log not synced: {}", id, s.ToString());
    }
    if (absl::Status s = traces.Sync(id); !s.ok()) {
      AQ_LOG_WARN("job {}: trace not synced: {}", id, s.ToString());
    }
  });
  if (!s.ok()) {
    AQ_LOG_DEBUG("job {}: records not synced: {}", job.id, s.ToString());
  }
}

}  // namespace aqueduct
