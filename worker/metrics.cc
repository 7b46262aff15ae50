#include "worker/metrics.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/version.h"

namespace aqueduct {
namespace {

// Every call forwarded to `inner`; the agent's calls observed.
class ObservingClient final : public CoordinatorClient {
 public:
  ObservingClient(CoordinatorClient* inner, WorkerMetrics* metrics)
      : inner_(inner), metrics_(metrics) {}

  absl::StatusOr<v1::RegisterWorkerResponse> RegisterWorker(
      const v1::RegisterWorkerRequest& request,
      absl::Duration timeout) override {
    auto r = inner_->RegisterWorker(request, timeout);
    metrics_->ObserveRegistration(r.status());
    metrics_->ObserveReachability(r.status());
    return r;
  }
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& request, absl::Duration timeout) override {
    auto r = inner_->Heartbeat(request, timeout);
    metrics_->ObserveHeartbeat(r.status());
    metrics_->ObserveReachability(r.status());
    return r;
  }
  absl::Status DeregisterWorker(const v1::DeregisterWorkerRequest& request,
                                absl::Duration timeout) override {
    return inner_->DeregisterWorker(request, timeout);
  }
  absl::Status ReportProgress(const v1::ReportProgressRequest& request,
                              absl::Duration timeout) override {
    absl::Status s = inner_->ReportProgress(request, timeout);
    if (s.ok()) metrics_->ObserveReports(request);
    metrics_->ObserveReachability(s);
    return s;
  }

  // The rest pass through unobserved.
  absl::StatusOr<v1::SubmitJobResponse> SubmitJob(const v1::SubmitJobRequest& r,
                                                  absl::Duration t) override {
    return inner_->SubmitJob(r, t);
  }
  absl::StatusOr<v1::JobStatus> GetJob(const v1::GetJobRequest& r,
                                       absl::Duration t) override {
    return inner_->GetJob(r, t);
  }
  absl::StatusOr<v1::ListJobsResponse> ListJobs(const v1::ListJobsRequest& r,
                                                absl::Duration t) override {
    return inner_->ListJobs(r, t);
  }
  absl::Status WatchJob(
      const v1::WatchJobRequest& r, absl::Duration t,
      const std::function<bool(const v1::JobStatus&)>& f) override {
    return inner_->WatchJob(r, t, f);
  }
  absl::StatusOr<v1::CancelJobResponse> CancelJob(const v1::CancelJobRequest& r,
                                                  absl::Duration t) override {
    return inner_->CancelJob(r, t);
  }
  absl::StatusOr<v1::ListWorkersResponse> ListWorkers(
      const v1::ListWorkersRequest& r, absl::Duration t) override {
    return inner_->ListWorkers(r, t);
  }
  absl::StatusOr<v1::PartitionPlan> GetPlan(const v1::GetPlanRequest& r,
                                            absl::Duration t) override {
    return inner_->GetPlan(r, t);
  }
  absl::StatusOr<v1::GetTraceResponse> GetTrace(const v1::GetTraceRequest& r,
                                                absl::Duration t) override {
    return inner_->GetTrace(r, t);
  }
  absl::Status StoreSet(const v1::StoreSetRequest& r,
                        absl::Duration t) override {
    return inner_->StoreSet(r, t);
  }
  absl::StatusOr<v1::StoreGetResponse> StoreGet(const v1::StoreGetRequest& r,
                                                absl::Duration t) override {
    return inner_->StoreGet(r, t);
  }
  absl::StatusOr<v1::StoreAddResponse> StoreAdd(const v1::StoreAddRequest& r,
                                                absl::Duration t) override {
    return inner_->StoreAdd(r, t);
  }
  absl::StatusOr<v1::ListCheckpointsResponse> ListCheckpoints(
      const v1::ListCheckpointsRequest& r, absl::Duration t) override {
    return inner_->ListCheckpoints(r, t);
  }
  absl::Status GetModel(
      const v1::GetModelRequest& r, absl::Duration t,
      const std::function<bool(const v1::ModelChunk&)>& f) override {
    return inner_->GetModel(r, t, f);
  }
  absl::StatusOr<v1::UploadModelResponse> UploadModel(
      const v1::UploadModelChunk& h, const std::string& bytes,
      absl::Duration t) override {
    return inner_->UploadModel(h, bytes, t);
  }

