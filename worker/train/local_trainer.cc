#include "worker/train/local_trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/checkpoint.h"
#include "common/logging.h"
#include "common/status.h"
#include "pipeline/failure.h"
#include "pipeline/policy.h"
#include "worker/nn/clipping.h"
#include "worker/nn/loss.h"
#include "worker/nn/optimizer.h"
#include "worker/nn/spec.h"
#include "worker/nn/training_state.h"
#include "worker/nn/weights.h"

namespace aqueduct {

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// INVALID_ARGUMENT if the training data has more classes than the model has
// logits.
absl::Status CheckClasses(const Dataset& train, const Model& model) {
  const Shape& out = model.output_shape();
  const int64_t logits = out[out.rank() - 1];
  if (train.num_classes > logits) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the training data has ", train.num_classes,
        train.labels_per_sample > 1 ? " tokens in its vocabulary" : " classes",
        " but the model outputs ", logits, " logits"));
  }
  return absl::OkStatus();
}

// The job's sampler over `train`. INVALID_ARGUMENT if the training set is
// smaller than one batch.
absl::StatusOr<EpochSampler> MakeSampler(const JobSpec& spec,
                                         const Dataset& train) {
  const int64_t batch = spec.batch_size();
  const bool shuffle = !spec.data().has_shuffle() || spec.data().shuffle();
  EpochSampler sampler = EpochSampler::For(train, batch, shuffle, spec.seed());
  if (sampler.batches_per_epoch() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_size=", batch, " is larger than the training set (",
                     train.size, " samples)"));
  }
  return sampler;
}

// The number of steps to run (pipeline/policy.h's TotalSteps, the same
// count every pipeline stage runs) with the options' epochs and max_steps
// overriding the spec's. INVALID_ARGUMENT if neither is positive.
absl::StatusOr<int64_t> StepsToRun(const JobSpec& spec,
                                   const LocalTrainOptions& options,
                                   int64_t train_samples) {
  if (options.max_steps.has_value() && *options.max_steps == 0) {
    return 0;  // Evaluation only.
  }
  JobSpec run = spec;
  run.set_epochs(options.epochs.value_or(spec.epochs()));
  run.set_max_steps(options.max_steps.value_or(spec.max_steps()));
  if (run.epochs() <= 0 && run.max_steps() <= 0) {
    return absl::InvalidArgumentError(
        "neither epochs nor max_steps is positive: training would never "
        "stop");
  }
  return TotalSteps(run, train_samples);
}

// The model's parameters, their gradients and the optimizer that steps them.
struct TrainState {
  ParameterSet params;
  ParameterSet grads;
  std::unique_ptr<Optimizer> optimizer;
};

// Fills `state` for a job of `total` steps: initialised parameters (loaded
// from the init_weights file, if any), zero gradients and the optimizer.
absl::Status InitTrainState(const JobSpec& spec,
                            const LocalTrainOptions& options,
                            const Model& model, Device* device, int64_t total,
                            TrainState* state) {
  ASSIGN_OR_RETURN(state->params,
                   InitParameters(model, 0, model.num_layers(), device));
  const std::string& init =
      options.init_weights.empty() ? spec.init_weights() : options.init_weights;
  if (!init.empty() && options.restore == nullptr) {
    // Under the roots, a regular file whose header fits it (not, say,
    // /dev/zero read until memory runs out).
    ASSIGN_OR_RETURN(const SafetensorsFile file,
                     ReadSafetensorsUnder(options.files.data, init,
                                          "init_weights", options.files.stop));
    RETURN_IF_ERROR(Annotate(ImportParameters(file, *device, state->params),
                             absl::StrCat("init_weights: '", init, "'")));
    CopyTiedWeights(model, *device, state->params);
  }
  ASSIGN_OR_RETURN(state->grads, ZerosLike(state->params, device));
  ASSIGN_OR_RETURN(state->optimizer,
                   CreateOptimizer(spec.optimizer(), state->params, device,
                                   total, &spec.model()));
  if (options.restore != nullptr) {
    RETURN_IF_ERROR(
        Annotate(ImportTrainingState(*options.restore, *device, state->params,
                                     state->optimizer.get()),
                 "restoring the checkpoint"));
    if (state->optimizer->steps() != options.first_step) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the checkpoint's optimizer made ", state->optimizer->steps(),
          " steps, but training resumes at step ", options.first_step));
    }
  }
  return absl::OkStatus();
}

