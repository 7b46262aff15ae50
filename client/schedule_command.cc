// aq schedule: a pipeline schedule as its per-rank actions (the action IR,
// pipeline/ir/), checked by the validator and timed by the simulator,
// offline. NAME is a schedule (or "all": every one side by side); FILE is
// a schedule file, one of aq schedule -o's or a user's own (compute-only
// files are lowered first).
#include <sys/stat.h>

#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/cli.h"
#include "client/commands.h"
#include "common/file_system.h"
#include "pipeline/ir/action.h"
#include "pipeline/ir/generate.h"
#include "pipeline/ir/lower.h"
#include "pipeline/ir/replay.h"

ABSL_FLAG(int32_t, ranks, 4, "pipeline ranks (workers)");
ABSL_FLAG(int32_t, microbatches, 8, "microbatches per minibatch");
ABSL_FLAG(int32_t, chunks, 2, "model chunks per rank (interleaved_1f1b)");
ABSL_FLAG(std::string, costs, "1,2,1,1",
          "F,B,I,W: the time of each, for one rank's share of the model");
ABSL_FLAG(double, transfer, 0, "the time from a send to its receive");
ABSL_FLAG(bool, grid, true, "print the timeline, one line per rank");

namespace aqueduct {
namespace {

using ir::ScheduleKind;

constexpr char kDescription[] =
    "Shows a pipeline schedule as each rank's actions over time, with its\n"
    "step time, bubble and peak activations from the simulator (offline).\n"
    "NAME: gpipe, 1f1b_flush, interleaved_1f1b, zb_h1, zb_h2, zb_v, or all\n"
    "(a table of every one). FILE: a schedule file (aq schedule NAME -o\n"
    "FILE writes one), checked by the validator: a compute-only file (F, B,\n"
    "I, W) gets its sends, receives and steps added first. Costs are for\n"
    "one rank's share of the model; a chunk costs its share of them.\n";

CommandLineSpec Spec() {
  CommandLineSpec spec =
      SubcommandSpec("schedule", "NAME|FILE [flags]", kDescription,
                     {{"ranks", "P", ""},
                      {"microbatches", "M", ""},
                      {"chunks", "V", ""},
                      {"costs", "F,B,I,W", ""},
                      {"transfer", "T", ""},
                      {"grid", "", ""},
                      {"output_file", "FILE",
                       "write the schedule file (with its "
                       "communication) to FILE"},
                      OutputFlag()});
  spec.aliases = {{"o", "output_file"}};
  return spec;
}

absl::StatusOr<ir::ActionCosts> Costs() {
  const std::string text = absl::GetFlag(FLAGS_costs);
  std::vector<std::string> parts = absl::StrSplit(text, ',');
  ir::ActionCosts c;
  double* fields[] = {&c.f, &c.b, &c.i, &c.w};
  if (parts.size() != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("--costs needs 4 numbers F,B,I,W, got \"", text, "\""));
  }
  for (size_t k = 0; k < 4; ++k) {
    if (!absl::SimpleAtod(parts[k], fields[k]) || !(*fields[k] > 0) ||
        *fields[k] > 1e12) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--costs needs positive numbers, got \"", parts[k], "\""));
    }
  }
  c.transfer = absl::GetFlag(FLAGS_transfer);
  if (!(c.transfer >= 0) || c.transfer > 1e12) {
    return absl::InvalidArgumentError("--transfer must be 0 or more");
  }
  return c;
}

absl::StatusOr<ir::Program> Generated(ScheduleKind kind) {
  ir::ScheduleShape shape;
  shape.ranks = absl::GetFlag(FLAGS_ranks);
  shape.microbatches = absl::GetFlag(FLAGS_microbatches);
  shape.chunks = kind == ScheduleKind::kInterleaved1F1B
                     ? absl::GetFlag(FLAGS_chunks)
                 : kind == ScheduleKind::kZbV ? 2
                                              : 1;
  if (shape.ranks > 1024 || shape.microbatches > 4096 || shape.chunks > 64 ||
      int64_t{shape.ranks} * shape.chunks * shape.microbatches >
          ir::kMaxStageMicrobatches) {
    return absl::InvalidArgumentError(absl::StrCat(
        "at most 1024 ranks, 4096 microbatches and 64 chunks, and ranks x "
        "chunks x microbatches at most ",
        ir::kMaxStageMicrobatches));
  }
  absl::StatusOr<ir::Program> compute = ir::ComputeSchedule(kind, shape);
  if (!compute.ok()) return compute.status();
  return ir::Lower(*compute);
}

