// Where a pipeline job's trained model goes at the end: the output stage's
// replica 0 gathers every stage's weights, serialises the whole model as
// one safetensors file and hands it to the sink before it reports the job
// finished. The daemon's sink uploads it to the coordinator in chunks
// (worker/model_uploader.h); tests keep it in memory.
//
// Thread-safety: implementations are thread-safe.
#ifndef AQUEDUCT_WORKER_RUNTIME_MODEL_SINK_H_
#define AQUEDUCT_WORKER_RUNTIME_MODEL_SINK_H_

#include <string>

#include "absl/status/status.h"

namespace aqueduct {

class ModelSink {
 public:
  virtual ~ModelSink() = default;
  // Delivers the trained model of attempt `attempt` of `job_id` (the bytes
  // of a safetensors file). Returns once it is durable at its destination,
  // or the error that prevented it (with a deadline of its own).
  virtual absl::Status Deliver(const std::string& job_id, int attempt,
                               const std::string& safetensors) = 0;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_RUNTIME_MODEL_SINK_H_
