#include "worker/runtime/stage_job.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/checkpoint.h"
#include "common/logging.h"
#include "common/status.h"
#include "pipeline/failure.h"
#include "pipeline/limits.h"
#include "pipeline/memory.h"
#include "pipeline/policy.h"
#include "pipeline/spec.h"
#include "worker/data/dataset.h"
#include "worker/nn/spec.h"
#include "worker/nn/training_state.h"
#include "worker/nn/weights.h"
#include "worker/runtime/checkpoint_writer.h"
#include "worker/runtime/evaluation.h"
#include "worker/runtime/layout.h"
#include "worker/runtime/peer_reach.h"
#include "worker/runtime/pipeline_stage.h"
#include "worker/train/local_trainer.h"

namespace aqueduct {

namespace {

// The accumulator of `stage`'s reports: a chunk's own, else the job's.
ProgressAccumulator* ProgressOf(const JobEnv& env, int stage) {
  auto it = env.chunk_progress.find(stage);
  return it != env.chunk_progress.end() ? it->second : env.progress;
}

// Whether replica `replica` of `stage` takes part in gathering the stage's
// sharded optimizer state at a checkpoint (ZeRO-1: every replica; the
// parameter server: the replicas that host shards), so that it must learn
// when one is due as replica 0 does (PipelineStage::StateGroup).
bool GathersShardedState(const JobSpec& spec, const PipelineLayout& pipeline,
                         int stage, int replica) {
  const int replicas = pipeline.Replicas(stage);
  if (replicas <= 1 || spec.checkpoint().dir().empty()) return false;
  const v1::DataParallelSpec& d = spec.data_parallel();
  if (d.mode() == "parameter_server") {
    const int shards = d.shards() > 0 ? d.shards() : replicas;
    return replica < shards;
  }
  return d.shard_optimizer();
}

// What the job may open: env.files, its reads stopped with the job.
FileAccess JobFiles(const JobEnv& env) {
  FileAccess files = env.files;
  if (files.stop == nullptr) files.stop = env.stop;
  return files;
}

// The checkpoint of the assignment's restore manifest for layers [begin,
// end) (read under --checkpoint_root); nullopt when the job starts from the
// beginning.
absl::StatusOr<std::optional<SafetensorsFile>> RestoreState(
    const StageAssignment& a, const JobEnv& env, int num_layers, int begin,
    int end) {
  if (!a.has_restore() || a.restore().version() == 0) return std::nullopt;
  const CheckpointManifest& m = a.restore();
  if (m.num_layers() != num_layers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the checkpoint in ", m.dir(), " is of a model of ", m.num_layers(),
        " layers; this job's model has ", num_layers));
  }
  const FileAccess files = JobFiles(env);
  absl::StatusOr<SafetensorsFile> state =
      LoadCheckpointLayers(files.checkpoints, m, begin, end, files.stop);
  if (!state.ok()) {
    v1::StageFailure unloadable;
    unloadable.set_cause(v1::FAILURE_CHECKPOINT_UNLOADABLE);
    unloadable.set_checkpoint_version(m.version());
    return WithFailure(state.status(), unloadable);
  }
  return *std::move(state);
}

