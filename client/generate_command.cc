// aq generate: text sampled from a trained language model (a job spec with
// data.text and logits [T, vocabulary]), from a weights file or a finished
// job's model fetched from the coordinator.
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "client/cli.h"
#include "client/commands.h"
#include "common/device/cpu_device.h"
#include "common/status.h"
#include "pipeline/spec.h"
#include "worker/data/text.h"
#include "worker/nn/generate.h"
#include "worker/nn/spec.h"
#include "worker/nn/weights.h"

ABSL_FLAG(std::string, spec, "", "the job spec the model was trained with");
ABSL_FLAG(std::string, weights, "", "the trained model (safetensors)");
ABSL_FLAG(std::string, job, "",
          "a finished job whose model to fetch from the coordinator");
ABSL_FLAG(std::string, prompt, "\n", "the text to continue");
ABSL_FLAG(int64_t, tokens, 200, "tokens to generate");
ABSL_FLAG(double, temperature, 0.8, "softmax temperature (0: greedy)");
ABSL_FLAG(int64_t, top_k, 0, "sample among the K most likely tokens (0: all)");
ABSL_FLAG(uint64_t, seed, 1, "seed of the sampling");

namespace aqueduct {
namespace {

constexpr char kGenerateDescription[] =
    "Continues --prompt with --tokens tokens sampled from a trained\n"
    "language model: the job spec it was trained with (--spec: its model,\n"
    "and its data.text for the tokenizer, which reads the text files for a\n"
    "chars vocabulary) and its weights, from a file (--weights, e.g. from\n"
    "aq weights or aq train-local --save_weights) or from a finished job\n"
    "(--job JOB, fetched from the coordinator). Prints the prompt and its\n"
    "continuation (--output json: {\"prompt\", \"text\"}, the text with its\n"
    "prompt). The same flags and --seed give the same text.\n";

CommandLineSpec GenerateSpec() {
  return SubcommandSpec("generate",
                        "--spec SPEC (--weights FILE | --job JOB) [flags]",
                        kGenerateDescription,
                        {{"spec", "SPEC", ""},
                         {"weights", "FILE", ""},
                         {"job", "JOB", ""},
                         {"prompt", "TEXT", ""},
                         {"tokens", "N", ""},
                         {"temperature", "T", ""},
                         {"top_k", "K", ""},
                         {"seed", "S", ""},
                         {"threads", "T", ""},
                         CoordinatorFlag(),
                         OutputFlag()});
}

// Fetches --job's model into a temporary file; its path, or empty after
// printing the error (`code` holds the exit code).
std::string FetchToTemp(const std::string& job, int* code) {
  const char* tmp = std::getenv("TMPDIR");
  std::string path = absl::StrCat(tmp != nullptr ? tmp : "/tmp",
                                  "/aq-generate-", getpid(), ".safetensors");
  *code = FetchModel(job, path, /*quiet=*/true);
  return *code == kExitOk ? path : "";
}

// Loads the spec's model and the weights, generates and decodes.
absl::StatusOr<std::string> Run(const std::string& spec_path,
                                const std::string& weights) {
  ASSIGN_OR_RETURN(JobSpec spec, LoadJobSpecFile(spec_path));
  if (!spec.data().has_text()) {
    return absl::InvalidArgumentError(
        absl::StrCat(spec_path,
                     ": data.text is not set: generation needs "
                     "the text spec the model was trained on"));
  }
  absl::StatusOr<ValidatedJob> valid = ValidateJobSpec(spec);
  if (!valid.ok()) return Annotate(valid.status(), spec_path);
  ValidatedJob job = std::move(*valid);
  ASSIGN_OR_RETURN(
      Tokenizer tokenizer,
      Tokenizer::ForSpec(spec.data().text(), FileAccess::Anywhere()));
  CpuDeviceOptions device_options;
  device_options.threads = std::max(1, absl::GetFlag(FLAGS_threads));
  CpuDevice device(device_options);
  ASSIGN_OR_RETURN(
      ParameterSet params,
      InitParameters(*job.model, 0, job.model->num_layers(), &device));
  RETURN_IF_ERROR(LoadParametersFile(weights, device, params));
  const std::string prompt = absl::GetFlag(FLAGS_prompt);
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer.Encode(prompt);
  if (!ids.ok()) return Annotate(ids.status(), "--prompt");
  GenerateOptions options;
  options.tokens = absl::GetFlag(FLAGS_tokens);
  options.temperature = absl::GetFlag(FLAGS_temperature);
  options.top_k = absl::GetFlag(FLAGS_top_k);
  options.seed = absl::GetFlag(FLAGS_seed);
  ASSIGN_OR_RETURN(std::vector<int32_t> out,
                   Generate(*job.model, device, params, *ids, options));
  ASSIGN_OR_RETURN(std::string text, tokenizer.Decode(out));
  return prompt + text;
}

}  // namespace

int GenerateMain(const std::vector<std::string>& args) {
  const CommandLineSpec spec = GenerateSpec();
  ParsedArgs parsed;
  if (auto code = ParseSubcommand(spec, args, 0, 0, &parsed)) return *code;
  const std::string spec_path = absl::GetFlag(FLAGS_spec);
  std::string weights = absl::GetFlag(FLAGS_weights);
  const std::string job = absl::GetFlag(FLAGS_job);
  if (spec_path.empty()) return UsageError(spec, "generate needs --spec SPEC");
  if (weights.empty() == job.empty()) {
    return UsageError(spec, "generate needs one of --weights FILE, --job JOB");
  }
  if (!job.empty()) {
    int code = kExitOk;
    weights = FetchToTemp(job, &code);
    if (weights.empty()) return code;
  }
  absl::StatusOr<std::string> text = Run(spec_path, weights);
  if (!job.empty()) std::remove(weights.c_str());
  if (!text.ok()) {
    return Fail(absl::StrCat("generate: ", text.status().message()));
  }
  if (JsonOutput()) {
    std::cout << "{\"prompt\":" << JsonString(absl::GetFlag(FLAGS_prompt))
              << ",\"text\":" << JsonString(*text) << "}" << std::endl;
  } else {
    std::cout << *text << std::endl;
  }
  return kExitOk;
}

}  // namespace aqueduct
