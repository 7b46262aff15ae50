#include "coordinator/metrics.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/version.h"
#include "grpcpp/support/interceptor.h"

namespace aqueduct {
namespace {

constexpr char kRpcSeconds[] = "aqueduct_coordinator_rpc_duration_seconds";
constexpr char kRpcs[] = "aqueduct_coordinator_rpcs_total";

std::string JobStateLabel(v1::JobState state) {
  const std::string& name = v1::JobState_Name(state);
  return std::string(absl::StripPrefix(name, "JOB_"));
}

std::string WorkerStateLabel(v1::WorkerState state) {
  const std::string& name = v1::WorkerState_Name(state);
  return std::string(absl::StripPrefix(name, "WORKER_"));
}

// Times one call and, for Heartbeat and ReportProgress, keeps what the
// request said until the status shows whether it was accepted.
class MetricsInterceptor final : public grpc::experimental::Interceptor {
 public:
  MetricsInterceptor(grpc::experimental::ServerRpcInfo* info,
                     CoordinatorMetrics* metrics)
      : metrics_(metrics), start_(MonotonicNow()) {
    // "/aqueduct.v1.Coordinator/Heartbeat" -> "Heartbeat".
    absl::string_view method = info->method() ? info->method() : "";
    const size_t slash = method.rfind('/');
    if (slash != absl::string_view::npos) method.remove_prefix(slash + 1);
    method_ = std::string(method.substr(0, 64));
  }

  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    using grpc::experimental::InterceptionHookPoints;
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::POST_RECV_MESSAGE)) {
      Keep(methods->GetRecvMessage());
    }
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      metrics_->ObserveCall(method_, status.error_code(),
                            MonotonicNow() - start_);
      if (status.ok()) Commit();
    }
    methods->Proceed();
  }

 private:
  // The message is the method's request type (sync server: deserialized
  // before this hook).
  void Keep(void* message) {
    if (message == nullptr) return;
    if (method_ == "Heartbeat") {
      worker_id_ = static_cast<v1::HeartbeatRequest*>(message)->worker_id();
      heartbeat_ = true;
    } else if (method_ == "ReportProgress") {
      const auto* request = static_cast<v1::ReportProgressRequest*>(message);
      worker_id_ = request->worker_id();
      reports_ = CoordinatorMetrics::Summarize(*request);
    }
  }

  void Commit() {
    if (heartbeat_) metrics_->ObserveHeartbeat(worker_id_);
    if (!reports_.empty()) metrics_->ObserveReports(worker_id_, reports_);
  }

  CoordinatorMetrics* const metrics_;
  const absl::Time start_;
  std::string method_;
  std::string worker_id_;
  bool heartbeat_ = false;
  std::vector<CoordinatorMetrics::ReportSummary> reports_;
};

class MetricsInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit MetricsInterceptorFactory(CoordinatorMetrics* metrics)
      : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new MetricsInterceptor(info, metrics_);
  }

 private:
  CoordinatorMetrics* const metrics_;
};

// Adds `delta` of a cumulative count that restarts with each attempt.
int64_t Delta(int64_t now, int64_t* last, bool restarted) {
  const int64_t delta = (restarted || now < *last) ? now : now - *last;
  *last = now;
  return std::max<int64_t>(delta, 0);
}

