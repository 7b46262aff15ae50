#include "worker/runtime/stage_runtime.h"

#ifdef AQ_HAVE_CUDA
#include "common/comm/nccl/nccl_channels.h"
#endif

#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/comm/gloo_communicator.h"
#include "common/device/factory.h"
#include "common/logging.h"
#include "common/status.h"
#include "pipeline/policy.h"
#include "pipeline/spec.h"
#include "worker/nn/spec.h"
#include "worker/nn/weights.h"
#include "worker/runtime/coordinator_store.h"
#include "worker/runtime/pipeline_stage.h"
#include "worker/train/local_trainer.h"

namespace aqueduct {

StageRuntime::StageRuntime(const StageRuntimeOptions& options)
    : options_(options) {}

StageRuntime::~StageRuntime() { Shutdown(); }

absl::Status StageRuntime::Assign(const StageAssignment& a) {
  if (a.job_id().empty() || a.stage() < 0 ||
      a.stage() >= a.plan().stages_size() || a.replica() < 0 ||
      a.replica() >= a.plan().stages(a.stage()).replicas()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "assignment of stage ", a.stage(), " replica ", a.replica(),
        " does not fit its plan of ", a.plan().stages_size(), " stage(s)"));
  }
  absl::MutexLock lock(&mu_);
  auto idle = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !(has_assignment_ && assignment_.job_id() != a.job_id() &&
             (phase_ == "assigned" || phase_ == "running"));
  };
  // The coordinator may assign the next job just before this worker has
  // seen, or finished, the stop of its previous one (stops are sent
  // asynchronously): give the previous run a moment to end.
  mu_.AwaitWithTimeout(absl::Condition(&idle), options_.busy_wait);
  if (!idle()) {
    return absl::FailedPreconditionError(
        absl::StrCat("this worker is busy with job ", assignment_.job_id()));
  }
  if (phase_ == "running") {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", a.job_id(), " is already running here"));
  }
  assignment_ = a;
  has_assignment_ = true;
  phase_ = "assigned";
  done_ = 0;
  pending_.Clear();
  dirty_ = false;
  return absl::OkStatus();
}

absl::Status StageRuntime::Start(const std::string& job_id) {
  StageAssignment a;
  {
    absl::MutexLock lock(&mu_);
    if (!has_assignment_ || assignment_.job_id() != job_id) {
      return absl::NotFoundError(
          absl::StrCat("job ", job_id, " is not assigned to this worker"));
    }
    if (phase_ == "running") return absl::OkStatus();  // Idempotent.
    if (phase_ != "assigned") {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job_id, " already ", phase_));
    }
    phase_ = "running";
    a = assignment_;
  }
  if (thread_.joinable()) thread_.join();
  stop_ = false;
  thread_ = std::thread([this, a] { Run(a); });
  return absl::OkStatus();
}

absl::Status StageRuntime::Stop(const std::string& job_id,
                                const std::string& reason) {
  absl::MutexLock lock(&mu_);
  if (!has_assignment_ || assignment_.job_id() != job_id) {
    return absl::OkStatus();
  }
  AQ_LOG_INFO("stopping job {}: {}", job_id, reason);
  stop_ = true;
  // Ends waits on peers now rather than at the peer deadline.
  if (active_comm_ != nullptr) active_comm_->Abort();
  if (active_channels_ != nullptr) active_channels_->Abort();
  if (phase_ == "assigned") phase_ = "stopped";
  return absl::OkStatus();
}

void StageRuntime::Shutdown() {
  stop_ = true;
  {
    absl::MutexLock lock(&mu_);
    if (active_comm_ != nullptr) active_comm_->Abort();
    if (active_channels_ != nullptr) active_channels_->Abort();
  }
  if (thread_.joinable()) thread_.join();
}

std::vector<StageProgress> StageRuntime::TakeProgress() {
  absl::MutexLock lock(&mu_);
  if (!dirty_) return {};
  std::vector<StageProgress> out = {pending_};
  // Keep the identity and cumulative fields; clear the per-report ones.
  pending_.clear_step_ms();
  pending_.clear_losses();
  pending_.clear_events();
  pending_.set_finished(false);
  pending_.clear_error();
  dirty_ = false;
  return out;
}

std::string StageRuntime::current_job() const {
  absl::MutexLock lock(&mu_);
  return has_assignment_ && (phase_ == "assigned" || phase_ == "running")
             ? assignment_.job_id()
             : "";
}