// The checkpoint writer of replica 0 of a stage of layers [begin, end),
// when the spec asks for checkpoints; null otherwise. PERMISSION_DENIED
// naming checkpoint.dir and --checkpoint_root for a directory outside it,
// before the job trains.
absl::StatusOr<std::unique_ptr<CheckpointWriter>> MakeWriter(
    const StageAssignment& a, const JobEnv& env, int stage, int begin,
    int end) {
  const v1::CheckpointSpec& c = a.spec().checkpoint();
  if (c.dir().empty() || (c.every_steps() <= 0 && c.every_seconds() <= 0) ||
      a.replica() != 0) {
    return nullptr;
  }
  // Refused now rather than at the first checkpoint. The files are
  // reported in c.dir() as the spec says it (the coordinator expects that
  // name) and written where it resolves under the roots.
  RETURN_IF_ERROR(
      env.files.checkpoints.ResolveForCreate(c.dir(), "checkpoint.dir")
          .status());
  CheckpointWriterOptions options;
  options.dir = c.dir();
  options.roots = env.files.checkpoints;
  options.job_id = a.job_id();
  options.stage = stage;
  options.attempt = a.attempt();
  options.layer_begin = begin;
  options.layer_end = end;
  options.queue_wait = env.peer_timeout;
  ProgressAccumulator* progress = ProgressOf(env, stage);
  options.on_written = [progress](const CheckpointWritten& w) {
    progress->OnCheckpoint(w);
  };
  return std::make_unique<CheckpointWriter>(std::move(options));
}

// init_weights (layers of params) read under --data_root: a regular file
// whose header fits it, read until the job stops.
// A tensor-parallel member takes its part of the file's whole tensors.
absl::Status LoadInitWeights(const std::string& path, const JobEnv& env,
                             const Model& model, Device& device,
                             const ParameterSet& params) {
  const FileAccess files = JobFiles(env);
  ASSIGN_OR_RETURN(
      const SafetensorsFile file,
      ReadSafetensorsUnder(files.data, path, "init_weights", files.stop));
  const std::string what = absl::StrCat("init_weights: '", path, "'");
  SafetensorsFile tied = file;
  TieFileCopies(model, &tied);
  absl::StatusOr<SafetensorsFile> part = ShardFile(tied, model, model.shard());
  if (!part.ok()) return Annotate(part.status(), what);
  return Annotate(ImportParameters(*part, device, params), what);
}

// The hook a stage (or the local trainer) calls at a checkpoint version:
// copies the state to host memory and queues it for `writer`.
std::map<std::string, std::string> CheckpointMetadata(const StageAssignment& a,
                                                      int stage,
                                                      int64_t version) {
  return {{"job_id", a.job_id()},
          {"version", absl::StrCat(version)},
          {"stage", absl::StrCat(stage)},
          {"attempt", absl::StrCat(a.attempt())}};
}

void Enqueue(const StageAssignment& a, CheckpointWriter* writer,
             int64_t version, SafetensorsFile state) {
  absl::Status queued = writer->Enqueue(version, std::move(state));
  if (!queued.ok()) {
    AQ_LOG_WARN("job {}: {}", a.job_id(), std::string(queued.message()));
  }
}

std::function<absl::Status(int64_t, const ParameterSet&, const Optimizer&)>
CheckpointHook(const StageAssignment& a, int stage, Device* device,
               CheckpointWriter* writer) {
  return
      [&a, stage, device, writer](int64_t version, const ParameterSet& params,
                                  const Optimizer& optimizer) -> absl::Status {
        ASSIGN_OR_RETURN(
            SafetensorsFile state,
            ExportTrainingState(*device, params, optimizer,
                                CheckpointMetadata(a, stage, version)));
        Enqueue(a, writer, version, std::move(state));
        return absl::OkStatus();
      };
}

// A tensor-parallel stage's: the whole state its members gathered.
std::function<absl::Status(int64_t, SafetensorsFile)> CheckpointFileHook(
    const StageAssignment& a, int stage, CheckpointWriter* writer) {
  return [&a, stage, writer](int64_t version,
                             SafetensorsFile state) -> absl::Status {
    for (auto& [key, value] : CheckpointMetadata(a, stage, version)) {
      state.metadata[key] = value;
    }
    Enqueue(a, writer, version, std::move(state));
    return absl::OkStatus();
  };
}

// Waits for the writer's files, so that they are reported before the job's
// end.
void DrainWriter(const StageAssignment& a, const JobEnv& env,
                 CheckpointWriter* writer) {
  if (writer != nullptr && !writer->Drain(env.checkpoint_drain)) {
    AQ_LOG_WARN("job {}: checkpoint files still being written after {}",
                a.job_id(), absl::FormatDuration(env.checkpoint_drain));
  }
}

