// aq hf import|export: Hugging Face GPT-2 and LLaMA checkpoints to and from
// Aqueduct's weights files (worker/nn/hf_weights.h), offline.
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "client/cli.h"
#include "client/commands.h"
#include "common/safetensors.h"
#include "common/status.h"
#include "pipeline/spec.h"
#include "worker/nn/hf_weights.h"

ABSL_DECLARE_FLAG(std::string, spec);  // generate_command.cc
ABSL_FLAG(std::string, arch, "", "gpt2 or llama");
ABSL_FLAG(std::string, dtype, "F32", "the exported tensors' dtype");

namespace aqueduct {
namespace {

constexpr char kHfDescription[] =
    "Converts between a Hugging Face checkpoint (a safetensors state_dict\n"
    "of transformers' GPT2LMHeadModel or LlamaForCausalLM: --arch gpt2 or\n"
    "llama) and Aqueduct's weights (\"layers.<i>.<param>\",\n"
    "docs/weights.md) of the job spec's model (--spec), offline:\n"
    "\n"
    "  import IN -o OUT   IN (F32, BF16 or F16) as an F32 weights file for\n"
    "                     aq train-local SPEC --init_weights OUT, or the\n"
    "                     spec's init_weights\n"
    "  export IN -o OUT   IN (from aq train-local --save_weights or aq\n"
    "                     weights) as a state_dict (--dtype F32, BF16 or F16)\n"
    "                     that load_state_dict(strict=True) and\n"
    "                     from_pretrained take\n"
    "\n"
    "The spec's layers must be the architecture's: gpt2: token_embedding,\n"
    "position_embedding, transformer_block x N (biases, activation:\n"
    "\"gelu_tanh\"), layer_norm, linear head without bias; llama:\n"
    "token_embedding, llama_block x N, rms_norm, linear head without bias.\n"
    "The head may be tied to layer 0. GPT-2's Conv1D weights (c_attn,\n"
    "c_proj, c_fc) are transposed to and from nn.Linear's layout; the\n"
    "attention-mask buffers are skipped; a file without lm_head.weight\n"
    "gives the head the embedding's values; export always writes it.\n"
    "Every tensor must be there with its shape: errors name the file, the\n"
    "tensor and both shapes.\n";

CommandLineSpec HfSpec() {
  CommandLineSpec spec = SubcommandSpec(
      "hf", "import|export --arch gpt2|llama --spec SPEC IN -o OUT [flags]",
      kHfDescription,
      {{"arch", "ARCH", ""},
       {"spec", "SPEC", "the job spec whose model the weights are"},
       {"output_file", "FILE", "where to write the converted file (required)"},
       {"dtype", "DTYPE", "export only: F32, BF16 or F16"},
       OutputFlag()});
  spec.aliases = {{"o", "output_file"}, {"out", "output_file"}};
  return spec;
}

// The spec's model, checked as the architecture's (every layer's shapes
// too; the rest of the job, its data and training, does not matter here).
absl::StatusOr<ModelSpec> LoadModel(const std::string& path, HfArch arch) {
  ASSIGN_OR_RETURN(JobSpec job, LoadJobSpecFile(path));
  RETURN_IF_ERROR(Annotate(HfTensorNames(arch, job.model()).status(), path));
  return job.model();
}

struct Request {
  bool import;
  HfArch arch;
  DType dtype;
  std::string spec, in, out;
};

absl::StatusOr<SafetensorsFile> Convert(const Request& r) {
  ASSIGN_OR_RETURN(const ModelSpec model, LoadModel(r.spec, r.arch));
  ASSIGN_OR_RETURN(const SafetensorsFile in, ReadSafetensorsFile(r.in));
  absl::StatusOr<SafetensorsFile> out =
      r.import ? ImportHfWeights(r.arch, model, in)
               : ExportHfWeights(r.arch, model, in, r.dtype);
  if (!out.ok()) return Annotate(out.status(), r.in);
  return out;
}

void PrintWritten(const Request& r, const SafetensorsFile& file) {
  int64_t values = 0;
  for (const auto& [name, t] : file.tensors) values += t.shape.numel();
  const std::string dtype(DTypeName(r.import ? DType::kF32 : r.dtype));
  if (JsonOutput()) {
    std::cout << "{\"file\":" << JsonString(r.out)
              << ",\"tensors\":" << file.tensors.size()
              << ",\"values\":" << values << ",\"dtype\":" << JsonString(dtype)
              << "}" << std::endl;
    return;
  }
  std::cout << "wrote " << r.out << " (" << file.tensors.size() << " tensors, "
            << values << " values, " << dtype << "; "
            << (r.import ? "Aqueduct's names" : "Hugging Face's names")
            << ", from " << HfArchName(r.arch) << " " << r.in << ")"
            << std::endl;
}

// The request the flags and arguments make, or a usage error's message.
absl::StatusOr<Request> MakeRequest(const ParsedArgs& parsed) {
  Request r;
  const std::string& mode = parsed.positional[0];
  if (mode != "import" && mode != "export") {
    return absl::InvalidArgumentError(
        absl::StrCat("'", mode, "' is not import or export"));
  }
  r.import = mode == "import";
  r.in = parsed.positional[1];
  r.spec = absl::GetFlag(FLAGS_spec);
  r.out = absl::GetFlag(FLAGS_output_file);
  if (r.spec.empty()) return absl::InvalidArgumentError("needs --spec SPEC");
  if (r.out.empty()) return absl::InvalidArgumentError("needs -o OUT");
  ASSIGN_OR_RETURN(r.arch, HfArchFromName(absl::GetFlag(FLAGS_arch)));
  const absl::StatusOr<DType> dtype = DTypeFromName(absl::GetFlag(FLAGS_dtype));
  if (!dtype.ok() || *dtype == DType::kI32) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--dtype=", absl::GetFlag(FLAGS_dtype), " is not F32, BF16 or F16"));
  }
  if (r.import && parsed.given.count("dtype")) {
    return absl::InvalidArgumentError(
        "--dtype is for export (import always writes F32)");
  }
  r.dtype = *dtype;
  return r;
}

}  // namespace

int HfMain(const std::vector<std::string>& args) {
  const CommandLineSpec spec = HfSpec();
  ParsedArgs parsed;
  if (auto code = ParseSubcommand(spec, args, 2, 2, &parsed)) return *code;
  const absl::StatusOr<Request> r = MakeRequest(parsed);
  if (!r.ok()) return UsageError(spec, std::string(r.status().message()));
  if (absl::Status s = CheckWritable(r->out); !s.ok()) {
    return Fail(absl::StrCat("hf: ", s.message()));
  }
  const absl::StatusOr<SafetensorsFile> out = Convert(*r);
  absl::Status written = out.status();
  if (written.ok()) written = WriteSafetensorsFile(r->out, *out);
  if (!written.ok()) {
    return Fail(
        absl::StrCat("hf ", parsed.positional[0], ": ", written.message()));
  }
  PrintWritten(*r, *out);
  return kExitOk;
}

}  // namespace aqueduct
