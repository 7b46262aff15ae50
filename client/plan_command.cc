// aq plan: partitions a profiled model over workers.
#include <cmath>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/commands.h"
#include "client/flags.h"
#include "coordinator/planner/plan.h"
#include "coordinator/planner/profile_graph.h"
#include "google/protobuf/util/json_util.h"

namespace aqueduct {
namespace {

constexpr char kPlanUsage[] =
    "usage: aq plan --profile FILE --workers N [N2 ...] [flags]\n"
    "  partition a profiled model into pipeline stages\n"
    "      --profile FILE           PipeDream text profile or Aqueduct JSON\n"
    "      --format pipedream|json  profile format (default: by content)\n"
    "      --workers N [N2 ...]     workers per topology level, innermost\n"
    "                               first (e.g. --workers 8 16: 16 servers\n"
    "                               of 8)\n"
    "      --bandwidth B [B2 ...]   bytes/s per level (default 1e9 each)\n"
    "      --cost-model pipedream|aqueduct   (default pipedream)\n"
    "      --straight               no replicated stages\n"
    "      --use-fewer-machines     allow leaving workers idle\n"
    "      --memory-limit BYTES     per-worker memory limit\n"
    "      --activation-compression-ratio C  (pipedream model)\n"
    "      --worker-speeds S1,S2,...         relative speed of each worker\n"
    "                                        (aqueduct model)\n"
    "      --schedule NAME          1f1b_stashed (default), "
    "1f1b_vertical_sync,\n"
    "                               1f1b_flush, gpipe (aqueduct model)\n"
    "      --allreduce-overlap F    fraction of backward that hides the\n"
    "                               all-reduce, in [0, 1] (aqueduct model)\n"
    "      --output text|json       (default text)\n";

bool ParsePositive(const std::string& s, double* v) {
  return absl::SimpleAtod(s, v) && *v > 0 && std::isfinite(*v);
}

}  // namespace

int PlanMain(const std::vector<std::string>& args) {
  std::string profile, format, output = "text";
  PlanRequest request;
  std::vector<std::string> workers, bandwidths;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string v;
    std::vector<std::string> vs;
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      std::cout << kPlanUsage;
      return 0;
    } else if (TakeValue(args, &i, "--profile", &v)) {
      profile = v;
    } else if (TakeValue(args, &i, "--format", &v)) {
      format = v;
    } else if (TakeValues(args, &i, "--workers", &vs)) {
      workers = vs;
    } else if (TakeValues(args, &i, "--bandwidth", &vs)) {
      bandwidths = vs;
    } else if (TakeValue(args, &i, "--cost-model", &v)) {
      request.cost_model = v;
    } else if (a == "--straight") {
      request.straight_pipeline = true;
    } else if (a == "--use-fewer-machines") {
      request.use_fewer_machines = true;
    } else if (TakeValue(args, &i, "--memory-limit", &v)) {
      double bytes;
      if (!ParsePositive(v, &bytes)) {
        return UsageError(
            "--memory-limit needs a positive number of bytes, "
            "got '" +
                v + "'",
            kPlanUsage);
      }
      request.memory_limit_bytes = bytes;
    } else if (TakeValue(args, &i, "--activation-compression-ratio", &v)) {
      double c;
      if (!ParsePositive(v, &c)) {
        return UsageError(
            "--activation-compression-ratio needs a positive "
            "number, got '" +
                v + "'",
            kPlanUsage);
      }
      request.activation_compression_ratio = c;
    } else if (TakeValue(args, &i, "--worker-speeds", &v)) {
      for (const std::string& part :
           std::vector<std::string>(absl::StrSplit(v, ','))) {
        double s;
        if (!ParsePositive(part, &s)) {
          return UsageError(
              "--worker-speeds needs positive numbers, got '" + part + "'",
              kPlanUsage);
        }
        request.worker_speed.push_back(s);
      }
    } else if (TakeValue(args, &i, "--schedule", &v)) {
      request.schedule = v;
    } else if (TakeValue(args, &i, "--allreduce-overlap", &v)) {
      if (!absl::SimpleAtod(v, &request.allreduce_overlap)) {
        return UsageError("--allreduce-overlap needs a number, got '" + v + "'",
                          kPlanUsage);
      }
    } else if (TakeValue(args, &i, "--output", &v)) {
      if (v != "text" && v != "json") {
        return UsageError("--output must be text or json, got '" + v + "'",
                          kPlanUsage);
      }
      output = v;
    } else {
      return UsageError("unknown or incomplete flag '" + a + "'", kPlanUsage);
    }
  }
  if (profile.empty()) return UsageError("--profile is required", kPlanUsage);
  if (workers.empty()) return UsageError("--workers is required", kPlanUsage);
  if (!bandwidths.empty() && bandwidths.size() != workers.size()) {
    return UsageError(
        absl::StrCat("--bandwidth has ", bandwidths.size(), " values for ",
                     workers.size(), " levels of --workers"),
        kPlanUsage);
  }
  for (size_t l = 0; l < workers.size(); ++l) {
    PlannerLevel level;
    if (!absl::SimpleAtoi(workers[l], &level.workers) || level.workers < 1 ||
        level.workers > 1 << 20) {
      return UsageError(
          "--workers needs positive integers, got '" + workers[l] + "'",
          kPlanUsage);
    }
    if (!bandwidths.empty() &&
        !ParsePositive(bandwidths[l], &level.bandwidth_bytes_per_s)) {
      return UsageError(
          "--bandwidth needs positive numbers, got '" + bandwidths[l] + "'",
          kPlanUsage);
    }
    request.levels.push_back(level);
  }

  auto graph = ReadProfileFile(profile, format);
  if (!graph.ok()) {
    std::cerr << "aq: " << graph.status().message() << "\n";
    return 1;
  }
  auto plan = MakePlan(*graph, request);
  if (!plan.ok()) {
    std::cerr << "aq: plan: " << plan.status().message() << "\n";
    return 1;
  }
  if (output == "json") {
    std::string json;
    google::protobuf::util::JsonPrintOptions options;
    options.preserve_proto_field_names = true;
    options.always_print_primitive_fields = true;
    (void)google::protobuf::util::MessageToJsonString(*plan, &json, options);
    std::cout << json << std::endl;
  } else {
    std::cout << FormatPlan(*plan);
  }
  return 0;
}

}  // namespace aqueduct