// Hands the trained model to the sink (if any).
absl::Status DeliverModel(const StageAssignment& a, const JobEnv& env,
                          const SafetensorsFile& model) {
  if (env.model_sink == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::string bytes, SerializeSafetensors(model));
  return Annotate(env.model_sink->Deliver(a.job_id(), a.attempt(), bytes),
                  "delivering the trained model");
}

// Bytes of data a worker that loads `spec`'s data holds, at least: the
// synthetic set it generates, or the training images of files (text is
// bounded by the files it reads).
int64_t DataBytes(const DataSpec& spec, const DataInfo& info) {
  if (spec.has_synthetic()) {
    int64_t test = spec.synthetic().test_samples();
    if (spec.test_limit() > 0) test = std::min(test, spec.test_limit());
    return SyntheticDataBytes(spec.synthetic(), info.train_samples, test);
  }
  if (spec.has_text()) return 0;
  return SaturatingMul(
      SaturatingMul(info.train_samples, info.sample_shape.numel()),
      sizeof(float));
}

// The worker's own check of its part of a job against its memory, before
// it allocates any of it (the coordinator checked the spec against its
// largest worker and the plan against each; a profile it was given may
// still be wrong). FAILED_PRECONDITION: re-running the same plan on the
// same worker would not mend it.
absl::Status CheckStageFits(const JobSpec& spec, const DataInfo& data,
                            const JobEnv& env, bool loads_data,
                            StageNeeds needs) {
  needs.copies = TrainingCopies(spec.optimizer());
  if (loads_data) needs.data_bytes = DataBytes(spec.data(), data);
  const MemoryLimit memory{
      env.memory_bytes > 0 ? env.memory_bytes : HostMemoryBytes(),
      "this worker's memory"};
  return CheckStageMemory(spec, SymbolicShape::Known(data.sample_shape.dims()),
                          needs, memory, absl::StatusCode::kFailedPrecondition);
}

}  // namespace

absl::Status RunLocalJob(const StageAssignment& a, const JobEnv& env) {
  ASSIGN_OR_RETURN(std::unique_ptr<Device> device,
                   CreateDevice(env.device, env.threads));
  ASSIGN_OR_RETURN(ValidatedJob job, ValidateJobSpec(a.spec(), JobFiles(env)));
  const int layers = job.model->num_layers();
  StageNeeds needs;
  needs.what = "the job";
  needs.layer_end = layers;
  needs.samples = a.spec().batch_size();
  needs.steps = TotalSteps(a.spec(), job.data.train_samples).value_or(0);
  needs.bytes_per_step = PerStepBytes(/*pipeline=*/false, 1);
  RETURN_IF_ERROR(CheckStageFits(a.spec(), job.data, env, true, needs));
  ASSIGN_OR_RETURN(std::optional<SafetensorsFile> restore,
                   RestoreState(a, env, layers, 0, layers));
  ASSIGN_OR_RETURN(std::unique_ptr<CheckpointWriter> writer,
                   MakeWriter(a, env, a.stage(), 0, layers));
  LocalTrainOptions options;
  options.stop = env.stop;
  options.files = JobFiles(env);
  options.on_step = [&](const StepReport& r) { env.progress->OnLocalStep(r); };
  options.export_model = true;
  if (restore.has_value()) {
    options.restore = &*restore;
    options.first_step = a.restore().version();
  }
  if (writer != nullptr) {
    options.checkpoint_every = a.spec().checkpoint().every_steps();
    options.checkpoint_at = env.checkpoint_at;
    options.on_checkpoint =
        CheckpointHook(a, a.stage(), device.get(), writer.get());
  }
  AQ_LOG_INFO("job {}: training stage {} replica {} from step {}", a.job_id(),
              a.stage(), a.replica(), options.first_step);
  env.progress->Begin();
  ASSIGN_OR_RETURN(LocalTrainResult result,
                   TrainLocal(a.spec(), device.get(), options));
  DrainWriter(a, env, writer.get());
  if (result.test.has_value()) {
    env.progress->SetTest(result.test->accuracy, result.test->loss);
  }
  RETURN_IF_ERROR(DeliverModel(a, env, *result.model));
  AQ_LOG_INFO("job {}: finished {} steps", a.job_id(), result.steps);
  return absl::OkStatus();
}

