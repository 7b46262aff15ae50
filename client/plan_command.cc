// aq plan: partitions a profiled model over workers (offline, in this
// process), or shows the plan the coordinator made for a job. An argument
// naming an existing file is a profile; any other argument is a job id.
#include <sys/stat.h>

#include <cmath>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/cli.h"
#include "client/commands.h"
#include "client/remote.h"
#include "client/terminal_text.h"
#include "coordinator/planner/plan.h"
#include "coordinator/planner/profile_graph.h"
#include "pipeline/ir/replay.h"
#include "pipeline/policy.h"
#include "worker/nn/spec.h"

ABSL_FLAG(std::vector<std::string>, workers, {},
          "workers per topology level, innermost first (e.g. --workers 8 16: "
          "16 servers of 8)");
ABSL_FLAG(std::vector<std::string>, bandwidth, {},
          "bytes/s per level (default: 1e9 each)");
ABSL_FLAG(std::string, cost_model, "pipedream", "pipedream or aqueduct");
ABSL_FLAG(bool, straight, false, "no replicated stages");
ABSL_FLAG(bool, use_fewer_machines, false, "allow leaving workers idle");
ABSL_FLAG(double, memory_limit, 0,
          "per-worker memory limit in bytes (default: the cost model's)");
ABSL_FLAG(double, activation_compression_ratio, 1,
          "activation compression ratio, pipedream model (default: none)");
ABSL_FLAG(std::vector<std::string>, worker_speeds, {},
          "relative speed of each worker, e.g. 1,1,0.5 (either model: "
          "unequal speeds place the stages; docs/operations.md)");
ABSL_FLAG(std::string, schedule, "1f1b_stashed",
          "1f1b_stashed, 1f1b_vertical_sync, 1f1b_flush, gpipe, zb_h1 or "
          "zb_h2 (aqueduct "
          "model)");
ABSL_FLAG(double, allreduce_overlap, 0,
          "fraction of backward that hides the all-reduce, in [0, 1] "
          "(aqueduct model)");

