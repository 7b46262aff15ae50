#include "worker/nn/spec.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace aqueduct {

absl::StatusOr<ValidatedJob> ValidateJobSpec(const JobSpec& spec) {
  RETURN_IF_ERROR(CheckJobSpec(spec).status());
  ValidatedJob job;
  ASSIGN_OR_RETURN(job.data, DescribeData(spec.data()));
  ASSIGN_OR_RETURN(job.model, Model::Build(spec.model(), job.data.sample_shape,
                                           spec.seed()));
  const Shape& out = job.model->output_shape();
  const int last = job.model->num_layers() - 1;
  if (out.rank() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.layers[", last, "] outputs ", out.ToString(),
        " per sample; the loss needs logits [classes] (add a flatten and a "
        "linear layer)"));
  }
  if (out[0] < job.data.num_classes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.layers[", last, "] outputs ", out[0],
        " logits but the data has ", job.data.num_classes, " classes"));
  }
  return job;
}

}  // namespace aqueduct
