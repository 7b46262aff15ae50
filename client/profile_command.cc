// aq profile: measures each layer of a job's model on this machine's CPU and
// writes a profile for aq plan.
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "client/commands.h"
#include "client/flags.h"
#include "common/device/cpu_device.h"
#include "coordinator/planner/profile_graph.h"
#include "worker/nn/spec.h"
#include "worker/profiler.h"

namespace aqueduct {
namespace {

constexpr char kProfileUsage[] =
    "usage: aq profile JOB [flags]\n"
    "  measure each layer of JOB's model (forward and backward ms at the\n"
    "  job's batch size, activation and parameter bytes) on this CPU\n"
    "      --output FILE            where to write (default: stdout)\n"
    "      --format json|pipedream  profile format (default json)\n"
    "      --warmup N               unmeasured iterations (default 2)\n"
    "      --iterations N           measured iterations, median (default 5)\n"
    "      --threads T              CPU threads (default: all cores)\n";

}  // namespace

int ProfileMain(const std::vector<std::string>& args) {
  std::string job, output, format = "json";
  ProfilerOptions options;
  int threads = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string v;
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      std::cout << kProfileUsage;
      return 0;
    } else if (TakeValue(args, &i, "--output", &v)) {
      output = v;
    } else if (TakeValue(args, &i, "--format", &v)) {
      if (v != "json" && v != "pipedream") {
        return UsageError("--format must be json or pipedream, got '" + v + "'",
                          kProfileUsage);
      }
      format = v;
    } else if (TakeValue(args, &i, "--warmup", &v)) {
      if (!absl::SimpleAtoi(v, &options.warmup_iterations) ||
          options.warmup_iterations < 0) {
        return UsageError("--warmup needs an integer >= 0", kProfileUsage);
      }
    } else if (TakeValue(args, &i, "--iterations", &v)) {
      if (!absl::SimpleAtoi(v, &options.measured_iterations) ||
          options.measured_iterations < 1) {
        return UsageError("--iterations needs an integer >= 1", kProfileUsage);
      }
    } else if (TakeValue(args, &i, "--threads", &v)) {
      if (!absl::SimpleAtoi(v, &threads) || threads < 1 || threads > 1024) {
        return UsageError("--threads needs an integer in [1, 1024]",
                          kProfileUsage);
      }
    } else if (!a.empty() && a[0] == '-') {
      return UsageError("unknown or incomplete flag '" + a + "'",
                        kProfileUsage);
    } else if (job.empty()) {
      job = a;
    } else {
      return UsageError("unexpected argument '" + a + "'", kProfileUsage);
    }
  }
  if (job.empty()) return UsageError("profile needs a job spec", kProfileUsage);
  auto spec = LoadJobSpecFile(job);
  if (!spec.ok()) {
    std::cerr << "aq: " << spec.status().message() << "\n";
    return 1;
  }
  CpuDeviceOptions device_options;
  device_options.threads =
      threads > 0
          ? threads
          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  CpuDevice device(device_options);
  auto profile = ProfileModel(*spec, &device, options);
  if (!profile.ok()) {
    std::cerr << "aq: profile " << job << ": " << profile.status().message()
              << "\n";
    return 1;
  }
  auto graph = ProfileGraph::FromProto(*profile);
  if (!graph.ok()) {
    std::cerr << "aq: " << graph.status().message() << "\n";
    return 1;
  }
  const std::string path = output.empty() ? "/dev/stdout" : output;
  if (absl::Status s = WriteProfileFile(path, *graph, format); !s.ok()) {
    std::cerr << "aq: " << s.message() << "\n";
    return 1;
  }
  if (!output.empty()) {
    std::cerr << "profile of " << profile->nodes_size() << " layers on "
              << profile->device() << " (GEMM " << profile->gemm_gflops()
              << " GFLOP/s) written to " << output << "\n";
  }
  return 0;
}

}  // namespace aqueduct