namespace {

// One pipeline job on this worker, step by step. Owned by the stage loop.
class PipelineJob {
 public:
  PipelineJob(const StageAssignment& a, const JobEnv& env) : a_(a), env_(env) {}
  // The data plane is forgotten before it closes, on every path out.
  ~PipelineJob() {
    // An evaluation in flight ends (its waits on peers are bounded) before
    // the data plane and the data it reads go.
    if (eval_thread_.joinable()) eval_thread_.join();
    if (plane_.comm != nullptr && env_.on_data_plane) {
      env_.on_data_plane(nullptr);
    }
  }

  absl::Status Run() {
    RETURN_IF_ERROR(Prepare());
    RETURN_IF_ERROR(Connect());
    RETURN_IF_ERROR(LoadInputs());
    RETURN_IF_ERROR(Train());
    return Evaluate();
  }

 private:
  // A stage this worker holds (one, or each of its chunks).
  struct Held {
    int stage = 0;
    int layer_begin = 0, layer_end = 0;
    std::optional<ParameterSet> params;  // Until the stage takes them.
    std::optional<SafetensorsFile> restore;
    std::unique_ptr<CheckpointWriter> writer;
    std::unique_ptr<PipelineStage> runner;
  };

  absl::Status Prepare();
  absl::Status Connect();
  absl::Status LoadInputs();
  absl::Status LoadStage(Held& held);
  absl::Status Train();
  absl::Status RunStages();
  absl::Status Evaluate();
  PipelineStage::Options StageOptions(Held& held);
  EvaluationInputs EvalInputs(int stage);
  absl::Status EvaluatePeriodically(int stage, int64_t version);
  // The evaluator's part of a periodic evaluation, off the stage's thread:
  // this worker's weights copied to the host now, then gathered with the
  // other stages' and evaluated on eval_thread_ with a device of its own,
  // while the stage trains on. One at a time; an earlier one's error
  // surfaces at the next, or at the end.
  absl::Status EvaluateInBackground(EvaluationInputs in, int stage,
                                    int64_t version);
  // Waits for the evaluation in flight; its error, if it failed.
  absl::Status JoinEvaluation();

  // The model the stages run: this member's part when they are
  // tensor-parallel, else the whole (job_'s, which evaluation uses).
  const Model& StageModel() const {
    return member_model_ != nullptr ? *member_model_ : *job_.model;
  }
  int Degree() const { return layout_.pipeline.TensorDegree(layout_.stage); }

