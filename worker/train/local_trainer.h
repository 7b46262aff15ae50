// Single-process training: the whole model as one stage on one device. This
// is `aq train-local`, and the reference the pipeline schedules are checked
// against (same minibatches, same dropout masks, same initialisation).
//
// Not thread-safe: one call runs on the calling thread.
#ifndef AQUEDUCT_WORKER_TRAIN_LOCAL_TRAINER_H_
#define AQUEDUCT_WORKER_TRAIN_LOCAL_TRAINER_H_

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/device/device.h"
#include "common/file_system.h"
#include "common/safetensors.h"
#include "proto/types.h"
#include "worker/data/dataset.h"
#include "worker/nn/model.h"
#include "worker/nn/optimizer.h"

namespace aqueduct {

struct StepReport {
  int64_t step = 0;  // 1-based steps done.
  int64_t total_steps = 0;
  int64_t epoch = 0;  // 0-based epoch of this step.
  double loss = 0;
  // Over the steps since the throughput window began.
  double samples_per_second = 0;
  // This step's forward + backward + update time.
  double step_ms = 0;
};

// Metrics on a held-out split. For text, per token: accuracy of the top
// prediction and the mean loss (exp(loss) is the perplexity).
struct EvalResult {
  double accuracy = 0;
  double loss = 0;
  int64_t samples = 0;
};

// An evaluation after `step` steps.
struct EvalAt {
  int64_t step = 0;
  EvalResult result;
};

struct LocalTrainOptions {
  // Overrides of the spec's max_steps / epochs when set; max_steps 0 trains
  // nothing (the initial or init_weights model is evaluated).
  std::optional<int64_t> max_steps;
  std::optional<int64_t> epochs;
  // Overrides spec.init_weights when not empty.
  std::string init_weights;
  // Where to write the trained parameters (safetensors); empty for none.
  std::string save_weights;
  // Steps excluded from samples_per_second (warm-up of caches and threads).
  int64_t warmup_steps = 5;
  // Evaluate on the test split at the end, if there is one.
  bool evaluate = true;
  // Called after every step.
  std::function<void(const StepReport&)> on_step;
  // When set and it becomes true, training stops after the current step and
  // TrainLocal returns CANCELLED.
  const std::atomic<bool>* stop = nullptr;
  // Where the data and init_weights may be read (a worker's --data_root;
  // every path for `aq train-local`), and the stop flag of those reads.
  FileAccess files = FileAccess::Anywhere();
  // Resume: the first step to run (= the checkpoint's version) and the
  // checkpoint's training state (parameters, optimizer state and step
  // count; worker/nn/training_state.h), which replaces init_weights.
  int64_t first_step = 0;
  const SafetensorsFile* restore = nullptr;
  // Checkpoints: after every step that makes the version (steps applied) a
  // multiple of `checkpoint_every`, short of the last, `on_checkpoint` is
  // called with the version, the parameters and the optimizer.
  int64_t checkpoint_every = 0;
  std::function<absl::Status(int64_t version, const ParameterSet& params,
                             const Optimizer& optimizer)>
      on_checkpoint;
  // When set, also a checkpoint at the version it holds when training
  // reaches it (checkpoint.every_seconds: the coordinator's pick).
  const std::atomic<int64_t>* checkpoint_at = nullptr;
  // Keep the trained parameters in the result (LocalTrainResult::model).
  bool export_model = false;
  // Called after every periodic evaluation (JobSpec.eval_every) with the
  // steps applied and the result.
  std::function<void(int64_t steps, const EvalResult&)> on_eval;
};

struct LocalTrainResult {
  int64_t steps = 0;
  int64_t epochs = 0;  // Epochs begun.
  std::vector<double> losses;
  double samples_per_second = 0;
  std::optional<EvalResult> test;
  // Periodic evaluations (JobSpec.eval_every) and the final one, in order.
  std::vector<EvalAt> evals;
  double wall_seconds = 0;
  int64_t parameters = 0;
  // The trained parameters, when options.export_model.
  std::optional<SafetensorsFile> model;
};

// Trains `spec` on `device`. Errors: INVALID_ARGUMENT for a bad spec or
// weights file, the loader's errors for bad data.
absl::StatusOr<LocalTrainResult> TrainLocal(const JobSpec& spec, Device* device,
                                            const LocalTrainOptions& options);

// Accuracy and mean loss of `params` (all layers of `model`) on `data`, in
// batches of `batch_size` (the last one may be smaller).
absl::StatusOr<EvalResult> Evaluate(const Model& model, Device* device,
                                    const ParameterSet& params,
                                    const Dataset& data, int64_t batch_size);

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_TRAIN_LOCAL_TRAINER_H_