// The program of `arg`: a schedule's name, else a file.
absl::StatusOr<ir::Program> ProgramOf(const std::string& arg) {
  absl::StatusOr<ScheduleKind> kind = ir::ParseScheduleKind(arg);
  if (kind.ok()) return Generated(*kind);
  struct stat st;
  if (stat(arg.c_str(), &st) != 0) return kind.status();
  absl::StatusOr<std::string> text =
      ReadRegularFile(arg, PathRoots::Anywhere(), "schedule file", 16 << 20,
                      "16 MiB for a schedule file");
  if (!text.ok()) return text.status();
  absl::StatusOr<ir::Program> program = ir::ParseProgram(*text);
  if (!program.ok()) return program.status();
  if (ir::IsComputeOnly(*program)) *program = ir::Lower(*program);
  if (absl::Status s = ir::Validate(*program); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(arg, " does not validate: ", s.message()));
  }
  return program;
}

std::string Peaks(const ir::Simulation& s) {
  return absl::StrJoin(s.peak_activations, " ", [](std::string* out, double v) {
    absl::StrAppend(out, absl::StrFormat("%g", v));
  });
}

std::string Json(const std::string& name, const ir::Program& p,
                 const ir::Simulation& s) {
  return absl::StrFormat(
      "{\"schedule\":%s,\"ranks\":%d,\"stages_per_rank\":%d,"
      "\"placement\":\"%s\",\"microbatches\":%d,\"step_time\":%g,"
      "\"makespan\":%g,\"bubble\":%g,\"peak_activations\":[%s]}",
      JsonString(name), p.layout.ranks, p.layout.stages_per_rank,
      ir::PlacementName(p.layout.placement), p.microbatches, s.step_time,
      s.makespan, s.bubble, absl::StrJoin(s.peak_activations, ","));
}

void PrintText(const std::string& name, const ir::Program& p,
               const ir::Simulation& s) {
  std::cout << absl::StrFormat(
      "%s: %d ranks, %d microbatches, %d stage(s) per rank (%s)\n"
      "step time %g, bubble %.2f%%, peak activations per rank %s\n",
      name, p.layout.ranks, p.microbatches, p.layout.stages_per_rank,
      ir::PlacementName(p.layout.placement), s.step_time, 100 * s.bubble,
      Peaks(s));
  if (absl::GetFlag(FLAGS_grid)) std::cout << ir::TimeGrid(s);
}

// aq schedule all: one line per schedule.
int PrintAll(const ir::ActionCosts& costs) {
  std::vector<std::string> json;
  if (!JsonOutput()) {
    std::cout << absl::StrFormat("%-18s %10s %8s  %s\n", "schedule",
                                 "step time", "bubble", "peak activations");
  }
  for (ScheduleKind kind : ir::AllScheduleKinds()) {
    const std::string name = ir::ScheduleKindName(kind);
    absl::StatusOr<ir::Program> p = Generated(kind);
    absl::StatusOr<ir::Simulation> s =
        p.ok() ? ir::Simulate(*p, costs) : p.status();
    if (!s.ok()) {
      if (!JsonOutput()) {
        std::cout << absl::StrFormat("%-18s %s\n", name, s.status().message());
      }
      continue;
    }
    if (JsonOutput()) {
      json.push_back(Json(name, *p, *s));
    } else {
      std::cout << absl::StrFormat("%-18s %10g %7.2f%%  %s\n", name,
                                   s->step_time, 100 * s->bubble, Peaks(*s));
    }
  }
  if (JsonOutput()) {
    std::cout << "{\"schedules\":[" << absl::StrJoin(json, ",") << "]}\n";
  }
  return kExitOk;
}

}  // namespace

int ScheduleMain(const std::vector<std::string>& args) {
  const CommandLineSpec spec = Spec();
  ParsedArgs parsed;
  if (auto code = ParseSubcommand(spec, args, 1, 1, &parsed)) return *code;
  absl::StatusOr<ir::ActionCosts> costs = Costs();
  if (!costs.ok())
    return UsageError(spec, std::string(costs.status().message()));
  const std::string& arg = parsed.positional[0];
  if (arg == "all") return PrintAll(*costs);
  absl::StatusOr<ir::Program> program = ProgramOf(arg);
  if (!program.ok()) return Fail(std::string(program.status().message()));
  absl::StatusOr<ir::Simulation> sim = ir::Simulate(*program, *costs);
  if (!sim.ok()) return Fail(std::string(sim.status().message()));
  const std::string out = absl::GetFlag(FLAGS_output_file);
  if (!out.empty()) {
    if (absl::Status s = WriteTextFile(out, ir::ProgramText(*program));
        !s.ok()) {
      return Fail(std::string(s.message()));
    }
  }
  if (JsonOutput()) {
    std::cout << Json(arg, *program, *sim) << std::endl;
  } else {
    PrintText(arg, *program, *sim);
  }
  return kExitOk;
}

}  // namespace aqueduct