  const StageAssignment& a_;
  const JobEnv& env_;
  ValidatedJob job_;
  std::unique_ptr<Model> member_model_;
  JobLayout layout_;
  std::unique_ptr<Device> device_;
  DataPlane plane_;
  std::unique_ptr<ProcessGroup> tensor_group_;  // Degree > 1 only.
  std::optional<DataSplits> data_;              // Input and output stages only.
  std::vector<Held> held_;
  // Sends of weights to periodic evaluations, not waited for yet.
  std::vector<std::unique_ptr<Work>> eval_sends_;
  // The evaluator's periodic evaluations (EvaluateInBackground).
  std::unique_ptr<Device> eval_device_;
  std::thread eval_thread_;
  absl::Mutex eval_mu_;
  absl::Status eval_status_ ABSL_GUARDED_BY(eval_mu_);
};

absl::Status PipelineJob::Prepare() {
  ASSIGN_OR_RETURN(job_, ValidateJobSpec(a_.spec(), JobFiles(env_)));
  ASSIGN_OR_RETURN(layout_, LayoutFromAssignment(a_, job_.model->num_layers(),
                                                 job_.data.train_samples));
  for (int stage : layout_.stages) {
    Held held;
    held.stage = stage;
    held.layer_begin = layout_.pipeline.layer_begin[stage];
    held.layer_end = layout_.pipeline.layer_begin[stage + 1];
    // Each chunk is checked alone against the whole memory (their sum is
    // the planner's to check).
    StageNeeds needs;
    needs.what = absl::StrCat("stage ", stage);
    needs.layer_begin = held.layer_begin;
    needs.layer_end = held.layer_end;
    needs.samples = layout_.batch_size / layout_.pipeline.microbatches;
    needs.steps = layout_.total_steps;
    needs.bytes_per_step = PerStepBytes(true, layout_.pipeline.microbatches);
    needs.tensor_degree = layout_.pipeline.TensorDegree(stage);
    needs.sequence_parallel = a_.spec().pipeline().sequence_parallel();
    needs.recompute = layout_.pipeline.RecomputeOf(stage);
    RETURN_IF_ERROR(
        CheckStageFits(a_.spec(), job_.data, env_,
                       layout_.input_stage() || layout_.output_stage(), needs));
    held_.push_back(std::move(held));
  }
  for (int stage : layout_.stages) {
    ProgressOf(env_, stage)->SetTotalSteps(layout_.total_steps);
  }
  if (Degree() > 1) {
    ASSIGN_OR_RETURN(
        member_model_,
        Model::Build(
            a_.spec().model(), job_.model->input_shape(), job_.model->seed(),
            MemberShard(a_.spec().pipeline(), layout_.member, Degree())));
  }
  ASSIGN_OR_RETURN(device_, CreateDevice(env_.device, env_.threads));
  if (a_.spec().precision().compute() == "bf16") device_->SetBf16Gemm(true);
  return absl::OkStatus();
}

absl::Status PipelineJob::Connect() {
  ASSIGN_OR_RETURN(
      plane_, env_.data_plane->Connect(layout_, a_.rendezvous_key(), env_.store,
                                       env_.peer_timeout, env_.stop));
  if (env_.on_data_plane) env_.on_data_plane(&plane_);
  if (Degree() > 1) {
    ASSIGN_OR_RETURN(
        tensor_group_,
        ProcessGroup::Make(
            plane_.comm.get(),
            layout_.pipeline.TensorGroup(layout_.stage, layout_.replica), 0,
            absl::StrCat("the tensor group of stage ", layout_.stage,
                         " replica ", layout_.replica)));
  }
  return absl::OkStatus();
}

absl::Status PipelineJob::LoadInputs() {
  if (layout_.input_stage() || layout_.output_stage()) {
    ASSIGN_OR_RETURN(data_, LoadData(a_.spec().data(), JobFiles(env_)));
  }
  for (Held& held : held_) RETURN_IF_ERROR(LoadStage(held));
  return absl::OkStatus();
}

absl::Status PipelineJob::LoadStage(Held& held) {
  const JobSpec& spec = a_.spec();
  ASSIGN_OR_RETURN(held.params, InitParameters(StageModel(), held.layer_begin,
                                               held.layer_end, device_.get()));
  ASSIGN_OR_RETURN(held.restore,
                   RestoreState(a_, env_, job_.model->num_layers(),
                                held.layer_begin, held.layer_end));
  ASSIGN_OR_RETURN(held.writer, MakeWriter(a_, env_, held.stage,
                                           held.layer_begin, held.layer_end));
  if (!spec.init_weights().empty() && !held.restore.has_value()) {
    RETURN_IF_ERROR(LoadInitWeights(spec.init_weights(), env_, StageModel(),
                                    *device_, *held.params));
    CopyTiedWeights(StageModel(), *device_, *held.params);
  }
  return absl::OkStatus();
}

PipelineStage::Options PipelineJob::StageOptions(Held& held) {
  PipelineStage::Options options;
  options.timeout = env_.peer_timeout;
  options.stop = env_.stop;
  options.channels = plane_.channels.get();
  options.bf16_frames = a_.spec().precision().compute() == "bf16";
  options.slowdown = env_.slowdown;
  ProgressAccumulator* progress = ProgressOf(env_, held.stage);
  options.on_loss = [progress](int64_t m, double sum, int64_t samples) {
    progress->OnLoss(m, sum, samples);
  };
  // Called from within the stage's run, so its runner is set.
  options.on_event = [this, progress, &held](const StageEvent& e) {
    if (env_.stop != nullptr && env_.stop->load()) return;
    progress->OnStageEvent(e, e.stage, held.runner->stats());
  };
  if (held.restore.has_value()) {
    options.restore = &*held.restore;
    options.first_minibatch = a_.restore().version();
  }
  options.tensor_group = tensor_group_.get();
  // A tensor group's members all gather at a checkpoint (replica 0's);
  // member 0 writes.
  // So do the replicas that hold part of a sharded optimizer state (and
  // their members).
  const bool gathers = (Degree() > 1 && layout_.replica == 0 &&
                        !a_.spec().checkpoint().dir().empty()) ||
                       GathersShardedState(a_.spec(), layout_.pipeline,
                                           held.stage, layout_.replica);
  if (held.writer != nullptr || gathers) {
    options.checkpoint_every = a_.spec().checkpoint().every_steps();
    options.checkpoint_at = env_.checkpoint_at;
  }
  if (held.writer != nullptr) {
    options.on_checkpoint =
        CheckpointHook(a_, held.stage, device_.get(), held.writer.get());
    options.on_checkpoint_file =
        CheckpointFileHook(a_, held.stage, held.writer.get());
  }
  if (a_.spec().eval_every() > 0 && HasTestSplit(a_.spec().data())) {
    options.eval_every = a_.spec().eval_every();
    const int stage = held.stage;
    options.on_eval = [this, stage](int64_t version, const ParameterSet&) {
      return EvaluatePeriodically(stage, version);
    };
  }
  return options;
}

EvaluationInputs PipelineJob::EvalInputs(int stage) {
  EvaluationInputs in;
  in.model = job_.model.get();
  in.model_spec = &a_.spec().model();
  in.layout = &layout_;
  in.has_test_split = HasTestSplit(a_.spec().data());
  for (const Held& held : held_) in.local[held.stage] = &held.runner->params();
  in.stage = stage;
  in.test =
      data_.has_value() && data_->test.has_value() ? &*data_->test : nullptr;
  in.device = device_.get();
  in.comm = plane_.comm.get();
  in.timeout = env_.peer_timeout;
  return in;
}

absl::Status PipelineJob::EvaluatePeriodically(int stage, int64_t version) {
  if (GathersEvaluation(layout_, stage) && env_.evaluate_in_background) {
    return EvaluateInBackground(EvalInputs(stage), stage, version);
  }
  ASSIGN_OR_RETURN(std::optional<EvalResult> eval,
                   EvaluateAtVersion(EvalInputs(stage), version, &eval_sends_));
  if (eval.has_value()) {
    ProgressOf(env_, stage)->OnEval(version, eval->accuracy, eval->loss);
  }
  return absl::OkStatus();
}

absl::Status PipelineJob::JoinEvaluation() {
  if (eval_thread_.joinable()) eval_thread_.join();
  absl::MutexLock lock(&eval_mu_);
  return eval_status_;
}

absl::Status PipelineJob::EvaluateInBackground(EvaluationInputs in, int stage,
                                               int64_t version) {
  RETURN_IF_ERROR(JoinEvaluation());
  RETURN_IF_ERROR(LocalSnapshot(&in));
  if (eval_device_ == nullptr) {
    ASSIGN_OR_RETURN(eval_device_, CreateDevice(env_.device, env_.threads));
    eval_device_->SetBf16Gemm(device_->bf16_gemm());
  }
  in.device = eval_device_.get();
  eval_thread_ = std::thread([this, in = std::move(in), stage, version] {
    const absl::Time start = absl::Now();
    absl::StatusOr<std::optional<EvalResult>> eval =
        EvaluateAtVersion(in, version, nullptr);
    if (eval.ok() && eval->has_value()) {
      ProgressAccumulator* progress = ProgressOf(env_, stage);
      progress->OnEval(version, (*eval)->accuracy, (*eval)->loss);
      progress->OnEvalSpan(version, start, absl::Now());
    }
    if (!eval.ok()) {
      absl::MutexLock lock(&eval_mu_);
      eval_status_ = Annotate(eval.status(),
                              absl::StrCat("the evaluation at step ", version));
    }
  });
  return absl::OkStatus();
}

absl::Status PipelineJob::Train() {
  for (Held& held : held_) {
    const Dataset* train = held.stage == 0 ? &data_->train : nullptr;
    held.runner = std::make_unique<PipelineStage>(
        &StageModel(), a_.spec(), layout_.pipeline, held.stage,
        layout_.replica * Degree() + layout_.member, device_.get(),
        plane_.comm.get(), train, std::move(*held.params), StageOptions(held));
    held.params.reset();
    // A tensor group's member 0 reports its losses.
    const bool output =
        held.stage == layout_.num_stages() - 1 && layout_.member == 0;
    ProgressOf(env_, held.stage)
        ->Begin(output ? layout_.loss_samples_per_minibatch() : 0);
  }
  // Live byte counts in every report while the stages run; the counter
  // goes before the communicator can.
  const Communicator* comm = plane_.comm.get();
  env_.progress->SetByteCounter([comm] {
    return std::make_pair(comm->bytes_sent(), comm->bytes_received());
  });
  absl::Cleanup forget = [this] { env_.progress->SetByteCounter(nullptr); };
  RETURN_IF_ERROR(RunStages());
  env_.progress->SetBytes(plane_.comm->bytes_sent(),
                          plane_.comm->bytes_received());
  for (Held& held : held_) DrainWriter(a_, env_, held.writer.get());
  return absl::OkStatus();
}

absl::Status PipelineJob::RunStages() {
  if (held_.size() == 1 && layout_.pipeline.chunks <= 1 &&
      layout_.pipeline.program == nullptr) {
    return held_[0].runner->Run();
  }
  const int64_t first = a_.has_restore() ? a_.restore().version() : 0;
  ASSIGN_OR_RETURN(std::vector<Op> ops,
                   RankSchedule(layout_.pipeline, layout_.rank, first));
  std::vector<PipelineStage*> chunks;
  for (Held& held : held_) chunks.push_back(held.runner.get());
  return PipelineStage::RunRank(chunks, ops);
}

absl::Status PipelineJob::Evaluate() {
  RETURN_IF_ERROR(JoinEvaluation());
  // The periodic evaluations' weights reached the evaluator.
  for (auto& send : eval_sends_) {
    RETURN_IF_ERROR(send->Wait(absl::Now() + env_.peer_timeout));
  }
  eval_sends_.clear();
  ASSIGN_OR_RETURN(EndOfJob end,
                   EvaluateAtEnd(EvalInputs(layout_.stages.back())));
  if (end.eval.has_value()) {
    ProgressOf(env_, layout_.stages.back())
        ->SetTest(end.eval->accuracy, end.eval->loss);
  }
  if (end.model.has_value()) {
    RETURN_IF_ERROR(DeliverModel(a_, env_, *end.model));
  }
  AQ_LOG_INFO("job {}: stage {} replica {} finished", a_.job_id(), a_.stage(),
              a_.replica());
  return absl::OkStatus();
}

}  // namespace