void DeclareJobFamilies(MetricsText* text) {
  text->Declare("aqueduct_job_state", MetricType::kGauge,
                "1 for each job in the coordinator's table, labelled with its "
                "current state.");
  text->Declare("aqueduct_job_steps", MetricType::kGauge,
                "Minibatches the job's output stage has completed.");
  text->Declare("aqueduct_job_planned_steps", MetricType::kGauge,
                "Minibatches the job runs in all (0: not known yet).");
  text->Declare("aqueduct_job_samples_per_second", MetricType::kGauge,
                "The job's training throughput, samples per second (rate() "
                "of aqueduct_job_samples_total is the Prometheus way).");
  text->Declare("aqueduct_job_samples_total", MetricType::kCounter,
                "Samples the job has trained (steps x batch size).");
  text->Declare("aqueduct_job_tokens_total", MetricType::kCounter,
                "Tokens a text job has trained (samples x context).");
  text->Declare("aqueduct_job_eval_loss", MetricType::kGauge,
                "The job's latest evaluation's loss, on its held-out split "
                "(validation for text, test for images).");
  text->Declare("aqueduct_job_eval_accuracy", MetricType::kGauge,
                "The job's latest evaluation's accuracy (token accuracy for "
                "text).");
  text->Declare("aqueduct_job_loss", MetricType::kGauge,
                "The job's latest training loss.");
  text->Declare("aqueduct_job_restarts_total", MetricType::kCounter,
                "Restarts of the job after a lost worker or a failed stage "
                "(recoveries from its latest checkpoint).");
  text->Declare("aqueduct_job_rolled_back_steps_total", MetricType::kCounter,
                "Steps trained again because restarts rolled the job back "
                "to a checkpoint.");
  text->Declare("aqueduct_job_checkpoint_version", MetricType::kGauge,
                "Weight version of the job's latest committed checkpoint "
                "(0: none).");
  text->Declare("aqueduct_job_workers", MetricType::kGauge,
                "Workers the job runs on.");
  text->Declare("aqueduct_stage_samples_per_second", MetricType::kGauge,
                "A stage's throughput (all its replicas), samples per second.");
  text->Declare("aqueduct_coordinator_jobs", MetricType::kGauge,
                "Jobs in the coordinator's table by state.");
}

void AddJob(const v1::JobStatus& job, MetricsText* text) {
  const MetricLabels id = {{"job", job.job_id()}};
  text->Add("aqueduct_job_state",
            {{"job", job.job_id()},
             {"owner", job.owner()},
             {"state", JobStateLabel(job.state())}},
            1);
  text->Add("aqueduct_job_steps", id, job.step());
  text->Add("aqueduct_job_planned_steps", id, job.total_steps());
  text->Add("aqueduct_job_samples_per_second", id, job.samples_per_second());
  text->Add("aqueduct_job_samples_total", id, job.samples());
  if (job.tokens() > 0)
    text->Add("aqueduct_job_tokens_total", id, job.tokens());
  if (!job.evals().empty()) {
    const MetricLabels split = {{"job", job.job_id()},
                                {"split", job.eval_split()}};
    text->Add("aqueduct_job_eval_loss", split, job.evals().rbegin()->loss());
    text->Add("aqueduct_job_eval_accuracy", split,
              job.evals().rbegin()->accuracy());
  }
  if (job.step() > 0) text->Add("aqueduct_job_loss", id, job.loss());
  int64_t rolled_back = 0;
  for (const v1::RestartRecord& r : job.restarts()) {
    rolled_back +=
        std::max<int64_t>(r.step_at_failure() - r.rolled_back_to(), 0);
  }
  text->Add("aqueduct_job_restarts_total", id, job.restarts_size());
  text->Add("aqueduct_job_rolled_back_steps_total", id, rolled_back);
  text->Add("aqueduct_job_checkpoint_version", id, job.checkpoint_version());
  text->Add("aqueduct_job_workers", id, job.workers());
  for (const v1::StageStatus& stage : job.stages()) {
    text->Add("aqueduct_stage_samples_per_second",
              {{"job", job.job_id()}, {"stage", absl::StrCat(stage.stage())}},
              stage.samples_per_second());
  }
}

