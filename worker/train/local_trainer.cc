#include "worker/train/local_trainer.h"

#include <chrono>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "worker/nn/loss.h"
#include "worker/nn/optimizer.h"
#include "worker/nn/spec.h"
#include "worker/nn/weights.h"

namespace aqueduct {

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

absl::StatusOr<EvalResult> Evaluate(const Model& model, Device* device,
                                    const ParameterSet& params,
                                    const Dataset& data, int64_t batch_size) {
  EvalResult result;
  const int64_t per = data.sample_shape.numel();
  const int64_t classes = model.output_shape()[0];
  std::vector<float> logits_host;
  std::vector<float> losses_host;
  double loss_sum = 0;
  int64_t correct = 0;
  PassContext ctx;
  ctx.training = false;
  for (int64_t start = 0; start < data.size; start += batch_size) {
    const int64_t n = std::min(batch_size, data.size - start);
    ASSIGN_OR_RETURN(
        Tensor x,
        device->Allocate(data.sample_shape.WithLeading(n), DType::kF32));
    ASSIGN_OR_RETURN(Tensor labels, device->Allocate(Shape({n}), DType::kI32));
    RETURN_IF_ERROR(device->CopyFromHost(data.inputs.data() + start * per, x));
    RETURN_IF_ERROR(device->CopyFromHost(data.labels.data() + start, labels));
    Tensor logits;
    RETURN_IF_ERROR(
        ForwardRange(model, *device, params, x, ctx, &logits, nullptr));
    ASSIGN_OR_RETURN(LossOutput loss,
                     SoftmaxCrossEntropy(*device, logits, labels, 1.0f));
    logits_host.resize(n * classes);
    losses_host.resize(n);
    RETURN_IF_ERROR(device->CopyToHost(logits, logits_host.data()));
    RETURN_IF_ERROR(device->CopyToHost(loss.losses, losses_host.data()));
    for (int64_t i = 0; i < n; ++i) {
      const float* row = &logits_host[i * classes];
      int64_t best = 0;
      for (int64_t c = 1; c < classes; ++c) {
        if (row[c] > row[best]) best = c;
      }
      if (best == data.labels[start + i]) ++correct;
      loss_sum += losses_host[i];
    }
  }
  RETURN_IF_ERROR(device->Synchronize());
  result.samples = data.size;
  if (data.size > 0) {
    result.accuracy = static_cast<double>(correct) / data.size;
    result.loss = loss_sum / data.size;
  }
  return result;
}

absl::StatusOr<LocalTrainResult> TrainLocal(const JobSpec& spec, Device* device,
                                            const LocalTrainOptions& options) {
  const Clock::time_point start = Clock::now();
  ASSIGN_OR_RETURN(ValidatedJob job, ValidateJobSpec(spec));
  const Model& model = *job.model;
  ASSIGN_OR_RETURN(DataSplits data, LoadData(spec.data()));
  if (data.train.num_classes > model.output_shape()[0]) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the training data has ", data.train.num_classes,
        " classes but the model outputs ", model.output_shape()[0], " logits"));
  }
  const int64_t batch = spec.batch_size();
  const bool shuffle = !spec.data().has_shuffle() || spec.data().shuffle();
  EpochSampler sampler(data.train.size, batch, shuffle, spec.seed());
  if (sampler.batches_per_epoch() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_size=", batch, " is larger than the training set (",
                     data.train.size, " samples)"));
  }
  const int64_t epochs = options.epochs.value_or(spec.epochs());
  const int64_t max_steps = options.max_steps.value_or(spec.max_steps());
  int64_t total = epochs > 0 ? epochs * sampler.batches_per_epoch()
                             : std::numeric_limits<int64_t>::max();
  if (max_steps > 0) total = std::min(total, max_steps);
  if (total <= 0 || total == std::numeric_limits<int64_t>::max()) {
    return absl::InvalidArgumentError(
        "neither epochs nor max_steps is positive: training would never "
        "stop");
  }

  ASSIGN_OR_RETURN(ParameterSet params,
                   InitParameters(model, 0, model.num_layers(), device));
  const std::string& init =
      options.init_weights.empty() ? spec.init_weights() : options.init_weights;
  if (!init.empty()) {
    RETURN_IF_ERROR(
        Annotate(LoadParametersFile(init, *device, params), "init_weights"));
  }
  ASSIGN_OR_RETURN(ParameterSet grads, ZerosLike(params, device));
  ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer,
                   CreateOptimizer(spec.optimizer(), params, device, total));

  LocalTrainResult result;
  result.parameters = params.numel();
  result.losses.reserve(total);
  const Shape batch_shape = data.train.sample_shape.WithLeading(batch);
  BatchStaging staging;
  std::vector<float> host_losses(batch);
  ASSIGN_OR_RETURN(Tensor labels,
                   device->Allocate(Shape({batch}), DType::kI32));
  Clock::time_point window_start = Clock::now();
  int64_t window_steps = 0;
  for (int64_t step = 0; step < total; ++step) {
    if (options.stop != nullptr && options.stop->load()) {
      return absl::CancelledError(
          absl::StrCat("training stopped after ", step, " steps"));
    }
    const Clock::time_point step_start = Clock::now();
    if (step == options.warmup_steps) {
      window_start = Clock::now();
      window_steps = 0;
    }
    // A fresh input tensor per step: in-place layers may write into it.
    ASSIGN_OR_RETURN(Tensor x, device->Allocate(batch_shape, DType::kF32));
    RETURN_IF_ERROR(LoadBatch(data.train, sampler.Batch(step), *device, x,
                              labels, staging));
    PassContext ctx;
    ctx.training = true;
    ctx.minibatch = static_cast<uint64_t>(step);
    RangeCache cache;
    Tensor logits;
    RETURN_IF_ERROR(
        ForwardRange(model, *device, params, x, ctx, &logits, &cache));
    ASSIGN_OR_RETURN(LossOutput loss,
                     SoftmaxCrossEntropy(*device, logits, labels,
                                         1.0f / static_cast<float>(batch)));
    RETURN_IF_ERROR(BackwardRange(model, *device, params, cache, loss.dlogits,
                                  ctx, nullptr, grads, false));
    RETURN_IF_ERROR(optimizer->Step(params, grads));
    RETURN_IF_ERROR(device->CopyToHost(loss.losses, host_losses.data()));
    RETURN_IF_ERROR(device->Synchronize());
    double sum = 0;
    for (float l : host_losses) sum += l;
    const double mean = sum / batch;
    if (!std::isfinite(mean)) {
      return absl::FailedPreconditionError(
          absl::StrCat("the training loss became ", mean, " at step ", step + 1,
                       " (learning rate too high?)"));
    }
    result.losses.push_back(mean);
    ++window_steps;
    const double elapsed = Seconds(Clock::now() - window_start);
    if (options.on_step) {
      StepReport report;
      report.step = step + 1;
      report.total_steps = total;
      report.epoch = step / sampler.batches_per_epoch();
      report.loss = mean;
      report.samples_per_second =
          elapsed > 0 ? window_steps * batch / elapsed : 0;
      report.step_ms =
          std::chrono::duration<double, std::milli>(Clock::now() - step_start)
              .count();
      options.on_step(report);
    }
  }
  const double window = Seconds(Clock::now() - window_start);
  result.steps = total;
  result.epochs =
      (total + sampler.batches_per_epoch() - 1) / sampler.batches_per_epoch();
  result.samples_per_second = window > 0 ? window_steps * batch / window : 0;
  if (options.evaluate && data.test.has_value()) {
    ASSIGN_OR_RETURN(result.test,
                     Evaluate(model, device, params, *data.test, batch));
  }
  if (!options.save_weights.empty()) {
    RETURN_IF_ERROR(SaveParametersFile(options.save_weights, *device, params));
  }
  result.wall_seconds = Seconds(Clock::now() - start);
  return result;
}

}  // namespace aqueduct