// What every step reuses: the batch's shape, the host staging buffers, the
// labels tensor and the host copy of the per-sample losses.
struct StepBuffers {
  int64_t batch = 0;
  Shape batch_shape;
  BatchStaging staging;
  Tensor labels;
  std::vector<float> host_losses;
  // Labels per pass: batch * labels per sample (tokens, for text).
  int64_t num_labels = 0;
  // Passes per step (JobSpec.grad_accumulation), of `batch` samples each.
  int64_t passes = 1;
  // OptimizerSpec.clip_grad_norm (0: none).
  float clip = 0;
};

// Sizes `buffers` for passes of batch_size / grad_accumulation samples of
// `train` and allocates the labels tensor.
absl::Status InitStepBuffers(const Model& model, const Dataset& train,
                             const JobSpec& spec, Device* device,
                             StepBuffers* buffers) {
  buffers->passes = std::max<int64_t>(1, spec.grad_accumulation());
  buffers->clip = spec.optimizer().clip_grad_norm();
  const int64_t batch = spec.batch_size() / buffers->passes;
  buffers->batch = batch;
  buffers->batch_shape = train.sample_shape.WithLeading(batch);
  const Shape labels = LabelShape(model, batch);
  buffers->num_labels = labels.numel();
  buffers->host_losses.resize(buffers->num_labels);
  ASSIGN_OR_RETURN(buffers->labels, device->Allocate(labels, DType::kI32));
  return absl::OkStatus();
}

// Forward and backward of pass `pass` of step `step`: its rows of the
// step's minibatch, gradients written (pass 0) or added. Returns the sum
// of the pass's losses.
absl::StatusOr<double> TrainPass(const Model& model, Device* device,
                                 const Dataset& train, EpochSampler* sampler,
                                 int64_t step, int64_t pass, TrainState* state,
                                 StepBuffers* buffers) {
  // A fresh input tensor per pass: in-place layers may write into it.
  ASSIGN_OR_RETURN(Tensor x,
                   device->Allocate(buffers->batch_shape, DType::kF32));
  const size_t rows = static_cast<size_t>(buffers->batch);
  RETURN_IF_ERROR(LoadBatch(
      train,
      sampler->Batch(step).subspan(static_cast<size_t>(pass) * rows, rows),
      *device, x, buffers->labels, buffers->staging));
  PassContext ctx;
  ctx.training = true;
  ctx.minibatch = static_cast<uint64_t>(step);
  ctx.sample_offset = static_cast<uint64_t>(pass) * rows;
  RangeCache cache;
  Tensor logits;
  RETURN_IF_ERROR(
      ForwardRange(model, *device, state->params, x, ctx, &logits, &cache));
  const float scale =
      1.0f / static_cast<float>(buffers->num_labels * buffers->passes);
  ASSIGN_OR_RETURN(
      LossOutput loss,
      SoftmaxCrossEntropy(*device, logits, buffers->labels, scale));
  RETURN_IF_ERROR(BackwardRange(model, *device, state->params, cache,
                                loss.dlogits, ctx, nullptr, state->grads,
                                pass > 0));
  RETURN_IF_ERROR(device->CopyToHost(loss.losses, buffers->host_losses.data()));
  double sum = 0;
  for (float l : buffers->host_losses) sum += l;
  return sum;
}

// Runs training step `step` (0-based) on its batch of `train`: forward,
// loss and backward of each pass, clipping and update. Returns the batch's
// mean loss; FAILED_PRECONDITION if it is not finite.
absl::StatusOr<double> TrainStep(const Model& model, Device* device,
                                 const Dataset& train, EpochSampler* sampler,
                                 int64_t step, TrainState* state,
                                 StepBuffers* buffers) {
  double sum = 0;
  for (int64_t pass = 0; pass < buffers->passes; ++pass) {
    ASSIGN_OR_RETURN(const double s, TrainPass(model, device, train, sampler,
                                               step, pass, state, buffers));
    sum += s;
  }
  SumTiedGradients(model, *device, state->grads);
  if (buffers->clip > 0) {
    ASSIGN_OR_RETURN(const double squares,
                     GradSquares(model, *device, state->grads, true));
    ScaleGradients(*device, state->grads, ClipFactor(squares, buffers->clip));
  }
  RETURN_IF_ERROR(state->optimizer->Step(state->params, state->grads));
  RETURN_IF_ERROR(device->Synchronize());
  const double mean =
      sum / static_cast<double>(buffers->num_labels * buffers->passes);
  if (!std::isfinite(mean)) {
    return WithCause(
        absl::DataLossError(absl::StrCat(kNonFiniteLoss, " at step ", step + 1,
                                         ": the loss became ", mean,
                                         " (learning rate too high?)")),
        v1::FAILURE_NONFINITE_LOSS);
  }
  return mean;
}