void DeclareReplicaFamilies(MetricsText* text) {
  const std::pair<const char*, const char*> counters[] = {
      {"aqueduct_stage_compute_seconds_total",
       "Seconds a stage replica computed (forward, backward, optimizer "
       "steps), from its trace events."},
      {"aqueduct_stage_communication_seconds_total",
       "Seconds a stage replica waited for activations, gradients or its data "
       "loader, or all-reduced, from its trace events."},
      {"aqueduct_stage_idle_seconds_total",
       "Seconds of a stage replica's run in neither compute nor "
       "communication (sends, scheduling, reporting)."},
      {"aqueduct_stage_sent_bytes_total",
       "Bytes a stage replica's communicator sent."},
      {"aqueduct_stage_received_bytes_total",
       "Bytes a stage replica's communicator received."},
      {"aqueduct_stage_checkpoint_files_total",
       "Checkpoint files a stage replica made durable."},
      {"aqueduct_stage_reports_total",
       "Progress reports of a stage replica the coordinator accepted."},
  };
  for (const auto& [name, help] : counters) {
    text->Declare(name, MetricType::kCounter, help);
  }
  const std::pair<const char*, const char*> gauges[] = {
      {"aqueduct_stage_minibatches",
       "Minibatches a stage replica completed in the job's current attempt."},
      {"aqueduct_stage_utilization_ratio",
       "Busy fraction of a stage replica's compute since its run began."},
      {"aqueduct_stage_stashed_weight_bytes",
       "Peak bytes a stage replica held in stashed weight versions."},
      {"aqueduct_stage_stashed_activation_bytes",
       "Peak bytes a stage replica held in saved activations of minibatches "
       "in flight."},
      {"aqueduct_stage_in_flight", "Minibatches in flight in a stage replica."},
      {"aqueduct_stage_peak_in_flight",
       "Peak minibatches in flight in a stage replica."},
  };
  for (const auto& [name, help] : gauges) {
    text->Declare(name, MetricType::kGauge, help);
  }
  text->Declare("aqueduct_stage_step_duration_seconds", MetricType::kHistogram,
                "Each step of a stage replica (forward, backward and update of "
                "a minibatch, as the worker timed it), in seconds.");
}

// Steps take 1 ms to a minute: the RPC buckets.
void ObserveInto(double seconds, HistogramSnapshot* h) {
  if (h->bounds.empty()) {
    h->bounds = RpcLatencyBuckets();
    h->cumulative.assign(h->bounds.size(), 0);
  }
  for (size_t b = 0; b < h->bounds.size(); ++b) {
    if (seconds <= h->bounds[b]) ++h->cumulative[b];
  }
  h->sum += seconds;
  ++h->count;
}

void DeclareWorkerFamilies(MetricsText* text) {
  text->Declare("aqueduct_coordinator_worker_up", MetricType::kGauge,
                "1 if the worker is HEALTHY, else 0.");
  text->Declare("aqueduct_coordinator_worker_state", MetricType::kGauge,
                "1 for each worker, labelled with its state.");
  text->Declare("aqueduct_coordinator_worker_heartbeats_total",
                MetricType::kCounter,
                "Heartbeats of the worker the coordinator accepted (since "
                "the coordinator started).");
  text->Declare("aqueduct_coordinator_worker_last_heartbeat_timestamp_seconds",
                MetricType::kGauge,
                "When the coordinator last heard the worker's heartbeat "
                "(Unix seconds; time() minus it is the age).");
  text->Declare("aqueduct_coordinator_worker_device_memory_bytes",
                MetricType::kGauge,
                "Memory of the worker's device as it reported at registration "
                "(host memory for a CPU device; GPU memory in use is not "
                "read).");
  text->Declare("aqueduct_coordinator_worker_peak_resident_memory_bytes",
                MetricType::kGauge,
                "Peak resident set of the worker process, from its latest "
                "progress report.");
  text->Declare("aqueduct_coordinator_worker_assigned", MetricType::kGauge,
                "1 for a worker assigned to a job's stage replica.");
  text->Declare("aqueduct_coordinator_workers", MetricType::kGauge,
                "Registered workers by state.");
}

}  // namespace

