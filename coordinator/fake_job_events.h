// A fake of the core's side of job_events.h for the components' tests: it
// applies transitions through the real state machine (jobs/job_state.h)
// and records every call, without journal, workers or schedule.
//
// Thread-safety: not thread-safe; like the core, called under one mutex.
#ifndef AQUEDUCT_COORDINATOR_FAKE_JOB_EVENTS_H_
#define AQUEDUCT_COORDINATOR_FAKE_JOB_EVENTS_H_

#include <string>
#include <vector>

#include "coordinator/job_events.h"

namespace aqueduct {

class FakeJobEvents : public JobEvents {
 public:
  // One call, as "transition <job> <state> <reason>", "restart <job>
  // <reason>", "lost <job> <worker> <reason>", "probe <job> <error>", "drive
  // <job>", "schedule" or "trim".
  std::vector<std::string> calls;
  // What StartDriver returns.
  absl::Status drive_status;
  bool shutting_down = false;

  bool Transition(Job& job, JobEvent event,
                  const std::string& reason) override {
    auto t = NextJobState(job.state, event);
    if (!t.ok()) return false;
    job.state = t->to;
    if (t->finished) job.reason = reason;
    calls.push_back("transition " + job.id + " " + JobStateName(t->to) +
                    (reason.empty() ? "" : " " + reason));
    return true;
  }
  void RestartOrFail(Job& job, const std::string& reason) override {
    calls.push_back("restart " + job.id + " " + reason);
  }
  void WorkerLost(Job& job, const std::string& worker_id,
                  const std::string& reason) override {
    calls.push_back("lost " + job.id + " " + worker_id + " " + reason);
  }
  void Probe(Job& job, const std::string& error) override {
    calls.push_back("probe " + job.id + " " + error);
  }
  JobStatus StatusOf(const Job& job) const override {
    return aqueduct::StatusOf(
        job, [](const std::string&) { return v1::WORKER_HEALTHY; });
  }
  absl::Status StartDriver(const std::string& job_id) override {
    calls.push_back("drive " + job_id);
    return drive_status;
  }
  bool ShuttingDown() const override { return shutting_down; }
  void Schedule() override { calls.push_back("schedule"); }
  void TrimFinished() override { calls.push_back("trim"); }
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_FAKE_JOB_EVENTS_H_
