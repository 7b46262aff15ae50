#include "worker/nn/spec.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "worker/nn/optimizer.h"

namespace aqueduct {

namespace {

class CollectErrors final : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    errors_.push_back(absl::StrCat(line + 1, ":", column + 1, ": ", message));
  }
  void AddWarning(int line, google::protobuf::io::ColumnNumber column,
                  const std::string& message) override {
    AddError(line, column, message);
  }
  std::string Joined() const { return absl::StrJoin(errors_, "; "); }

 private:
  std::vector<std::string> errors_;
};

}  // namespace

absl::StatusOr<JobSpec> ParseJobSpec(const std::string& text,
                                     const std::string& source) {
  JobSpec spec;
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{') {
    const auto status =
        google::protobuf::util::JsonStringToMessage(text, &spec);
    if (!status.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          source,
          ": not a valid JSON JobSpec: ", status.message().as_string()));
    }
    return spec;
  }
  google::protobuf::TextFormat::Parser parser;
  CollectErrors errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, &spec)) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": not a valid text-format JobSpec: ", errors.Joined()));
  }
  return spec;
}

absl::StatusOr<JobSpec> LoadJobSpecFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  return ParseJobSpec(buffer.str(), path);
}

absl::StatusOr<ValidatedJob> ValidateJobSpec(const JobSpec& spec) {
  if (spec.batch_size() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_size=", spec.batch_size(), " must be positive"));
  }
  if (spec.epochs() < 0 || spec.max_steps() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "epochs=", spec.epochs(), " and max_steps=", spec.max_steps(),
        " must not be negative"));
  }
  if (spec.epochs() == 0 && spec.max_steps() == 0) {
    return absl::InvalidArgumentError(
        "neither epochs nor max_steps is set: training would never stop");
  }
  RETURN_IF_ERROR(ValidateOptimizerSpec(spec.optimizer()));
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