std::vector<v1::JobStatus> AllJobs(const CoordinatorCore& core) {
  std::vector<v1::JobStatus> all;
  std::string token;
  // Bounded: the table is bounded, and each page moves on.
  for (int page = 0; page < 100000; ++page) {
    absl::StatusOr<JobPage> jobs = core.ListJobs(1000, token);
    if (!jobs.ok()) break;
    for (JobStatus& job : jobs->jobs) all.push_back(std::move(job));
    if (jobs->next_page_token.empty()) break;
    token = jobs->next_page_token;
  }
  return all;
}

CoordinatorMetrics::CoordinatorMetrics()
    : rpc_seconds_({"method", "code"}, RpcLatencyBuckets()) {}

void CoordinatorMetrics::ObserveCall(const std::string& method, int code,
                                     absl::Duration elapsed) {
  rpc_seconds_.Observe(
      {method, absl::StatusCodeToString(static_cast<absl::StatusCode>(code))},
      absl::ToDoubleSeconds(elapsed));
}

void CoordinatorMetrics::ObserveHeartbeat(const std::string& worker_id) {
  absl::MutexLock lock(&mu_);
  auto it = heartbeats_.find(worker_id);
  if (it == heartbeats_.end()) {
    if (heartbeats_.size() >= kMaxTracked) return;
    it = heartbeats_.emplace(worker_id, 0).first;
  }
  ++it->second;
}

std::vector<CoordinatorMetrics::ReportSummary> CoordinatorMetrics::Summarize(
    const v1::ReportProgressRequest& request) {
  std::vector<ReportSummary> out;
  for (const v1::StageProgress& p : request.stages()) {
    ReportSummary r;
    r.job_id = p.job_id();
    r.stage = p.stage();
    r.replica = p.replica();
    r.attempt = p.attempt();
    for (const v1::TraceEvent& e : p.events()) {
      r.time.AddEvent(e.track(), e.start_us(), e.duration_us());
    }
    r.bytes_sent = p.bytes_sent();
    r.bytes_received = p.bytes_received();
    r.minibatches_done = p.minibatches_done();
    r.total_steps = p.total_steps();
    r.checkpoint_files = p.checkpoints_size();
    r.stashed_weight_bytes = p.stashed_weight_bytes();
    r.stashed_activation_bytes = p.stashed_activation_bytes();
    r.peak_rss_bytes = p.peak_rss_bytes();
    r.peak_in_flight = p.peak_in_flight();
    r.in_flight = p.in_flight_size();
    r.utilization = p.utilization();
    if (p.losses_size() > 0) {
      r.has_loss = true;
      r.loss = p.losses(p.losses_size() - 1).loss();
    }
    for (double ms : p.step_ms()) {
      if (std::isfinite(ms) && ms >= 0) r.step_seconds.push_back(ms / 1e3);
    }
    out.push_back(std::move(r));
  }
  return out;
}

void CoordinatorMetrics::ObserveReports(
    const std::string& worker_id, const std::vector<ReportSummary>& reports) {
  absl::MutexLock lock(&mu_);
  for (const ReportSummary& r : reports) ApplyReport(worker_id, r);
}

void CoordinatorMetrics::ApplyReport(const std::string& worker_id,
                                     const ReportSummary& r) {
  ReplicaKey key{r.job_id, r.stage, r.replica, worker_id};
  auto it = replicas_.find(key);
  if (it == replicas_.end()) {
    if (replicas_.size() >= kMaxTracked) return;
    it = replicas_.emplace(key, Replica()).first;
  }
  Replica& m = it->second;
  const bool restarted = r.attempt != m.attempt;
  m.attempt = r.attempt;
  m.bytes_sent += Delta(r.bytes_sent, &m.last_sent, restarted);
  m.bytes_received += Delta(r.bytes_received, &m.last_received, restarted);
  m.time.compute_us += r.time.compute_us;
  m.time.comm_us += r.time.comm_us;
  if (r.time.first_start_us != 0) {
    m.time.AddEvent("", r.time.first_start_us, 0);
    m.time.last_end_us = std::max(m.time.last_end_us, r.time.last_end_us);
  }
  m.minibatches_done = r.minibatches_done;
  m.steps_total = std::max(m.steps_total, r.total_steps);
  m.checkpoint_files += r.checkpoint_files;
  ++m.reports;
  m.stashed_weight_bytes = r.stashed_weight_bytes;
  m.stashed_activation_bytes = r.stashed_activation_bytes;
  m.peak_rss_bytes = std::max(m.peak_rss_bytes, r.peak_rss_bytes);
  m.peak_in_flight = r.peak_in_flight;
  m.in_flight = r.in_flight;
  m.utilization = r.utilization;
  if (r.has_loss) {
    m.has_loss = true;
    m.last_loss = r.loss;
  }
  for (double s : r.step_seconds) ObserveInto(s, &m.steps);
}

