// The end of a pipeline job: replica 0 of every stage sends its trained
// weights (a worker with several chunks, each chunk's) to the evaluator
// (the output stage's replica 0,
// JobLayout::evaluator_rank), which assembles the whole model, evaluates it
// on the test split when the job's data has one, and exports it (the job's
// trained model, names as docs/weights.md). Every worker takes part alike,
// so no worker waits for weights that never come.
//
// Thread-safety: a function; it runs on the stage loop's thread and uses
// the communicator as the stage did.
#ifndef AQUEDUCT_WORKER_RUNTIME_EVALUATION_H_
#define AQUEDUCT_WORKER_RUNTIME_EVALUATION_H_

#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/comm/communicator.h"
#include "common/device/device.h"
#include "common/safetensors.h"
#include "worker/data/dataset.h"
#include "worker/nn/model.h"
#include "worker/runtime/layout.h"
#include "worker/train/local_trainer.h"

namespace aqueduct {

struct EvaluationInputs {
  const Model* model = nullptr;  // Every layer.
  // The model's spec: a tensor-parallel stage's parts are assembled as a
  // member's model of its degree says they are split.
  const ModelSpec* model_spec = nullptr;
  const JobLayout* layout = nullptr;
  bool has_test_split = false;  // HasTestSplit(spec.data()).
  // The weights of every stage this worker holds (one, or its chunks), by
  // stage; live (a chunk's current weights).
  std::map<int, const ParameterSet*> local;
  // Or their bytes copied to the host (LocalSnapshot), for an evaluation
  // off the stage's thread; these come first.
  std::map<int, std::string> local_flat;
  // EvaluateAtVersion: the stage whose step made the version (its chunk's
  // weights are sent, or on the evaluator's rank the output stage gathers).
  int stage = 0;
  const Dataset* test = nullptr;  // The evaluator's test split.
  Device* device = nullptr;
  Communicator* comm = nullptr;
  absl::Duration timeout = absl::Seconds(60);  // Of every wait on a peer.
};

// What the evaluator ends with; both empty on every other worker.
struct EndOfJob {
  // The test split's metrics (none without a test split).
  std::optional<EvalResult> eval;
  // The whole trained model.
  std::optional<SafetensorsFile> model;
};

// Errors: the communicator's (a peer gone, DEADLINE_EXCEEDED after
// `timeout`), DATA_LOSS for weights of the wrong size, INTERNAL when the
// evaluator has no test split loaded.
absl::StatusOr<EndOfJob> EvaluateAtEnd(const EvaluationInputs& in);

// Whether stage `stage`'s step on this worker is where a periodic
// evaluation gathers and evaluates (the output stage, on member 0 of its
// replica 0): the part that may run off the stage's thread.
bool GathersEvaluation(const JobLayout& layout, int stage);

// The host bytes of the weights of every stage in `in.local`, into
// `in.local_flat` (and `in.local` cleared): what an evaluation run later,
// on another thread and device, reads of this worker's own stages.
absl::Status LocalSnapshot(EvaluationInputs* in);

// A periodic evaluation (JobSpec.eval_every) of the weights of `version`,
// called by every stage's replica 0 once it has made that version (for
// each chunk: in.stage): other stages send their weights without waiting (the
// send joins `sends`, to be waited for before the stage ends); the evaluator
// gathers them, waiting for stages behind it, and evaluates the held-out split.
// nullopt on every other worker. No deadlock under any schedule: a stage's way
// to `version` never needs the evaluator to do more than it has.
absl::StatusOr<std::optional<EvalResult>> EvaluateAtVersion(
    const EvaluationInputs& in, int64_t version,
    std::vector<std::unique_ptr<Work>>* sends);

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_RUNTIME_EVALUATION_H_
