#include "worker/runtime/stage_job.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "pipeline/spec.h"
#include "worker/data/dataset.h"
#include "worker/nn/spec.h"
#include "worker/nn/weights.h"
#include "worker/runtime/evaluation.h"
#include "worker/runtime/layout.h"
#include "worker/runtime/pipeline_stage.h"
#include "worker/train/local_trainer.h"

namespace aqueduct {

absl::Status RunLocalJob(const StageAssignment& a, const JobEnv& env) {
  ASSIGN_OR_RETURN(std::unique_ptr<Device> device,
                   CreateDevice(env.device, env.threads));
  LocalTrainOptions options;
  options.stop = env.stop;
  options.on_step = [&](const StepReport& r) { env.progress->OnLocalStep(r); };
  AQ_LOG_INFO("job {}: training stage {} replica {}", a.job_id(), a.stage(),
              a.replica());
  env.progress->Begin();
  ASSIGN_OR_RETURN(LocalTrainResult result,
                   TrainLocal(a.spec(), device.get(), options));
  if (result.test.has_value()) {
    env.progress->SetTest(result.test->accuracy, result.test->loss);
  }
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
  absl::Status Prepare();
  absl::Status Connect();
  absl::Status LoadInputs();
  absl::Status Train();
  absl::Status Evaluate();
  PipelineStage::Options StageOptions();

  const StageAssignment& a_;
  const JobEnv& env_;
  ValidatedJob job_;
  JobLayout layout_;
  std::unique_ptr<Device> device_;
  DataPlane plane_;
  std::optional<DataSplits> data_;  // Input and output stages only.
  std::optional<ParameterSet> params_;
  std::unique_ptr<PipelineStage> stage_;
};

absl::Status PipelineJob::Prepare() {
  ASSIGN_OR_RETURN(job_, ValidateJobSpec(a_.spec()));
  ASSIGN_OR_RETURN(layout_, LayoutFromAssignment(a_, job_.model->num_layers(),
                                                 job_.data.train_samples));
  env_.progress->SetTotalSteps(layout_.total_steps);
  ASSIGN_OR_RETURN(device_, CreateDevice(env_.device, env_.threads));
  return absl::OkStatus();
}

absl::Status PipelineJob::Connect() {
  ASSIGN_OR_RETURN(
      plane_, env_.data_plane->Connect(layout_, a_.rendezvous_key(), env_.store,
                                       env_.peer_timeout));
  if (env_.on_data_plane) env_.on_data_plane(&plane_);
  return absl::OkStatus();
}

absl::Status PipelineJob::LoadInputs() {
  const JobSpec& spec = a_.spec();
  if (layout_.input_stage() || layout_.output_stage()) {
    ASSIGN_OR_RETURN(data_, LoadData(spec.data()));
  }
  ASSIGN_OR_RETURN(params_, InitParameters(*job_.model, layout_.layer_begin,
                                           layout_.layer_end, device_.get()));
  if (!spec.init_weights().empty()) {
    RETURN_IF_ERROR(
        Annotate(LoadParametersFile(spec.init_weights(), *device_, *params_),
                 "init_weights"));
  }
  return absl::OkStatus();
}

PipelineStage::Options PipelineJob::StageOptions() {
  PipelineStage::Options options;
  options.timeout = env_.peer_timeout;
  options.stop = env_.stop;
  options.channels = plane_.channels.get();
  ProgressAccumulator* progress = env_.progress;
  options.on_loss = [progress](int64_t m, double sum, int64_t samples) {
    progress->OnLoss(m, sum, samples);
  };
  // Called from within stage_->Run(), so stage_ is set.
  options.on_event = [this](const StageEvent& e) {
    if (env_.stop != nullptr && env_.stop->load()) return;
    env_.progress->OnStageEvent(e, layout_.stage, stage_->stats());
  };
  return options;
}

absl::Status PipelineJob::Train() {
  const Dataset* train = layout_.input_stage() ? &data_->train : nullptr;
  stage_ = std::make_unique<PipelineStage>(
      job_.model.get(), a_.spec(), layout_.pipeline, layout_.stage,
      layout_.replica, device_.get(), plane_.comm.get(), train,
      std::move(*params_), StageOptions());
  env_.progress->Begin(
      layout_.output_stage() ? layout_.loss_samples_per_minibatch() : 0);
  RETURN_IF_ERROR(stage_->Run());
  env_.progress->SetBytes(plane_.comm->bytes_sent(),
                          plane_.comm->bytes_received());
  return absl::OkStatus();
}

absl::Status PipelineJob::Evaluate() {
  EvaluationInputs in;
  in.model = job_.model.get();
  in.layout = &layout_;
  in.has_test_split = HasTestSplit(a_.spec().data());
  in.stage_params = &stage_->params();
  in.test =
      data_.has_value() && data_->test.has_value() ? &*data_->test : nullptr;
  in.device = device_.get();
  in.comm = plane_.comm.get();
  in.timeout = env_.peer_timeout;
  ASSIGN_OR_RETURN(std::optional<EvalResult> eval, EvaluateAtEnd(in));
  if (eval.has_value()) env_.progress->SetTest(eval->accuracy, eval->loss);
  AQ_LOG_INFO("job {}: stage {} replica {} finished", a_.job_id(), a_.stage(),
              a_.replica());
  return absl::OkStatus();
}

}  // namespace

absl::Status RunPipelineJob(const StageAssignment& a, const JobEnv& env) {
  absl::Status status = PipelineJob(a, env).Run();
  if (status.ok() || status.code() == absl::StatusCode::kCancelled) {
    return status;
  }
  return absl::Status(
      status.code(),
      absl::StrCat(status.message(), " [ranks: ", DescribeRanks(a), "]"));
}

}  // namespace aqueduct
