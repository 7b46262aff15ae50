// Text generation with a trained language model: autoregressive sampling
// over a model whose logits are [T, vocabulary] per sample (a GPT spec).
//
// Each new token comes from one forward pass over the last T tokens (the
// model's context), right-padded to T: attention is causal, so the logits
// at the last real position do not depend on the padding. Sampling:
// logits / temperature, only the top_k largest kept (0: all), softmax, one
// draw from a std::mt19937_64 seeded with `seed` (temperature 0: the most
// likely token, no draw). The same inputs give the same tokens.
//
// Not thread-safe: runs on the calling thread with the caller's device.
#ifndef AQUEDUCT_WORKER_NN_GENERATE_H_
#define AQUEDUCT_WORKER_NN_GENERATE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/device/device.h"
#include "worker/nn/model.h"

namespace aqueduct {

struct GenerateOptions {
  int64_t tokens = 100;      // New tokens to generate.
  double temperature = 1.0;  // >= 0; 0 is greedy.
  int64_t top_k = 0;         // 0: the whole vocabulary.
  uint64_t seed = 0;
};

// The `options.tokens` tokens that follow `prompt` (ids in the model's
// vocabulary; at least one). INVALID_ARGUMENT for a model that is not a
// language model (input [T], logits [T, vocabulary]), an empty prompt, an
// id out of range or options out of range, naming what was wrong.
absl::StatusOr<std::vector<int32_t>> Generate(const Model& model,
                                              Device& device,
                                              const ParameterSet& params,
                                              std::vector<int32_t> prompt,
                                              const GenerateOptions& options);

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_NN_GENERATE_H_
