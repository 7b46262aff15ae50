#include "coordinator/dashboard/views.h"

#include <algorithm>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "coordinator/dashboard/json.h"

namespace aqueduct {
namespace {

// "JOB_RUNNING" -> "RUNNING", "WORKER_HEALTHY" -> "HEALTHY".
std::string ShortName(const std::string& name, absl::string_view prefix) {
  return absl::StartsWith(name, prefix) ? name.substr(prefix.size()) : name;
}

std::string Truncated(const std::string& s, size_t max) {
  if (s.size() <= max) return s;
  return absl::StrCat(s.substr(0, max), "...");
}

// The colour class the page gives a worker: its state in lower case
// ("healthy", "suspect", "dead", ...), so that a state added to the proto
// shows without a change here.
std::string Health(WorkerState state) {
  return absl::AsciiStrToLower(
      ShortName(v1::WorkerState_Name(state), "WORKER_"));
}

// "cpu (OpenBLAS 1 threads)", "cuda NVIDIA H100": the kind once.
std::string DeviceText(const DeviceInfo& d) {
  if (d.name().empty()) return d.kind();
  if (absl::StartsWith(d.name(), d.kind())) return d.name();
  return absl::StrCat(d.kind(), " ", d.name());
}

void WriteWorker(const WorkerStatus& w, int64_t now_ms, JsonWriter& j) {
  const WorkerInfo& info = w.info();
  j.BeginObject();
  j.Key("id").String(info.worker_id());
  j.Key("host").String(info.host());
  j.Key("address").String(info.address());
  j.Key("state").String(ShortName(v1::WorkerState_Name(w.state()), "WORKER_"));
  j.Key("health").String(Health(w.state()));
  j.Key("heartbeat_age_s");
  if (w.last_heartbeat_ms() > 0) {
    j.Double(std::max<int64_t>(0, now_ms - w.last_heartbeat_ms()) / 1000.0);
  } else {
    j.Null();
  }
  j.Key("device").String(DeviceText(info.device()));
  j.Key("memory_bytes").Int(info.device().memory_bytes());
  j.Key("job").String(w.job_id());
  j.Key("stage").Int(w.stage());
  j.Key("replica").Int(w.replica());
  j.Key("version").String(info.version());
  j.EndObject();
}

// The fields a job's row and its detail share.
void WriteJobFields(const JobStatus& job, const ViewLimits& limits,
                    JsonWriter& j) {
  j.Key("id").String(job.job_id());
  j.Key("name").String(job.name());
  j.Key("owner").String(job.owner());
  j.Key("state").String(ShortName(v1::JobState_Name(job.state()), "JOB_"));
  j.Key("reason").String(Truncated(job.reason(), limits.max_reason_bytes));
  j.Key("step").Int(job.step());
  j.Key("total_steps").Int(job.total_steps());
  j.Key("samples_per_second").Double(job.samples_per_second());
  j.Key("loss");
  if (job.loss_curve_size() > 0) {
    j.Double(job.loss());
  } else {
    j.Null();  // no loss reported yet, rather than a loss of 0
  }
  j.Key("attempt").Int(job.attempt());
  j.Key("restarts").Int(job.restarts_size());
  j.Key("workers").Int(job.workers());
  j.Key("schedule").String(job.schedule());
  j.Key("submitted_ms").Int(job.submitted_ms());
  j.Key("started_ms").Int(job.started_ms());
  j.Key("finished_ms").Int(job.finished_ms());
  j.Key("priority").Int(job.priority());
  j.Key("queue_position").Int(job.queue_position());
  j.Key("waiting_for")
      .String(Truncated(job.waiting_for(), limits.max_reason_bytes));
}

void WriteCurves(const JobStatus& job, const ViewLimits& limits,
                 JsonWriter& j) {
  j.Key("loss_curve").BeginArray();
  for (size_t i : ThinIndices(job.loss_curve_size(), limits.max_loss_points)) {
    const LossPoint& p = job.loss_curve(static_cast<int>(i));
    j.BeginArray().Int(p.minibatch()).Double(p.loss()).EndArray();
  }
  j.EndArray();
  j.Key("evals").BeginArray();
  for (size_t i : ThinIndices(job.evals_size(), limits.max_eval_points)) {
    const v1::EvalPoint& e = job.evals(static_cast<int>(i));
    j.BeginArray().Int(e.step()).Double(e.loss()).Double(e.accuracy());
    j.EndArray();
  }
  j.EndArray();
  j.Key("throughput").BeginArray();
  for (size_t i : ThinIndices(job.throughput_size(), limits.max_loss_points)) {
    const v1::ThroughputPoint& p = job.throughput(static_cast<int>(i));
    j.BeginArray().Int(p.time_ms()).Double(p.samples_per_second());
    j.Int(p.step());
    j.EndArray();
  }
  j.EndArray();
}

void WriteStageStatus(const v1::StageStatus& s, JsonWriter& j) {
  j.BeginObject();
  j.Key("stage").Int(s.stage());
  j.Key("workers").BeginArray();
  for (const std::string& w : s.workers()) j.String(w);
  j.EndArray();
  j.Key("worker_states").BeginArray();
  for (int st : s.worker_states()) {
    j.String(ShortName(v1::WorkerState_Name(static_cast<WorkerState>(st)),
                       "WORKER_"));
  }
  j.EndArray();
  j.Key("minibatches_done").Int(s.minibatches_done());
  j.Key("committed_version").Int(s.committed_version());
  j.Key("samples_per_second").Double(s.samples_per_second());
  j.Key("step_ms_p50").Double(s.step_ms_p50());
  j.Key("step_ms_p90").Double(s.step_ms_p90());
  j.Key("utilization").Double(s.utilization());
  j.Key("bytes_sent").Int(s.bytes_sent());
  j.Key("bytes_received").Int(s.bytes_received());
  j.Key("peak_rss_bytes").Int(s.peak_rss_bytes());
  j.EndObject();
}

void WritePlanStage(const v1::PlanStage& s, int index, JsonWriter& j) {
  j.BeginObject();
  j.Key("stage").Int(index);
  j.Key("first_layer").Int(s.first_layer());
  j.Key("end_layer").Int(s.end_layer());
  j.Key("replicas").Int(s.replicas());
  j.Key("worker_ranks").BeginArray();
  for (int r : s.worker_ranks()) j.Int(r);
  j.EndArray();
  j.Key("warmup_depth").Int(s.warmup_depth());
  j.Key("predicted_time_s").Double(s.predicted_time_s());
  j.Key("compute_time_s").Double(s.compute_time_s());
  j.Key("transfer_time_s").Double(s.transfer_time_s());
  j.Key("allreduce_time_s").Double(s.allreduce_time_s());
  j.Key("predicted_memory_bytes").Double(s.predicted_memory_bytes());
  j.EndObject();
}

void WritePlan(const PartitionPlan& plan, JsonWriter& j) {
  j.BeginObject();
  j.Key("cost_model").String(plan.cost_model());
  j.Key("time_per_minibatch_s").Double(plan.time_per_minibatch_s());
  j.Key("single_worker_time_s").Double(plan.single_worker_time_s());
  j.Key("speedup_vs_single").Double(plan.speedup_vs_single());
  j.Key("noam").Int(plan.noam());
  j.Key("workers_used").Int(plan.workers_used());
  j.Key("stages").BeginArray();
  for (int i = 0; i < plan.stages_size(); ++i) {
    WritePlanStage(plan.stages(i), i, j);
  }
  j.EndArray();
  j.EndObject();
}

void WriteRestarts(const JobStatus& job, const ViewLimits& limits,
                   JsonWriter& j) {
  j.Key("restart_log").BeginArray();
  // The latest few: a job allows a handful of restarts.
  const int first = std::max(0, job.restarts_size() - 20);
  for (int i = first; i < job.restarts_size(); ++i) {
    const v1::RestartRecord& r = job.restarts(i);
    j.BeginObject();
    j.Key("attempt").Int(r.attempt());
    j.Key("at_ms").Int(r.at_ms());
    j.Key("reason").String(Truncated(r.reason(), limits.max_reason_bytes));
    j.Key("rolled_back_to").Int(r.rolled_back_to());
    j.Key("workers").Int(r.workers());
    j.EndObject();
  }
  j.EndArray();
}

// The latest end of any event in the trace (0: none).
int64_t TraceEnd(const v1::GetTraceResponse& trace) {
  int64_t end = 0;
  for (const v1::StageTrace& st : trace.stages()) {
    for (const TraceEvent& e : st.events()) {
      end = std::max(end, e.start_us() + std::max<int64_t>(0, e.duration_us()));
    }
  }
  return end;
}

void WriteTimelineRow(const v1::StageTrace& st, int64_t from_us,
                      const ViewLimits& limits, JsonWriter& j) {
  // The events in the window, the latest max_events_per_row of them.
  std::vector<int> in_window;
  for (int i = 0; i < st.events_size(); ++i) {
    const TraceEvent& e = st.events(i);
    if (e.start_us() + e.duration_us() >= from_us) in_window.push_back(i);
  }
  const size_t skip = in_window.size() > limits.max_events_per_row
                          ? in_window.size() - limits.max_events_per_row
                          : 0;
  j.BeginObject();
  j.Key("worker").String(st.worker_id());
  j.Key("stage").Int(st.stage());
  j.Key("replica").Int(st.replica());
  j.Key("truncated").Int(static_cast<int64_t>(skip));
  j.Key("events").BeginArray();
  for (size_t k = skip; k < in_window.size(); ++k) {
    const TraceEvent& e = st.events(in_window[k]);
    j.BeginArray();
    j.String(TraceKind(e.name()));
    j.Double((e.start_us() - from_us) / 1000.0);
    j.Double(e.duration_us() / 1000.0);
    j.String(e.name());
    j.EndArray();
  }
  j.EndArray();
  j.EndObject();
}

}  // namespace

const char* TraceKind(const std::string& name) {
  if (absl::StartsWith(name, "F ")) return "forward";
  if (absl::StartsWith(name, "B ")) return "backward";
  if (absl::StartsWith(name, "send")) return "send";
  if (absl::StartsWith(name, "recv")) return "recv";
  if (absl::StartsWith(name, "load")) return "load";
  if (absl::StartsWith(name, "step")) return "step";
  if (absl::StartsWith(name, "all-reduce")) return "allreduce";
  return "other";
}

std::vector<size_t> ThinIndices(size_t n, size_t max) {
  std::vector<size_t> out;
  if (n == 0 || max == 0) return out;
  if (n <= max) {
    for (size_t i = 0; i < n; ++i) out.push_back(i);
    return out;
  }
  if (max == 1) return {n - 1};
  // max points over [0, n-1], the last exactly n-1.
  for (size_t k = 0; k < max; ++k) out.push_back(k * (n - 1) / (max - 1));
  return out;
}

std::string WorkersJson(const std::vector<WorkerStatus>& workers,
                        absl::Time now, const ViewLimits& limits) {
  const int64_t now_ms = absl::ToUnixMillis(now);
  JsonWriter j;
  j.BeginObject();
  j.Key("now_ms").Int(now_ms);
  j.Key("total").Int(static_cast<int64_t>(workers.size()));
  j.Key("workers").BeginArray();
  const size_t n = std::min(workers.size(), limits.max_workers);
  for (size_t i = 0; i < n; ++i) WriteWorker(workers[i], now_ms, j);
  j.EndArray();
  j.EndObject();
  return j.str();
}

std::string JobsJson(const std::vector<JobStatus>& jobs, absl::Time now,
                     const ViewLimits& limits) {
  JsonWriter j;
  j.BeginObject();
  j.Key("now_ms").Int(absl::ToUnixMillis(now));
  j.Key("total").Int(static_cast<int64_t>(jobs.size()));
  j.Key("jobs").BeginArray();
  const size_t n = std::min(jobs.size(), limits.max_jobs);
  for (size_t k = 0; k < n; ++k) {
    j.BeginObject();
    WriteJobFields(jobs[jobs.size() - 1 - k], limits, j);
    j.EndObject();
  }
  j.EndArray();
  j.EndObject();
  return j.str();
}

std::string JobJson(const JobStatus& job, const PartitionPlan* plan,
                    absl::Time now, const ViewLimits& limits) {
  JsonWriter j;
  j.BeginObject();
  j.Key("now_ms").Int(absl::ToUnixMillis(now));
  WriteJobFields(job, limits, j);
  j.Key("test_loss").Double(job.test_loss());
  j.Key("test_accuracy").Double(job.test_accuracy());
  WriteCurves(job, limits, j);
  j.Key("stages").BeginArray();
  for (const v1::StageStatus& s : job.stages()) WriteStageStatus(s, j);
  j.EndArray();
  j.Key("plan");
  if (plan != nullptr && plan->stages_size() > 0) {
    WritePlan(*plan, j);
  } else {
    j.Null();
  }
  WriteRestarts(job, limits, j);
  j.EndObject();
  return j.str();
}

std::string TimelineJson(const std::string& job_id,
                         const v1::GetTraceResponse& trace,
                         const ViewLimits& limits) {
  const int64_t end_us = TraceEnd(trace);
  const int64_t window_us = absl::ToInt64Microseconds(limits.timeline_window);
  const int64_t from_us = end_us - window_us;
  JsonWriter j;
  j.BeginObject();
  j.Key("job").String(job_id);
  j.Key("end_us").Int(end_us);
  j.Key("window_ms").Double(window_us / 1000.0);
  j.Key("dropped").Int(trace.dropped());
  j.Key("rows").BeginArray();
  for (const v1::StageTrace& st : trace.stages()) {
    WriteTimelineRow(st, from_us, limits, j);
  }
  j.EndArray();
  j.EndObject();
  return j.str();
}

std::string ErrorJson(const std::string& message) {
  JsonWriter j;
  j.BeginObject().Key("error").String(message).EndObject();
  return j.str();
}

}  // namespace aqueduct
