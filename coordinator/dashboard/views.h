// The dashboard's JSON documents, built from what CoordinatorCore's read
// methods return (ListWorkers, ListJobs, GetJob, GetPlan, GetTrace): pure
// functions of those messages and the time, so that they are tested without
// a coordinator or a socket. Every document is bounded (the limits below);
// each says how many items there were and how many it shows.
//
// Thread-safety: the functions are stateless.
#ifndef AQUEDUCT_COORDINATOR_DASHBOARD_VIEWS_H_
#define AQUEDUCT_COORDINATOR_DASHBOARD_VIEWS_H_

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/service_types.h"

namespace aqueduct {

// The bounds of the documents.
struct ViewLimits {
  // Workers and jobs listed (jobs: the newest).
  size_t max_workers = 500;
  size_t max_jobs = 100;
  // Points of a job's loss curve (evenly thinned, the last kept), of its
  // evaluations and of its throughput history.
  size_t max_loss_points = 1000;
  size_t max_eval_points = 200;
  // The timeline: this much before the latest event, at most this many
  // events per stage replica (the latest).
  absl::Duration timeline_window = absl::Seconds(5);
  size_t max_events_per_row = 3000;
  // Bytes of a job's reason or a restart's reason.
  size_t max_reason_bytes = 500;
};

// "forward", "backward", "send", "recv", "load", "step", "allreduce" or
// "other", from a trace event's name (worker/runtime/progress.cc names
// them "F mb=..", "B mb=..", "recv act ..", "recv grad ..", "load ..",
// "step v=..", "all-reduce ..").
const char* TraceKind(const std::string& name);

// Up to `max` of `n` indices in order, evenly spaced, first and last kept.
std::vector<size_t> ThinIndices(size_t n, size_t max);

// {"now_ms", "total", "workers": [{"id", "host", "address", "state",
// "health", "heartbeat_age_s", "device", "memory_bytes", "job", "stage",
// "replica", "version"}]}.
std::string WorkersJson(const std::vector<WorkerStatus>& workers,
                        absl::Time now, const ViewLimits& limits);

// {"now_ms", "total", "jobs": [{"id", "name", "owner", "state", "reason",
// "step", "total_steps", "samples_per_second", "loss", "attempt",
// "restarts", "workers", "submitted_ms", "started_ms", "finished_ms"}]}:
// the newest limits.max_jobs of `jobs` (in submission order), newest
// first.
std::string JobsJson(const std::vector<JobStatus>& jobs, absl::Time now,
                     const ViewLimits& limits);

// One job: its row (as in JobsJson) plus "loss_curve" [[minibatch, loss]],
// "evals" [[step, loss, accuracy]], "throughput" [[time_ms, samples/s,
// step]] (the coordinator's history, JobStatus.throughput), "stages" (the
// live per-stage status), "plan" (null until
// planned: stages with layer ranges, replicas, workers and predicted
// times), "restart_log".
std::string JobJson(const JobStatus& job, const PartitionPlan* plan,
                    absl::Time now, const ViewLimits& limits);

// The last limits.timeline_window of a job's trace, ending at its latest
// event: {"job", "end_us", "window_ms", "dropped", "rows": [{"worker",
// "stage", "replica", "events": [[kind, start_ms, duration_ms, name]],
// "truncated"}]} with start_ms relative to the window's start.
std::string TimelineJson(const std::string& job_id,
                         const v1::GetTraceResponse& trace,
                         const ViewLimits& limits);

// {"error": message}.
std::string ErrorJson(const std::string& message);

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_DASHBOARD_VIEWS_H_