void CoordinatorMetrics::RenderJobs(const std::vector<v1::JobStatus>& jobs,
                                    absl::Time now, MetricsText* text) const {
  DeclareJobFamilies(text);
  text->Declare("aqueduct_build_info", MetricType::kGauge,
                "1, labelled with the coordinator's version, protocol and "
                "build.");
  text->Add(
      "aqueduct_build_info",
      {{"version", kVersion}, {"protocol", kProtoHash}, {"build", kBuild}}, 1);
  std::map<std::string, int> by_state;
  for (int s = v1::JOB_PENDING; s <= v1::JOB_CANCELLED; ++s) {
    by_state[JobStateLabel(static_cast<v1::JobState>(s))] = 0;
  }
  for (const v1::JobStatus& job : jobs) {
    // A finished job's series end kFinishedJobGrace after it did (its
    // count by state stays).
    const bool stale =
        job.finished_ms() > 0 &&
        now - absl::FromUnixMillis(job.finished_ms()) > kFinishedJobGrace;
    if (!stale) AddJob(job, text);
    ++by_state[JobStateLabel(job.state())];
  }
  for (const auto& [state, count] : by_state) {
    text->Add("aqueduct_coordinator_jobs", {{"state", state}}, count);
  }
}

void CoordinatorMetrics::RenderReplicas(const std::vector<v1::JobStatus>& jobs,
                                        MetricsText* text) {
  DeclareReplicaFamilies(text);
  std::set<std::string> known;
  for (const v1::JobStatus& job : jobs) known.insert(job.job_id());
  absl::MutexLock lock(&mu_);
  for (auto it = replicas_.begin(); it != replicas_.end();) {
    const auto& [job, stage, replica, worker] = it->first;
    if (known.count(job) == 0) {  // The core forgot the job.
      it = replicas_.erase(it);
      continue;
    }
    const Replica& m = it->second;
    const MetricLabels l = {{"job", job},
                            {"stage", absl::StrCat(stage)},
                            {"replica", absl::StrCat(replica)},
                            {"worker", worker}};
    text->Add("aqueduct_stage_compute_seconds_total", l,
              m.time.compute_seconds());
    text->Add("aqueduct_stage_communication_seconds_total", l,
              m.time.comm_seconds());
    text->Add("aqueduct_stage_idle_seconds_total", l, m.time.idle_seconds());
    text->Add("aqueduct_stage_sent_bytes_total", l, m.bytes_sent);
    text->Add("aqueduct_stage_received_bytes_total", l, m.bytes_received);
    text->Add("aqueduct_stage_checkpoint_files_total", l, m.checkpoint_files);
    text->Add("aqueduct_stage_reports_total", l, m.reports);
    text->Add("aqueduct_stage_minibatches", l, m.minibatches_done);
    text->Add("aqueduct_stage_utilization_ratio", l, m.utilization);
    text->Add("aqueduct_stage_stashed_weight_bytes", l, m.stashed_weight_bytes);
    text->Add("aqueduct_stage_stashed_activation_bytes", l,
              m.stashed_activation_bytes);
    text->Add("aqueduct_stage_in_flight", l, m.in_flight);
    text->Add("aqueduct_stage_peak_in_flight", l, m.peak_in_flight);
    if (m.steps.count > 0) {
      text->AddHistogram("aqueduct_stage_step_duration_seconds", l, m.steps);
    }
    ++it;
  }
}