// The report of step `step` (0-based) of `total`, whose mean loss is
// `loss`, with `window_samples` samples trained in the `elapsed` seconds of
// the throughput window; the step began at `step_start`.
StepReport MakeStepReport(int64_t step, int64_t total,
                          int64_t batches_per_epoch, double loss,
                          int64_t window_samples, double elapsed,
                          Clock::time_point step_start) {
  StepReport report;
  report.step = step + 1;
  report.total_steps = total;
  report.epoch = step / batches_per_epoch;
  report.loss = loss;
  report.samples_per_second = elapsed > 0 ? window_samples / elapsed : 0;
  report.step_ms =
      std::chrono::duration<double, std::milli>(Clock::now() - step_start)
          .count();
  return report;
}

// Calls the checkpoint hook when `version` (steps applied) is a checkpoint
// version of a job of `total` steps.
absl::Status MaybeCheckpoint(const LocalTrainOptions& options, int64_t version,
                             int64_t total, const TrainState& state) {
  if (!options.on_checkpoint ||
      !CheckpointDue(version, total, options.checkpoint_every,
                     options.checkpoint_at)) {
    return absl::OkStatus();
  }
  return options.on_checkpoint(version, state.params, *state.optimizer);
}

}  // namespace

namespace {

// Adds batch [start, start + n) of `data` to the sums: correct top-1
// predictions and the loss, over every label (token) of the batch.
absl::Status EvaluateBatch(const Model& model, Device* device,
                           const ParameterSet& params, const Dataset& data,
                           int64_t start, int64_t n, int64_t* correct,
                           double* loss_sum) {
  std::vector<int64_t> indices(n);
  for (int64_t i = 0; i < n; ++i) indices[i] = start + i;
  ASSIGN_OR_RETURN(Tensor x, device->Allocate(data.sample_shape.WithLeading(n),
                                              DType::kF32));
  ASSIGN_OR_RETURN(Tensor labels,
                   device->Allocate(LabelShape(model, n), DType::kI32));
  BatchStaging staging;
  RETURN_IF_ERROR(LoadBatch(data, indices, *device, x, labels, staging));
  PassContext ctx;
  ctx.training = false;
  Tensor logits;
  RETURN_IF_ERROR(
      ForwardRange(model, *device, params, x, ctx, &logits, nullptr));
  ASSIGN_OR_RETURN(LossOutput loss,
                   SoftmaxCrossEntropy(*device, logits, labels, 1.0f));
  const int64_t rows = labels.numel();
  const int64_t classes = logits.numel() / rows;
  std::vector<float> logits_host(logits.numel());
  std::vector<float> losses_host(rows);
  std::vector<int32_t> labels_host(rows);
  RETURN_IF_ERROR(device->CopyToHost(logits, logits_host.data()));
  RETURN_IF_ERROR(device->CopyToHost(loss.losses, losses_host.data()));
  RETURN_IF_ERROR(device->CopyToHost(labels, labels_host.data()));
  RETURN_IF_ERROR(device->Synchronize());
  for (int64_t i = 0; i < rows; ++i) {
    const float* row = &logits_host[i * classes];
    const int64_t best = std::max_element(row, row + classes) - row;
    if (best == labels_host[i]) ++*correct;
    *loss_sum += losses_host[i];
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<EvalResult> Evaluate(const Model& model, Device* device,
                                    const ParameterSet& params,
                                    const Dataset& data, int64_t batch_size) {
  EvalResult result;
  double loss_sum = 0;
  int64_t correct = 0;
  for (int64_t start = 0; start < data.size; start += batch_size) {
    const int64_t n = std::min(batch_size, data.size - start);
    RETURN_IF_ERROR(EvaluateBatch(model, device, params, data, start, n,
                                  &correct, &loss_sum));
  }
  result.samples = data.size;
  const int64_t labels = LabelShape(model, data.size).numel();
  if (labels > 0) {
    result.accuracy = static_cast<double>(correct) / labels;
    result.loss = loss_sum / labels;
  }
  return result;
}

namespace {

// What TrainLocal works on: the model, its data and sampler, the state.
struct LocalRun {
  const JobSpec* spec = nullptr;
  const LocalTrainOptions* options = nullptr;
  const Model* model = nullptr;
  Device* device = nullptr;
  const DataSplits* data = nullptr;
  EpochSampler* sampler = nullptr;
  TrainState* state = nullptr;
  int64_t total = 0;
};

// Evaluates after `steps` steps when JobSpec.eval_every asks for it (the
// final evaluation is made by the caller).
absl::Status MaybeEvaluate(const LocalRun& run, int64_t steps,
                           LocalTrainResult* result) {
  const int64_t every = run.spec->eval_every();
  if (every <= 0 || steps % every != 0 || steps >= run.total ||
      !run.options->evaluate || !run.data->test.has_value()) {
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(EvalResult eval,
                   Evaluate(*run.model, run.device, run.state->params,
                            *run.data->test, run.spec->batch_size()));
  result->evals.push_back({steps, eval});
  if (run.options->on_eval) run.options->on_eval(steps, eval);
  return absl::OkStatus();
}

// Runs steps [first_step, total): the training loop, with its reports,
// checkpoints and periodic evaluations.
absl::Status RunSteps(const LocalRun& run, LocalTrainResult* result) {
  const LocalTrainOptions& options = *run.options;
  const int64_t batch = run.spec->batch_size();
  StepBuffers buffers;
  RETURN_IF_ERROR(InitStepBuffers(*run.model, run.data->train, *run.spec,
                                  run.device, &buffers));
  Clock::time_point window_start = Clock::now();
  int64_t window_steps = 0;
  for (int64_t step = options.first_step; step < run.total; ++step) {
    if (options.stop != nullptr && options.stop->load()) {
      return absl::CancelledError(
          absl::StrCat("training stopped after ", step, " steps"));
    }
    const Clock::time_point step_start = Clock::now();
    if (step == options.warmup_steps) {
      window_start = Clock::now();
      window_steps = 0;
    }
    ASSIGN_OR_RETURN(const double mean,
                     TrainStep(*run.model, run.device, run.data->train,
                               run.sampler, step, run.state, &buffers));
    result->losses.push_back(mean);
    ++window_steps;
    RETURN_IF_ERROR(MaybeCheckpoint(options, step + 1, run.total, *run.state));
    const double elapsed = Seconds(Clock::now() - window_start);
    if (options.on_step) {
      options.on_step(
          MakeStepReport(step, run.total, run.sampler->batches_per_epoch(),
                         mean, window_steps * batch, elapsed, step_start));
    }
    RETURN_IF_ERROR(MaybeEvaluate(run, step + 1, result));
  }
  const double window = Seconds(Clock::now() - window_start);
  result->samples_per_second =
      window > 0 ? static_cast<double>(window_steps * batch) / window : 0;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LocalTrainResult> TrainLocal(const JobSpec& spec, Device* device,
                                            const LocalTrainOptions& options) {
  const Clock::time_point start = Clock::now();
  ASSIGN_OR_RETURN(ValidatedJob job, ValidateJobSpec(spec, options.files));
  const Model& model = *job.model;
  ASSIGN_OR_RETURN(DataSplits data, LoadData(spec.data(), options.files));
  RETURN_IF_ERROR(CheckClasses(data.train, model));
  const int64_t batch = spec.batch_size();
  ASSIGN_OR_RETURN(EpochSampler sampler, MakeSampler(spec, data.train));
  ASSIGN_OR_RETURN(
      const int64_t total,
      StepsToRun(spec, options, sampler.batches_per_epoch() * batch));
  TrainState state;
  RETURN_IF_ERROR(InitTrainState(spec, options, model, device, total, &state));
  if (options.first_step < 0 || options.first_step > total) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot resume at step ", options.first_step, " of a job of ", total));
  }
  LocalTrainResult result;
  result.parameters = state.params.numel();
  // Grown as steps run: reserving max_steps up front (up to 10^9) would
  // allocate gigabytes before the first step.
  result.losses.reserve(std::min<int64_t>(total, int64_t{1} << 20));
  const LocalRun run{&spec, &options, &model, device,
                     &data, &sampler, &state, total};
  RETURN_IF_ERROR(RunSteps(run, &result));
  result.steps = total;
  result.epochs =
      (total + sampler.batches_per_epoch() - 1) / sampler.batches_per_epoch();
  if (options.evaluate && data.test.has_value()) {
    ASSIGN_OR_RETURN(result.test,
                     Evaluate(model, device, state.params, *data.test, batch));
    result.evals.push_back({total, *result.test});
  }
  if (!options.save_weights.empty()) {
    RETURN_IF_ERROR(
        SaveParametersFile(options.save_weights, *device, state.params));
  }
  if (options.export_model) {
    ASSIGN_OR_RETURN(result.model, ExportParameters(*device, state.params));
  }
  result.wall_seconds = Seconds(Clock::now() - start);
  return result;
}

}  // namespace aqueduct
