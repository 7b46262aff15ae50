#include "worker/nn/generate.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace aqueduct {

namespace {

absl::Status CheckGenerate(const Model& model, const std::vector<int32_t>& ids,
                           const GenerateOptions& o) {
  const Shape& in = model.input_shape();
  const Shape& out = model.output_shape();
  if (in.rank() != 1 || out.rank() != 2 || out[0] != in[0]) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the model takes ", in.ToString(), " and outputs ", out.ToString(),
        " per sample: generation needs a language model (tokens [T] in, "
        "logits [T, vocabulary] out)"));
  }
  if (ids.empty()) return absl::InvalidArgumentError("the prompt is empty");
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= out[1]) {
      return absl::InvalidArgumentError(
          absl::StrCat("prompt token ", i, " is ", ids[i],
                       ", outside the model's vocabulary of ", out[1]));
    }
  }
  if (o.tokens < 0 || o.tokens > (int64_t{1} << 24)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokens=", o.tokens, " must be in [0, 16777216]"));
  }
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "temperature=", o.temperature, " must be a finite number >= 0"));
  }
  if (o.top_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_k=", o.top_k, " must not be negative"));
  }
  return absl::OkStatus();
}

// The next token from the logits of one position.
int32_t Sample(std::vector<float> logits, const GenerateOptions& o,
               std::mt19937_64& rng) {
  const int64_t v = static_cast<int64_t>(logits.size());
  if (o.temperature == 0 || o.top_k == 1) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) -
                                logits.begin());
  }
  if (o.top_k > 0 && o.top_k < v) {
    std::vector<float> sorted = logits;
    std::nth_element(sorted.begin(), sorted.begin() + (o.top_k - 1),
                     sorted.end(), std::greater<float>());
    const float kth = sorted[o.top_k - 1];
    for (float& l : logits) {
      if (l < kth) l = -INFINITY;
    }
  }
  const float top = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(v);
  for (int64_t i = 0; i < v; ++i) {
    p[i] = std::exp((static_cast<double>(logits[i]) - top) / o.temperature);
  }
  std::discrete_distribution<int32_t> pick(p.begin(), p.end());
  return pick(rng);
}

// The logits at position `last` of the window `ids` (padded to T).
absl::StatusOr<std::vector<float>> NextLogits(const Model& model,
                                              Device& device,
                                              const ParameterSet& params,
                                              const std::vector<float>& window,
                                              int64_t last) {
  const int64_t t = model.input_shape()[0];
  const int64_t vocab = model.output_shape()[1];
  ASSIGN_OR_RETURN(Tensor x, device.Allocate(Shape({1, t}), DType::kF32));
  RETURN_IF_ERROR(device.CopyFromHost(window.data(), x));
  PassContext ctx;
  ctx.training = false;
  Tensor y;
  RETURN_IF_ERROR(ForwardRange(model, device, params, x, ctx, &y, nullptr));
  std::vector<float> all(y.numel());
  RETURN_IF_ERROR(device.CopyToHost(y, all.data()));
  RETURN_IF_ERROR(device.Synchronize());
  return std::vector<float>(all.begin() + last * vocab,
                            all.begin() + (last + 1) * vocab);
}

}  // namespace

absl::StatusOr<std::vector<int32_t>> Generate(const Model& model,
                                              Device& device,
                                              const ParameterSet& params,
                                              std::vector<int32_t> ids,
                                              const GenerateOptions& options) {
  RETURN_IF_ERROR(CheckGenerate(model, ids, options));
  const int64_t t = model.input_shape()[0];
  std::mt19937_64 rng(options.seed);
  std::vector<int32_t> out;
  std::vector<float> window(t);
  for (int64_t n = 0; n < options.tokens; ++n) {
    const int64_t len = std::min<int64_t>(t, ids.size());
    const int64_t from = static_cast<int64_t>(ids.size()) - len;
    std::fill(window.begin(), window.end(), 0.0f);
    for (int64_t i = 0; i < len; ++i) {
      window[i] = static_cast<float>(ids[from + i]);
    }
    ASSIGN_OR_RETURN(std::vector<float> logits,
                     NextLogits(model, device, params, window, len - 1));
    const int32_t next = Sample(std::move(logits), options, rng);
    ids.push_back(next);
    out.push_back(next);
  }
  return out;
}

}  // namespace aqueduct