WorkerRuntimeStatus StageRuntime::Status() const {
  absl::MutexLock lock(&mu_);
  WorkerRuntimeStatus s;
  s.set_phase(phase_);
  if (has_assignment_) {
    s.set_job_id(assignment_.job_id());
    s.set_stage(assignment_.stage());
    s.set_replica(assignment_.replica());
  }
  s.set_minibatches_done(done_);
  return s;
}

void StageRuntime::Fail(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (status.code() == absl::StatusCode::kCancelled) {
    phase_ = "stopped";
    return;
  }
  phase_ = "failed";
  pending_.set_error(std::string(status.message()));
  dirty_ = true;
  AQ_LOG_WARN("job {} failed: {}", pending_.job_id(), status.ToString());
}

void StageRuntime::Run(StageAssignment a) {
  {
    absl::MutexLock lock(&mu_);
    pending_.set_job_id(a.job_id());
    pending_.set_stage(a.stage());
    pending_.set_replica(a.replica());
  }
  if (a.plan().stages_size() != 1 || a.plan().stages(0).replicas() != 1) {
    RunPipeline(a);
    return;
  }
  absl::StatusOr<std::unique_ptr<Device>> made =
      CreateDevice(options_.device, options_.threads);
  if (!made.ok()) {
    absl::MutexLock lock(&mu_);
    phase_ = "failed";
    pending_.set_error(std::string(made.status().message()));
    dirty_ = true;
    AQ_LOG_WARN("job {} failed: {}", a.job_id(), made.status().ToString());
    return;
  }
  Device& device = **made;
  LocalTrainOptions options;
  options.stop = &stop_;
  const absl::Time run_start = absl::Now();
  double busy_ms = 0;
  options.on_step = [&](const StepReport& r) {
    busy_ms += r.step_ms;
    absl::MutexLock lock(&mu_);
    done_ = r.step;
    pending_.set_minibatches_done(r.step);
    pending_.set_total_steps(r.total_steps);
    pending_.set_committed_version(r.step);
    pending_.clear_in_flight();
    if (r.step < r.total_steps) {
      InFlight* next = pending_.add_in_flight();
      next->set_minibatch(r.step);
      next->set_version(r.step);
    }
    pending_.add_step_ms(r.step_ms);
    LossPoint* loss = pending_.add_losses();
    loss->set_minibatch(r.step - 1);
    loss->set_loss(r.loss);
    pending_.set_utilization(
        busy_ms /
        std::max(1e-9, absl::ToDoubleMilliseconds(absl::Now() - run_start)));
    dirty_ = true;
  };
  AQ_LOG_INFO("job {}: training stage {} replica {}", a.job_id(), a.stage(),
              a.replica());
  auto result = TrainLocal(a.spec(), &device, options);
  absl::MutexLock lock(&mu_);
  if (result.ok()) {
    phase_ = "finished";
    pending_.set_finished(true);
    if (result->test.has_value()) {
      pending_.set_test_accuracy(result->test->accuracy);
      pending_.set_test_loss(result->test->loss);
    }
    AQ_LOG_INFO("job {}: finished {} steps", a.job_id(), result->steps);
  } else if (result.status().code() == absl::StatusCode::kCancelled) {
    phase_ = "stopped";
    AQ_LOG_INFO("job {}: {}", a.job_id(),
                std::string(result.status().message()));
    return;
  } else {
    phase_ = "failed";
    pending_.set_error(std::string(result.status().message()));
    AQ_LOG_WARN("job {} failed: {}", a.job_id(), result.status().ToString());
  }
  dirty_ = true;
}

namespace {

constexpr uint64_t kWeightsTag = uint64_t{1} << 58;

// The process's peak resident set size (VmHWM), in bytes.
int64_t PeakRssBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) {
      int64_t kb = 0;
      std::istringstream(line.substr(6)) >> kb;
      return kb * 1024;
    }
  }
  return 0;
}

// The parameters' bytes on the host, tensor after tensor.
absl::StatusOr<std::string> Flatten(Device& device,
                                    const ParameterSet& params) {
  size_t total = 0;
  for (const Tensor& t : params.tensors) total += t.nbytes();
  std::string out(total, '\0');
  size_t offset = 0;
  for (const Tensor& t : params.tensors) {
    RETURN_IF_ERROR(device.CopyToHost(t, out.data() + offset));
    offset += t.nbytes();
  }
  return out;
}

}  // namespace