namespace {

// The stage, worker and worker address of `rank` in the job; nullopt for a
// rank the assignment does not place.
struct RankPlace {
  int stage = 0;
  std::string worker, address;
};
std::optional<RankPlace> PlaceOfRank(const StageAssignment& a, int rank) {
  for (int s = 0; s < a.plan().stages_size() && s < a.peers_size(); ++s) {
    const auto& ranks = a.plan().stages(s).worker_ranks();
    for (int r = 0; r < ranks.size() && r < a.peers(s).worker_ids_size(); ++r) {
      if (ranks[r] != rank) continue;
      return RankPlace{s, a.peers(s).worker_ids(r),
                       r < a.peers(s).addresses_size() ? a.peers(s).addresses(r)
                                                       : std::string()};
    }
  }
  return std::nullopt;
}

std::string HostOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

// A data-plane error naming a peer, with the peer looked at. Every stage of
// a pipeline whose link broke times out at about the same moment (each
// waits on the next), and a stage that fails closes its connections, so
// its neighbours fail at once too: the peer's worker port is probed. A
// timeout on a peer that does not answer at all is named as unreachable
// (kCouldNotReach: the coordinator names the pair from it). A peer whose
// worker accepts the probe is alive and will report its own failure: this
// report waits a little (until a stop, or 2 probes and a second), so that
// the stage at the cause reports first and the restart names it. A peer
// whose port is refused (its process died) is reported at once.
absl::Status ExplainPeerError(const StageAssignment& a, const JobEnv& env,
                              const absl::Status& status) {
  const std::string message(status.message());
  const std::optional<int> rank = PeerRankOf(message);
  if (!absl::IsDeadlineExceeded(status) && !absl::IsUnavailable(status)) {
    return status;
  }
  const std::optional<RankPlace> peer =
      rank.has_value() ? PlaceOfRank(a, *rank) : std::nullopt;
  if (!peer.has_value() || peer->address.empty()) return status;
  const absl::Duration probe = std::clamp(
      env.peer_timeout / 4, absl::Milliseconds(200), absl::Seconds(2));
  const PeerReach reach = ProbeTcp(peer->address, probe);
  if (!reach.answers && absl::IsDeadlineExceeded(status)) {
    v1::StageFailure unreachable;
    unreachable.set_cause(v1::FAILURE_PEER_UNREACHABLE);
    unreachable.set_peer_worker_id(peer->worker);
    return WithFailure(
        absl::Status(
            status.code(),
            absl::StrCat(kCouldNotReach, "stage ", peer->stage, " on worker ",
                         peer->worker, " (", HostOf(peer->address),
                         "): ", message, "; TCP to ", peer->address, ": ",
                         reach.detail)),
        unreachable);
  }
  if (!reach.accepted) return status;
  const absl::Time until = absl::Now() + 2 * probe + absl::Seconds(1);
  while (absl::Now() < until && !(env.stop != nullptr && env.stop->load())) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  return WithMessage(
      status,
      absl::StrCat(message, "; rank ", *rank, " (worker ", peer->worker,
                   ", stage ", peer->stage, ") is alive on ", peer->address,
                   ": it failed or stalled on another stage"));
}

}  // namespace

absl::Status RunPipelineJob(const StageAssignment& a, const JobEnv& env) {
  absl::Status status = PipelineJob(a, env).Run();
  if (status.ok() || status.code() == absl::StatusCode::kCancelled) {
    return status;
  }
  const absl::Status explained = ExplainPeerError(a, env, status);
  return WithMessage(
      explained,
      absl::StrCat(explained.message(), " [ranks: ", DescribeRanks(a), "]"));
}

}  // namespace aqueduct
