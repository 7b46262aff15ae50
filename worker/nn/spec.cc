#include "worker/nn/spec.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace aqueduct {

absl::StatusOr<ValidatedJob> ValidateJobSpec(const JobSpec& spec,
                                             const FileAccess& files) {
  RETURN_IF_ERROR(CheckJobSpec(spec).status());
  ValidatedJob job;
  ASSIGN_OR_RETURN(job.data, DescribeData(spec.data(), files));
  ASSIGN_OR_RETURN(job.model, Model::Build(spec.model(), job.data.sample_shape,
                                           spec.seed()));
  RETURN_IF_ERROR(CheckEmbeddingVocabulary(
      spec.model(), job.data.num_classes,
      absl::StrCat("the tokenizer's vocabulary of ", job.data.num_classes,
                   " tokens (data.text)")));
  const Shape& out = job.model->output_shape();
  const int last = job.model->num_layers() - 1;
  // Logits [classes], or [T, vocabulary] with a label per position.
  const int64_t per_sample = job.data.labels_per_sample;
  const bool shaped = per_sample > 1 ? out.rank() == 2 && out[0] == per_sample
                                     : out.rank() == 1;
  if (!shaped) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.layers[", last, "] outputs ", out.ToString(),
        " per sample; the loss needs logits ",
        per_sample > 1 ? absl::StrCat("[", per_sample, ", vocabulary]")
                       : "[classes] (add a flatten and a linear layer)"));
  }
  const int64_t logits = out[out.rank() - 1];
  if (logits < job.data.num_classes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.layers[", last, "] outputs ", logits,
        " logits but the data has ", job.data.num_classes,
        per_sample > 1 ? " tokens in its vocabulary" : " classes"));
  }
  return job;
}

}  // namespace aqueduct