void StageRuntime::RecordTrace(const StageEvent& e, int stage) {
  constexpr int kMaxPending = 20000;
  auto add = [&](std::string name, const char* track, absl::Time start,
                 absl::Duration d) {
    if (pending_.events_size() >= kMaxPending) return;
    TraceEvent* t = pending_.add_events();
    t->set_name(std::move(name));
    t->set_track(track);
    t->set_start_us(absl::ToUnixMicros(start));
    t->set_duration_us(absl::ToInt64Microseconds(d));
  };
  absl::MutexLock lock(&mu_);
  const std::string mb =
      absl::StrCat("mb=", e.minibatch,
                   e.microbatch > 0 ? absl::StrCat(".", e.microbatch) : "");
  switch (e.kind) {
    case OpKind::kForward:
    case OpKind::kBackward: {
      const bool forward = e.kind == OpKind::kForward;
      const absl::Duration wait = (e.end - e.start) - e.compute;
      if (wait > absl::Microseconds(20)) {
        // The input stage's forward waits on its data loader, not a peer.
        const char* what = !forward     ? "recv grad "
                           : stage == 0 ? "load "
                                        : "recv act ";
        add(absl::StrCat(what, mb), "comm", e.start, wait);
      }
      add(absl::StrCat(forward ? "F " : "B ", mb, " v=", e.version), "compute",
          e.end - e.compute, e.compute);
      break;
    }
    case OpKind::kOptimizerStep:
      add(absl::StrCat("step v=", e.version), "compute", e.start,
          e.end - e.start);
      break;
    case OpKind::kAllReduce:
      add(absl::StrCat("all-reduce ", mb), "comm", e.start, e.end - e.start);
      break;
    default:
      break;
  }
  dirty_ = true;
}

// The device channels of a pipeline with pipeline.transport "nccl": one per
// kind (activations, gradients) and pair of ranks that exchange tensors.
absl::StatusOr<std::unique_ptr<DeviceChannels>> ConnectChannels(
    const StageAssignment& a, const PipelineLayout& layout,
    RendezvousStore* store, const DeviceSpec& device, absl::Duration timeout) {
  std::vector<ChannelKey> keys;
  for (int s = 0; s + 1 < layout.num_stages(); ++s) {
    const auto& here = layout.ranks[s];
    const auto& next = layout.ranks[s + 1];
    const int here_n = static_cast<int>(here.size());
    const int next_n = static_cast<int>(next.size());
    for (int j = 0; j < here_n * next_n; ++j) {
      const int from = here[ReplicaFor(j, here_n)];
      const int to = next[ReplicaFor(j, next_n)];
      keys.push_back({static_cast<int>(FrameKind::kActivation), from, to});
      keys.push_back({static_cast<int>(FrameKind::kGradient), to, from});
    }
  }
#ifdef AQ_HAVE_CUDA
  return ConnectNcclChannels(store, a.rendezvous_key() + "nccl/", a.rank(),
                             std::move(keys), device.ordinal, timeout);
#else
  (void)a;
  (void)store;
  (void)device;
  (void)timeout;
  return absl::FailedPreconditionError(
      "pipeline.transport=nccl: this worker was built without CUDA");
#endif
}