 private:
  CoordinatorClient* const inner_;
  WorkerMetrics* const metrics_;
};

// Adds the growth of a cumulative count that restarts with each attempt.
int64_t Delta(int64_t now, int64_t* last, bool restarted) {
  const int64_t delta = (restarted || now < *last) ? now : now - *last;
  *last = now;
  return std::max<int64_t>(delta, 0);
}

void DeclareStageFamilies(MetricsText* text) {
  const std::pair<const char*, const char*> counters[] = {
      {"aqueduct_worker_stage_compute_seconds_total",
       "Seconds the stage computed (forward, backward, optimizer steps)."},
      {"aqueduct_worker_stage_communication_seconds_total",
       "Seconds the stage waited for activations, gradients or its data "
       "loader, or all-reduced."},
      {"aqueduct_worker_stage_idle_seconds_total",
       "Seconds of the stage's run in neither compute nor communication."},
      {"aqueduct_worker_stage_sent_bytes_total",
       "Bytes the stage's communicator sent."},
      {"aqueduct_worker_stage_received_bytes_total",
       "Bytes the stage's communicator received."},
      {"aqueduct_worker_stage_checkpoint_files_total",
       "Checkpoint files the stage made durable."},
  };
  for (const auto& [name, help] : counters) {
    text->Declare(name, MetricType::kCounter, help);
  }
  const std::pair<const char*, const char*> gauges[] = {
      {"aqueduct_worker_stage_minibatches",
       "Minibatches the stage completed in its current attempt."},
      {"aqueduct_worker_stage_planned_steps",
       "Minibatches the job runs in all (0: not known yet)."},
      {"aqueduct_worker_stage_utilization_ratio",
       "Busy fraction of the stage's compute since its run began."},
      {"aqueduct_worker_stage_stashed_weight_bytes",
       "Peak bytes held in stashed weight versions."},
      {"aqueduct_worker_stage_stashed_activation_bytes",
       "Peak bytes held in saved activations of minibatches in flight."},
      {"aqueduct_worker_stage_peak_in_flight",
       "Peak minibatches in flight in the stage."},
      {"aqueduct_worker_stage_loss",
       "Latest training loss (output stage only)."},
      {"aqueduct_worker_stage_finished", "1 once the stage finished its work."},
  };
  for (const auto& [name, help] : gauges) {
    text->Declare(name, MetricType::kGauge, help);
  }
}

}  // namespace

std::unique_ptr<CoordinatorClient> WorkerMetrics::Observe(
    CoordinatorClient* inner, WorkerMetrics* metrics) {
  return std::make_unique<ObservingClient>(inner, metrics);
}

void WorkerMetrics::ObserveHeartbeat(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  ++(status.ok() ? heartbeats_ : heartbeat_failures_);
}

void WorkerMetrics::ObserveRegistration(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  ++(status.ok() ? registrations_ : registration_failures_);
}

void WorkerMetrics::ObserveReachability(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  reachable_ =
      !absl::IsUnavailable(status) && !absl::IsDeadlineExceeded(status);
  answered_ = answered_ || reachable_;
}

void WorkerMetrics::ObserveReports(const v1::ReportProgressRequest& request) {
  absl::MutexLock lock(&mu_);
  ++reports_;
  for (const v1::StageProgress& p : request.stages()) ApplyLocked(p);
}

void WorkerMetrics::ApplyLocked(const v1::StageProgress& p) {
  StageKey key{p.job_id(), p.stage(), p.replica()};
  auto it = stages_.find(key);
  if (it == stages_.end()) {
    if (stages_.size() >= kMaxStages) {  // Forget the oldest stage.
      stages_.erase(std::min_element(stages_.begin(), stages_.end(),
                                     [](const auto& a, const auto& b) {
                                       return a.second.order < b.second.order;
                                     }));
    }
    it = stages_.emplace(key, Stage()).first;
    it->second.order = next_order_++;
  }
  Stage& s = it->second;
  const bool restarted = p.attempt() != s.attempt;
  s.attempt = p.attempt();
  s.bytes_sent += Delta(p.bytes_sent(), &s.last_sent, restarted);
  s.bytes_received += Delta(p.bytes_received(), &s.last_received, restarted);
  for (const v1::TraceEvent& e : p.events()) {
    s.time.AddEvent(e.track(), e.start_us(), e.duration_us());
  }
  s.minibatches_done = p.minibatches_done();
  s.total_steps = std::max(s.total_steps, p.total_steps());
  s.checkpoint_files += p.checkpoints_size();
  ++s.reports;
  s.stashed_weight_bytes = p.stashed_weight_bytes();
  s.stashed_activation_bytes = p.stashed_activation_bytes();
  s.peak_in_flight = p.peak_in_flight();
  s.utilization = p.utilization();
  if (p.losses_size() > 0) {
    s.has_loss = true;
    s.loss = p.losses(p.losses_size() - 1).loss();
  }
  s.finished = s.finished || p.finished();
}

