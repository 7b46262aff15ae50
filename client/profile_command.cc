// aq profile: measures each layer of a job's model on this machine's CPU and
// writes a profile for aq plan (and aq submit --profile).
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "client/cli.h"
#include "client/commands.h"
#include "common/device/cpu_device.h"
#include "coordinator/planner/profile_graph.h"
#include "worker/nn/spec.h"
#include "worker/profiler.h"

ABSL_FLAG(int32_t, warmup, 2, "unmeasured iterations");
ABSL_FLAG(int32_t, iterations, 5, "measured iterations (the median is kept)");

namespace aqueduct {
namespace {

constexpr char kProfileDescription[] =
    "Measures each layer of JOB's model on this CPU (forward and backward\n"
    "ms at the job's batch size, activation and parameter bytes) and writes\n"
    "the profile to -o FILE, or to stdout: Aqueduct's JSON (one document)\n"
    "or PipeDream's text format.\n";

CommandLineSpec ProfileSpec() {
  CommandLineSpec spec = SubcommandSpec(
      "profile", "JOB [flags]", kProfileDescription,
      {{"output_file", "FILE", "where to write the profile (default: stdout)"},
       {"format", "json|pipedream", "profile format (default: json)"},
       {"output", "json|text|FILE",
        "json: the JSON profile on stdout; text: the PipeDream text on "
        "stdout; anything else is a file to write, as -o (default: the "
        "JSON profile on stdout)"},
       {"warmup", "N", ""},
       {"iterations", "N", ""},
       {"threads", "T", ""}});
  spec.aliases = {{"o", "output_file"}};
  return spec;
}

// Where the profile goes ("" for stdout) and in which format.
struct Destination {
  std::string path;
  std::string format = "json";
};

// The destination from -o, --output and --format; an error message if they
// contradict each other.
std::optional<std::string> ResolveDestination(const ParsedArgs& parsed,
                                              Destination* d) {
  d->path = absl::GetFlag(FLAGS_output_file);
  const std::string format = absl::GetFlag(FLAGS_format);
  if (!format.empty()) d->format = format;
  if (d->format != "json" && d->format != "pipedream") {
    return "--format must be json or pipedream, got '" + d->format + "'";
  }
  if (parsed.given.count("output") == 0) return std::nullopt;
  const std::string output = absl::GetFlag(FLAGS_output);
  if (output != "json" && output != "text") {
    if (!d->path.empty()) return "give the output file once: -o or --output";
    d->path = output;
    return std::nullopt;
  }
  const std::string wanted = output == "json" ? "json" : "pipedream";
  if (!format.empty() && format != wanted) {
    return "--output " + output + " contradicts --format " + format;
  }
  d->format = wanted;
  return std::nullopt;
}

std::optional<std::string> CheckCounts() {
  if (absl::GetFlag(FLAGS_warmup) < 0) return "--warmup needs an integer >= 0";
  if (absl::GetFlag(FLAGS_iterations) < 1) {
    return "--iterations needs an integer >= 1";
  }
  const int threads = absl::GetFlag(FLAGS_threads);
  if (threads < 0 || threads > 1024) {
    return "--threads needs an integer in [1, 1024]";
  }
  return std::nullopt;
}

absl::StatusOr<ModelProfile> Measure(const std::string& job) {
  auto spec = LoadJobSpecFile(job);
  if (!spec.ok()) return spec.status();
  ProfilerOptions options;
  options.warmup_iterations = absl::GetFlag(FLAGS_warmup);
  options.measured_iterations = absl::GetFlag(FLAGS_iterations);
  CpuDeviceOptions device_options;
  const int threads = absl::GetFlag(FLAGS_threads);
  device_options.threads =
      threads > 0
          ? threads
          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  CpuDevice device(device_options);
  auto profile = ProfileModel(*spec, &device, options);
  if (!profile.ok()) {
    return absl::Status(
        profile.status().code(),
        absl::StrCat("profile ", job, ": ", profile.status().message()));
  }
  return profile;
}

}  // namespace

int ProfileMain(const std::vector<std::string>& args) {
  const CommandLineSpec spec = ProfileSpec();
  ParsedArgs parsed;
  if (auto code = ParseSubcommand(spec, args, 1, 1, &parsed)) return *code;
  Destination dest;
  std::optional<std::string> error = ResolveDestination(parsed, &dest);
  if (!error) error = CheckCounts();
  if (error) return UsageError(spec, *error);
  if (!dest.path.empty()) {
    if (absl::Status s = CheckWritable(dest.path); !s.ok()) {
      return Fail(std::string(s.message()));
    }
  }
  const auto profile = Measure(parsed.positional[0]);
  if (!profile.ok()) return Fail(std::string(profile.status().message()));
  auto graph = ProfileGraph::FromProto(*profile);
  if (!graph.ok()) return Fail(std::string(graph.status().message()));
  const std::string path = dest.path.empty() ? "/dev/stdout" : dest.path;
  if (absl::Status s = WriteProfileFile(path, *graph, dest.format); !s.ok()) {
    return Fail(std::string(s.message()));
  }
  if (!dest.path.empty()) {
    std::cerr << "profile of " << profile->nodes_size() << " layers on "
              << profile->device() << " (GEMM " << profile->gemm_gflops()
              << " GFLOP/s) written to " << dest.path << "\n";
  }
  return kExitOk;
}

}  // namespace aqueduct