void StageRuntime::RunPipeline(const StageAssignment& a) {
  auto result = [&]() -> absl::Status {
    const JobSpec& spec = a.spec();
    ASSIGN_OR_RETURN(ValidatedJob job, ValidateJobSpec(spec));
    const Model& model = *job.model;
    ASSIGN_OR_RETURN(PipelinePolicy policy, ResolvePipeline(spec));
    ASSIGN_OR_RETURN(
        int micro,
        MicrobatchesFor(policy, spec.batch_size(), a.world_size()));
    ASSIGN_OR_RETURN(int64_t total,
                     TotalSteps(spec, job.data.train_samples));
    {
      absl::MutexLock lock(&mu_);
      pending_.set_total_steps(total);
      dirty_ = true;
    }
    ASSIGN_OR_RETURN(PipelineLayout layout,
                     LayoutFromPlan(a.plan(), model.num_layers(),
                                    policy.schedule, total, micro));
    const int S = layout.num_stages();
    const bool first = a.stage() == 0, last = a.stage() == S - 1;
    // Before connecting to peers, so that every worker of the job fails
    // alike rather than some with a closed connection.
    if (policy.transport == v1::TRANSPORT_NCCL &&
        options_.device.kind != DeviceKind::kCuda) {
      return absl::FailedPreconditionError(
          "pipeline.transport=nccl needs every worker of the job on a GPU "
          "(--device=cuda:N); this worker runs on the CPU");
    }
    ASSIGN_OR_RETURN(std::unique_ptr<Device> owned_device,
                     CreateDevice(options_.device, options_.threads));
    Device& device = *owned_device;
    CoordinatorStore store(options_.coordinator_address);
    ASSIGN_OR_RETURN(
        std::unique_ptr<GlooCommunicator> comm,
        GlooCommunicator::Connect(
            &store, a.rendezvous_key() + "gloo/", a.rank(), a.world_size(),
            options_.advertise_host, options_.peer_timeout));
    std::unique_ptr<DeviceChannels> channels;
    if (policy.transport == v1::TRANSPORT_NCCL) {
      ASSIGN_OR_RETURN(channels,
                       ConnectChannels(a, layout, &store, options_.device,
                                       options_.peer_timeout));
    }
    {
      absl::MutexLock lock(&mu_);
      active_comm_ = comm.get();
      active_channels_ = channels.get();
      if (stop_.load()) {  // Stopped while connecting.
        comm->Abort();
        if (channels != nullptr) channels->Abort();
      }
    }
    // Forgotten before the communicator goes, on every path out.
    struct Forget {
      StageRuntime* runtime;
      ~Forget() {
        absl::MutexLock lock(&runtime->mu_);
        runtime->active_comm_ = nullptr;
        runtime->active_channels_ = nullptr;
      }
    } forget{this};
    std::optional<DataSplits> data;
    if (first || last) {
      ASSIGN_OR_RETURN(DataSplits loaded, LoadData(spec.data()));
      data = std::move(loaded);
    }
    const int begin = layout.layer_begin[a.stage()];
    const int end = layout.layer_begin[a.stage() + 1];
    ASSIGN_OR_RETURN(ParameterSet params,
                     InitParameters(model, begin, end, &device));
    if (!spec.init_weights().empty()) {
      RETURN_IF_ERROR(
          Annotate(LoadParametersFile(spec.init_weights(), device, params),
                   "init_weights"));
    }
    const int64_t batch = spec.batch_size();
    std::map<int64_t, std::pair<double, int64_t>> loss_parts;
    absl::Time last_step = absl::Now();
    const absl::Time run_start = absl::Now();
    absl::Duration busy;  // Compute time (forward, backward, step).
    PipelineStage::Options options;
    options.timeout = options_.peer_timeout;
    options.stop = &stop_;
    options.channels = channels.get();
    options.on_loss = [&](int64_t m, double sum, int64_t rows) {
      auto& part = loss_parts[m];
      part.first += sum;
      part.second += rows;
      const int64_t mine =
          batch / micro *
          ((micro + static_cast<int>(layout.ranks[S - 1].size()) - 1 -
            a.replica()) /
           static_cast<int>(layout.ranks[S - 1].size()));
      if (part.second >= mine || part.second >= batch) {
        absl::MutexLock lock(&mu_);
        LossPoint* p = pending_.add_losses();
        p->set_minibatch(m);
        p->set_loss(part.first / part.second);
        p->set_samples(part.second);
        dirty_ = true;
        loss_parts.erase(m);
      }
    };
    options.on_event = [&](const StageEvent& e) {
      if (stop_.load()) return;
      if (e.kind == OpKind::kForward || e.kind == OpKind::kBackward ||
          e.kind == OpKind::kOptimizerStep) {
        busy += e.compute;
      }
      absl::MutexLock lock(&mu_);
      if (e.kind == OpKind::kOptimizerStep) {
        const absl::Time now = absl::Now();
        pending_.add_step_ms(absl::ToDoubleMilliseconds(now - last_step));
        last_step = now;
        done_ = e.minibatch + 1;
        pending_.set_minibatches_done(done_);
        pending_.set_committed_version(e.version);
        // Busy fraction since the stage started (waits on peers excluded).
        pending_.set_utilization(absl::FDivDuration(busy, now - run_start));
        dirty_ = true;
      }
    };
    const PipelineStage* stage_ptr = nullptr;
    options.on_event = [&, on_event = options.on_event](const StageEvent& e) {
      on_event(e);
      RecordTrace(e, a.stage());
      if (e.kind != OpKind::kOptimizerStep || stage_ptr == nullptr) return;
      const StageStats& st = stage_ptr->stats();
      absl::MutexLock lock(&mu_);
      pending_.set_peak_rss_bytes(PeakRssBytes());
      pending_.set_stashed_weight_bytes(st.stashed_weight_bytes_peak);
      pending_.set_stashed_activation_bytes(st.stashed_activation_bytes_peak);
      pending_.set_peak_stashed_versions(st.peak_stashed_versions);
      pending_.set_peak_in_flight(st.peak_in_flight);
    };
    PipelineStage stage(&model, spec, layout, a.stage(), a.replica(), &device,
                        comm.get(), first ? &data->train : nullptr,
                        std::move(params), options);
    stage_ptr = &stage;
    RETURN_IF_ERROR(stage.Run());
    {
      absl::MutexLock lock(&mu_);
      pending_.set_bytes_sent(comm->bytes_sent());
      pending_.set_bytes_received(comm->bytes_received());
    }
    // Evaluation: replica 0 of every stage sends its weights to the output
    // stage's replica 0, which evaluates the whole model, when the data has
    // a test split (every stage decides alike from the spec).
    const bool has_test = HasTestSplit(spec.data());
    const int evaluator = layout.ranks[S - 1][0];
    if (has_test && a.replica() == 0 && !last) {
      ASSIGN_OR_RETURN(std::string flat, Flatten(device, stage.params()));
      RETURN_IF_ERROR(
          comm->Send(evaluator, kWeightsTag + a.stage(), std::move(flat))
              ->Wait(absl::Now() + options_.peer_timeout));
    }
    if (has_test && a.replica() == 0 && last) {
      if (!data->test.has_value()) {
        return absl::InternalError("the test split did not load");
      }
      ASSIGN_OR_RETURN(ParameterSet full,
                       InitParameters(model, 0, model.num_layers(), &device));
      size_t index = 0;
      for (int s = 0; s < S; ++s) {
        std::string bytes;
        if (s == S - 1) {
          ASSIGN_OR_RETURN(bytes, Flatten(device, stage.params()));
        } else {
          ASSIGN_OR_RETURN(bytes,
                           comm->Recv(layout.ranks[s][0], kWeightsTag + s)
                               ->Wait(absl::Now() + options_.peer_timeout));
        }
        size_t offset = 0;
        const int count = full.offsets[layout.layer_begin[s + 1]] -
                          full.offsets[layout.layer_begin[s]];
        for (int i = 0; i < count; ++i, ++index) {
          const Tensor& t = full.tensors[index];
          if (offset + t.nbytes() > bytes.size()) {
            return absl::DataLossError(
                absl::StrCat("the weights of stage ", s, " have ", bytes.size(),
                             " bytes, fewer than the model needs"));
          }
          RETURN_IF_ERROR(device.CopyFromHost(bytes.data() + offset, t));
          offset += t.nbytes();
        }
      }
      ASSIGN_OR_RETURN(EvalResult eval,
                       Evaluate(model, &device, full, *data->test, batch));
      absl::MutexLock lock(&mu_);
      pending_.set_test_accuracy(eval.accuracy);
      pending_.set_test_loss(eval.loss);
    }
    return absl::OkStatus();
  }();
  if (!result.ok()) {
    // Name the workers behind the ranks an error may mention.
    std::string ranks;
    for (int s = 0; s < a.plan().stages_size() && s < a.peers_size(); ++s) {
      for (int r = 0; r < a.plan().stages(s).worker_ranks_size() &&
                      r < a.peers(s).worker_ids_size();
           ++r) {
        absl::StrAppend(&ranks, ranks.empty() ? "" : ", ",
                        a.plan().stages(s).worker_ranks(r), "=",
                        a.peers(s).worker_ids(r), " (stage ", s, ")");
      }
    }
    Fail(absl::Status(result.code(),
                      absl::StrCat(result.message(), " [ranks: ", ranks, "]")));
    return;
  }
  absl::MutexLock lock(&mu_);
  phase_ = "finished";
  pending_.set_finished(true);
  pending_.clear_in_flight();
  dirty_ = true;
  AQ_LOG_INFO("job {}: stage {} replica {} finished", a.job_id(), a.stage(),
              a.replica());
}

}  // namespace aqueduct