namespace aqueduct {
namespace {

constexpr char kPlanDescription[] =
    "Offline: partitions a profiled model (aq profile, or a PipeDream\n"
    "profile) into pipeline stages over --workers; the profile is PROFILE or\n"
    "--profile FILE.\n"
    "From the coordinator: aq plan JOB prints the plan it made for a running\n"
    "or finished job.\n"
    "An argument that names an existing file is a profile; any other is a\n"
    "job id.\n";

// The flags that only offline planning takes.
const char* const kOfflineFlags[] = {"profile",
                                     "format",
                                     "workers",
                                     "bandwidth",
                                     "cost_model",
                                     "straight",
                                     "use_fewer_machines",
                                     "memory_limit",
                                     "activation_compression_ratio",
                                     "worker_speeds",
                                     "schedule",
                                     "allreduce_overlap"};

CommandLineSpec PlanSpec() {
  return SubcommandSpec(
      "plan",
      "PROFILE --workers N [N2 ...] [flags]\n   or: aq plan JOB [flags]",
      kPlanDescription,
      {{"profile", "FILE", "the profile (instead of PROFILE)"},
       {"format", "pipedream|json", "profile format (default: by content)"},
       {"workers", "N [N2 ...]", ""},
       {"bandwidth", "B [B2 ...]", ""},
       {"cost_model", "pipedream|aqueduct", ""},
       {"straight", "", ""},
       {"use_fewer_machines", "", ""},
       {"memory_limit", "BYTES", ""},
       {"activation_compression_ratio", "C", ""},
       {"worker_speeds", "S1,S2,...", ""},
       {"schedule", "NAME", ""},
       {"allreduce_overlap", "F", ""},
       {"coordinator", "HOST:PORT", "the coordinator, for aq plan JOB"},
       OutputFlag()});
}

bool IsFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && !S_ISDIR(st.st_mode);
}

bool Positive(double v) { return v > 0 && std::isfinite(v); }

// Appends the --workers / --bandwidth levels; an error message if bad.
std::optional<std::string> AddLevels(PlanRequest* request) {
  const std::vector<std::string> workers = absl::GetFlag(FLAGS_workers);
  const std::vector<std::string> bandwidths = absl::GetFlag(FLAGS_bandwidth);
  if (workers.empty()) return "--workers is required";
  if (!bandwidths.empty() && bandwidths.size() != workers.size()) {
    return absl::StrCat("--bandwidth has ", bandwidths.size(), " values for ",
                        workers.size(), " levels of --workers");
  }
  for (size_t l = 0; l < workers.size(); ++l) {
    PlannerLevel level;
    if (!absl::SimpleAtoi(workers[l], &level.workers) || level.workers < 1 ||
        level.workers > 1 << 20) {
      return "--workers needs positive integers, got '" + workers[l] + "'";
    }
    if (!bandwidths.empty() &&
        (!absl::SimpleAtod(bandwidths[l], &level.bandwidth_bytes_per_s) ||
         !Positive(level.bandwidth_bytes_per_s))) {
      return "--bandwidth needs positive numbers, got '" + bandwidths[l] + "'";
    }
    request->levels.push_back(level);
  }
  return std::nullopt;
}

// The cost-model options from the flags; an error message if bad.
std::optional<std::string> AddModelOptions(const ParsedArgs& parsed,
                                           PlanRequest* request) {
  auto cost_model = ParseCostModel(absl::GetFlag(FLAGS_cost_model));
  if (!cost_model.ok()) {
    return absl::StrCat("--cost_model: ", cost_model.status().message());
  }
  auto schedule = ParseSchedule(absl::GetFlag(FLAGS_schedule));
  if (!schedule.ok()) {
    return absl::StrCat("--schedule: ", schedule.status().message());
  }
  request->cost_model = *cost_model;
  request->schedule = *schedule;
  request->straight_pipeline = absl::GetFlag(FLAGS_straight);
  request->use_fewer_machines = absl::GetFlag(FLAGS_use_fewer_machines);
  request->allreduce_overlap = absl::GetFlag(FLAGS_allreduce_overlap);
  if (parsed.given.count("memory_limit") > 0) {
    request->memory_limit_bytes = absl::GetFlag(FLAGS_memory_limit);
    if (!Positive(*request->memory_limit_bytes)) {
      return "--memory_limit needs a positive number of bytes";
    }
  }
  if (parsed.given.count("activation_compression_ratio") > 0) {
    request->activation_compression_ratio =
        absl::GetFlag(FLAGS_activation_compression_ratio);
    if (!Positive(*request->activation_compression_ratio)) {
      return "--activation_compression_ratio needs a positive number";
    }
  }
  for (const std::string& part : absl::GetFlag(FLAGS_worker_speeds)) {
    double speed;
    if (!absl::SimpleAtod(part, &speed) || !Positive(speed)) {
      return "--worker_speeds needs positive numbers, got '" + part + "'";
    }
    request->worker_speed.push_back(speed);
  }
  return std::nullopt;
}

void PrintPlan(const PartitionPlan& plan) {
  if (JsonOutput()) {
    std::cout << ProtoJson(plan, /*print_defaults=*/true) << std::endl;
  } else {
    // Node and worker ids come from profiles and workers.
    std::cout << PrintableLines(FormatPlan(plan));
  }
}

// The plan's schedule as a per-rank grid of one minibatch at the plan's
// costs (the simulator's, as `aq schedule` prints it); empty for a plan
// without one (a stashing schedule, or a plan from before decisions).
std::string ScheduleGrid(const PartitionPlan& plan) {
  if (plan.pipeline().predicted_step_s() <= 0) return "";
  const absl::StatusOr<ir::Simulation> sim = SimulateDecision(plan);
  if (!sim.ok()) return "";
  const int tensor = plan.pipeline().tensor_parallel();
  return absl::StrCat(
      tensor > 1 ? absl::StrCat("one minibatch, per pipeline position (a "
                                "tensor group of ",
                                tensor, " workers each; ")
                 : std::string("one minibatch, per worker ("),
      "F, B; I and W where split):\n", ir::TimeGrid(*sim));
}

int OfflinePlan(const CommandLineSpec& spec, const ParsedArgs& parsed,
                const std::string& profile) {
  if (profile.empty()) {
    return UsageError(spec, "needs a profile (PROFILE or --profile FILE)");
  }
  PlanRequest request;
  std::optional<std::string> error = AddLevels(&request);
  if (!error) error = AddModelOptions(parsed, &request);
  if (error) return UsageError(spec, *error);
  auto graph = ReadProfileFile(profile, absl::GetFlag(FLAGS_format));
  if (!graph.ok() && LoadJobSpecFile(profile).ok()) {
    return Fail(profile +
                " is a job spec, not a profile: profile it first (aq "
                "profile " +
                profile +
                " -o PROFILE), then aq plan PROFILE "
                "--workers N");
  }
  if (!graph.ok()) return Fail(std::string(graph.status().message()));
  auto plan = MakePlan(*graph, request);
  if (!plan.ok()) {
    return Fail(absl::StrCat("plan: ", plan.status().message()));
  }
  PrintPlan(*plan);
  return kExitOk;
}

int RemotePlan(const CommandLineSpec& spec, const ParsedArgs& parsed,
               const std::string& job) {
  for (const char* flag : kOfflineFlags) {
    if (parsed.given.count(flag) > 0) {
      return UsageError(spec,
                        absl::StrCat("--", flag, " plans a profile, but '", job,
                                     "' is not a file (a job id "
                                     "takes only --coordinator and "
                                     "--output)"));
    }
  }
  Remote remote;
  v1::GetPlanRequest request;
  request.set_job_id(job);
  const auto plan = remote.client().GetPlan(request, kQueryTimeout);
  if (!plan.ok()) return remote.Failed(plan.status());
  PrintPlan(*plan);
  if (!JsonOutput()) std::cout << ScheduleGrid(*plan);
  return kExitOk;
}

}  // namespace

int PlanMain(const std::vector<std::string>& args) {
  const CommandLineSpec spec = PlanSpec();
  ParsedArgs parsed;
  if (auto code = ParseSubcommand(spec, args, 0, 1, &parsed)) return *code;
  const std::string flag_profile = absl::GetFlag(FLAGS_profile);
  if (parsed.positional.empty()) return OfflinePlan(spec, parsed, flag_profile);
  const std::string& arg = parsed.positional[0];
  if (!IsFile(arg)) return RemotePlan(spec, parsed, arg);
  if (!flag_profile.empty()) {
    return UsageError(spec, "give the profile once: '" + arg +
                                "' or --profile " + flag_profile);
  }
  return OfflinePlan(spec, parsed, arg);
}

}  // namespace aqueduct