void WorkerMetrics::RenderStagesLocked(MetricsText* text) const {
  DeclareStageFamilies(text);
  for (const auto& [key, s] : stages_) {
    const auto& [job, stage, replica] = key;
    const MetricLabels l = {{"job", job},
                            {"stage", absl::StrCat(stage)},
                            {"replica", absl::StrCat(replica)}};
    const std::string p = "aqueduct_worker_stage_";
    text->Add(p + "compute_seconds_total", l, s.time.compute_seconds());
    text->Add(p + "communication_seconds_total", l, s.time.comm_seconds());
    text->Add(p + "idle_seconds_total", l, s.time.idle_seconds());
    text->Add(p + "sent_bytes_total", l, s.bytes_sent);
    text->Add(p + "received_bytes_total", l, s.bytes_received);
    text->Add(p + "checkpoint_files_total", l, s.checkpoint_files);
    text->Add(p + "minibatches", l, s.minibatches_done);
    text->Add(p + "planned_steps", l, s.total_steps);
    text->Add(p + "utilization_ratio", l, s.utilization);
    text->Add(p + "stashed_weight_bytes", l, s.stashed_weight_bytes);
    text->Add(p + "stashed_activation_bytes", l, s.stashed_activation_bytes);
    text->Add(p + "peak_in_flight", l, s.peak_in_flight);
    if (s.has_loss) text->Add(p + "loss", l, s.loss);
    text->Add(p + "finished", l, s.finished ? 1 : 0);
  }
}

std::string WorkerMetrics::Render(const std::string& worker_id) const {
  MetricsText text;
  const MetricLabels w = {{"worker", worker_id}};
  {
    absl::MutexLock lock(&mu_);
    text.Declare("aqueduct_worker_heartbeats_sent_total", MetricType::kCounter,
                 "Heartbeats the coordinator accepted.");
    text.Add("aqueduct_worker_heartbeats_sent_total", w, heartbeats_);
    text.Declare("aqueduct_worker_heartbeats_failed_total",
                 MetricType::kCounter,
                 "Heartbeats that failed (unreachable, refused or fenced).");
    text.Add("aqueduct_worker_heartbeats_failed_total", w, heartbeat_failures_);
    text.Declare("aqueduct_build_info", MetricType::kGauge,
                 "1, labelled with the worker's version, protocol and build.");
    text.Add(
        "aqueduct_build_info",
        {{"version", kVersion}, {"protocol", kProtoHash}, {"build", kBuild}},
        1);
    text.Declare("aqueduct_worker_registrations_total", MetricType::kCounter,
                 "Registrations with the coordinator, by result.");
    text.Add("aqueduct_worker_registrations_total",
             {{"worker", worker_id}, {"result", "ok"}}, registrations_);
    text.Add("aqueduct_worker_registrations_total",
             {{"worker", worker_id}, {"result", "failed"}},
             registration_failures_);
    text.Declare("aqueduct_worker_progress_reports_total", MetricType::kCounter,
                 "ReportProgress calls the coordinator accepted.");
    text.Add("aqueduct_worker_progress_reports_total", w, reports_);
    text.Declare("aqueduct_worker_coordinator_reachable", MetricType::kGauge,
                 "1 if the coordinator answered the latest call (even with "
                 "an error), 0 if it was unreachable or timed out.");
    text.Add("aqueduct_worker_coordinator_reachable", w,
             answered_ && reachable_ ? 1 : 0);
    RenderStagesLocked(&text);
  }
  AddProcessMetrics(&text);
  return text.Render();
}

}  // namespace aqueduct