void CoordinatorMetrics::RenderWorkers(
    const std::vector<v1::WorkerStatus>& workers, MetricsText* text) {
  DeclareWorkerFamilies(text);
  std::map<std::string, int64_t> peak_rss;
  std::map<std::string, int> by_state;
  absl::MutexLock lock(&mu_);
  for (const auto& [key, m] : replicas_) {
    int64_t& peak = peak_rss[std::get<3>(key)];
    peak = std::max(peak, m.peak_rss_bytes);
  }
  std::map<std::string, int64_t> heartbeats;
  for (const v1::WorkerStatus& w : workers) {
    const std::string& id = w.info().worker_id();
    const MetricLabels l = {{"worker", id}, {"host", w.info().host()}};
    text->Add("aqueduct_coordinator_worker_up", l,
              w.state() == v1::WORKER_HEALTHY ? 1 : 0);
    MetricLabels with_state = l;
    with_state.emplace_back("state", WorkerStateLabel(w.state()));
    text->Add("aqueduct_coordinator_worker_state", with_state, 1);
    ++by_state[WorkerStateLabel(w.state())];
    auto hb = heartbeats_.find(id);
    const int64_t count = hb == heartbeats_.end() ? 0 : hb->second;
    heartbeats[id] = count;
    text->Add("aqueduct_coordinator_worker_heartbeats_total", l, count);
    text->Add("aqueduct_coordinator_worker_last_heartbeat_timestamp_seconds", l,
              static_cast<double>(w.last_heartbeat_ms()) / 1000.0);
    text->Add("aqueduct_coordinator_worker_device_memory_bytes", l,
              w.info().device().memory_bytes());
    if (auto p = peak_rss.find(id); p != peak_rss.end() && p->second > 0) {
      text->Add("aqueduct_coordinator_worker_peak_resident_memory_bytes", l,
                p->second);
    }
    if (!w.job_id().empty()) {
      MetricLabels a = l;
      a.emplace_back("job", w.job_id());
      a.emplace_back("stage", absl::StrCat(w.stage()));
      a.emplace_back("replica", absl::StrCat(w.replica()));
      text->Add("aqueduct_coordinator_worker_assigned", a, 1);
    }
  }
  heartbeats_ = std::move(heartbeats);  // Forget workers the core forgot.
  for (const auto& [state, count] : by_state) {
    text->Add("aqueduct_coordinator_workers", {{"state", state}}, count);
  }
}

std::string CoordinatorMetrics::Render(const CoordinatorCore& core,
                                       absl::Time now) {
  // The core's locks are taken and released before this class's.
  const std::vector<v1::JobStatus> jobs = AllJobs(core);
  const std::vector<v1::WorkerStatus> workers = core.ListWorkers();
  MetricsText text;
  RenderJobs(jobs, now, &text);
  RenderReplicas(jobs, &text);
  RenderWorkers(workers, &text);
  text.Declare(kRpcSeconds, MetricType::kHistogram,
               "Latency of the coordinator's gRPC calls from arrival to "
               "status, by method and status code, seconds.");
  rpc_seconds_.AddTo(kRpcSeconds, &text);
  text.Declare(kRpcs, MetricType::kCounter,
               "The coordinator's gRPC calls by method and status code.");
  for (const auto& [labels, histogram] : rpc_seconds_.Snapshot()) {
    text.Add(kRpcs, labels, static_cast<double>(histogram.count));
  }
  AddProcessMetrics(&text);
  return text.Render();
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
CoordinatorMetrics::NewInterceptorFactory(CoordinatorMetrics* metrics) {
  return std::make_unique<MetricsInterceptorFactory>(metrics);
}

}  // namespace aqueduct
