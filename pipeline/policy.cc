#include "pipeline/policy.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "pipeline/ir/lower.h"
#include "pipeline/ir/replay.h"

namespace aqueduct {

namespace {

absl::Status NotOneOf(const char* field, const std::string& name,
                      const char* allowed) {
  return absl::InvalidArgumentError(absl::StrCat("pipeline.", field, "='", name,
                                                 "' is not one of: ", allowed));
}

}  // namespace

absl::StatusOr<Schedule> ParseSchedule(const std::string& name) {
  if (name.empty() || name == "1f1b_stashed") return v1::SCHEDULE_1F1B_STASHED;
  if (name == "1f1b_vertical_sync") return v1::SCHEDULE_1F1B_VERTICAL_SYNC;
  if (name == "1f1b_flush") return v1::SCHEDULE_1F1B_FLUSH;
  if (name == "gpipe") return v1::SCHEDULE_GPIPE;
  if (name == "zb_h1") return v1::SCHEDULE_ZB_H1;
  if (name == "zb_h2") return v1::SCHEDULE_ZB_H2;
  if (name == "2bw") return v1::SCHEDULE_2BW;
  if (name == "interleaved_1f1b") return v1::SCHEDULE_INTERLEAVED_1F1B;
  if (name == "zb_v") return v1::SCHEDULE_ZB_V;
  if (name == "auto") return v1::SCHEDULE_AUTO;
  if (name == "custom") return v1::SCHEDULE_CUSTOM;
  return NotOneOf("schedule", name,
                  "1f1b_stashed, 1f1b_vertical_sync, 1f1b_flush, gpipe, "
                  "zb_h1, zb_h2, 2bw, interleaved_1f1b, zb_v, auto, custom");
}

absl::StatusOr<Transport> ParseTransport(const std::string& name) {
  if (name.empty() || name == "gloo") return v1::TRANSPORT_GLOO;
  if (name == "nccl") return v1::TRANSPORT_NCCL;
  return NotOneOf("transport", name, "gloo, nccl");
}

absl::StatusOr<CostModel> ParseCostModel(const std::string& name) {
  if (name.empty() || name == "pipedream") return v1::COST_MODEL_PIPEDREAM;
  if (name == "aqueduct") return v1::COST_MODEL_AQUEDUCT;
  return NotOneOf("cost_model", name, "pipedream, aqueduct");
}

absl::StatusOr<Topology> ParseTopology(const std::string& name) {
  if (name.empty() || name == "flat") return v1::TOPOLOGY_FLAT;
  if (name == "measured") return v1::TOPOLOGY_MEASURED;
  return NotOneOf("topology", name, "flat, measured");
}

const char* ScheduleName(Schedule schedule) {
  switch (schedule) {
    case v1::SCHEDULE_UNSPECIFIED:
    case v1::SCHEDULE_1F1B_STASHED:
      return "1f1b_stashed";
    case v1::SCHEDULE_1F1B_VERTICAL_SYNC:
      return "1f1b_vertical_sync";
    case v1::SCHEDULE_1F1B_FLUSH:
      return "1f1b_flush";
    case v1::SCHEDULE_GPIPE:
      return "gpipe";
    case v1::SCHEDULE_ZB_H1:
      return "zb_h1";
    case v1::SCHEDULE_ZB_H2:
      return "zb_h2";
    case v1::SCHEDULE_2BW:
      return "2bw";
    case v1::SCHEDULE_INTERLEAVED_1F1B:
      return "interleaved_1f1b";
    case v1::SCHEDULE_ZB_V:
      return "zb_v";
    case v1::SCHEDULE_AUTO:
      return "auto";
    case v1::SCHEDULE_CUSTOM:
      return "custom";
    default:
      return "?";
  }
}

const char* TransportName(Transport transport) {
  switch (transport) {
    case v1::TRANSPORT_UNSPECIFIED:
    case v1::TRANSPORT_GLOO:
      return "gloo";
    case v1::TRANSPORT_NCCL:
      return "nccl";
    default:
      return "?";
  }
}

const char* CostModelName(CostModel cost_model) {
  switch (cost_model) {
    case v1::COST_MODEL_UNSPECIFIED:
    case v1::COST_MODEL_PIPEDREAM:
      return "pipedream";
    case v1::COST_MODEL_AQUEDUCT:
      return "aqueduct";
    default:
      return "?";
  }
}

const char* TopologyName(Topology topology) {
  switch (topology) {
    case v1::TOPOLOGY_UNSPECIFIED:
    case v1::TOPOLOGY_FLAT:
      return "flat";
    case v1::TOPOLOGY_MEASURED:
      return "measured";
    default:
      return "?";
  }
}

bool StashesWeights(Schedule schedule) {
  return schedule == v1::SCHEDULE_1F1B_STASHED ||
         schedule == v1::SCHEDULE_1F1B_VERTICAL_SYNC ||
         schedule == v1::SCHEDULE_UNSPECIFIED || schedule == v1::SCHEDULE_2BW;
}

bool SplitsMinibatches(Schedule schedule) {
  return Flushes(schedule) || schedule == v1::SCHEDULE_2BW;
}

bool Flushes(Schedule schedule) {
  return schedule == v1::SCHEDULE_1F1B_FLUSH ||
         schedule == v1::SCHEDULE_GPIPE ||
         schedule == v1::SCHEDULE_INTERLEAVED_1F1B ||
         schedule == v1::SCHEDULE_AUTO || schedule == v1::SCHEDULE_CUSTOM ||
         SplitsBackward(schedule);
}

bool SplitsBackward(Schedule schedule) {
  return schedule == v1::SCHEDULE_ZB_H1 || schedule == v1::SCHEDULE_ZB_H2 ||
         schedule == v1::SCHEDULE_ZB_V;
}

bool HoldsChunks(Schedule schedule) {
  return schedule == v1::SCHEDULE_INTERLEAVED_1F1B ||
         schedule == v1::SCHEDULE_ZB_V || schedule == v1::SCHEDULE_CUSTOM;
}

absl::StatusOr<ir::Program> CustomProgram(const v1::PipelineSpec& p) {
  if (p.schedule_program().size() > kMaxScheduleProgramBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline.schedule_program has ", p.schedule_program().size(),
        " bytes, more than ", kMaxScheduleProgramBytes));
  }
  absl::StatusOr<ir::Program> program = ir::ParseProgram(p.schedule_program());
  if (!program.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline.schedule_program: ", program.status().message()));
  }
  const ir::Program lowered =
      ir::IsComputeOnly(*program) ? ir::Lower(*program) : *program;
  if (absl::Status valid = ir::Validate(lowered); !valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline.schedule_program: ", valid.message()));
  }
  return lowered;
}

bool CheckpointDue(int64_t version, int64_t total, int64_t every,
                   const std::atomic<int64_t>* at) {
  const bool due =
      (every > 0 && version % every == 0) ||
      (at != nullptr && version == at->load(std::memory_order_relaxed));
  return due && version < total;
}

double StalenessLrScale(int64_t delay, int64_t step, int64_t warmup_steps) {
  if (delay <= 1 || warmup_steps <= 0 || step >= warmup_steps) return 1.0;
  const double power =
      1.0 - static_cast<double>(step) / static_cast<double>(warmup_steps);
  return std::pow(static_cast<double>(delay), -power);
}

namespace {

// The PipeMare warm-up of `p` (0: no correction), checked.
absl::StatusOr<int64_t> StalenessCorrection(const v1::PipelineSpec& p,
                                            Schedule schedule) {
  const std::string& name = p.staleness_correction();
  if (name.empty() || name == "none") {
    if (p.staleness_warmup_steps() != 0) {
      return absl::InvalidArgumentError(
          "pipeline.staleness_warmup_steps needs pipeline.staleness_"
          "correction \"pipemare_lr\"");
    }
    return 0;
  }
  if (name != "pipemare_lr") {
    return NotOneOf("staleness_correction", name, "none, pipemare_lr");
  }
  if (!StashesWeights(schedule)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline.staleness_correction applies to the schedules with stale "
        "weights (1f1b_stashed, 1f1b_vertical_sync, 2bw), not ",
        ScheduleName(schedule)));
  }
  const int64_t k = p.staleness_warmup_steps();
  if (k < 0 || k > (int64_t{1} << 40)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline.staleness_warmup_steps=", k, " must be in [0, 2^40]"));
  }
  return k == 0 ? 1000 : k;
}

// pipeline.chunks with its default, checked against the schedule.
absl::StatusOr<int> ChunksOf(const v1::PipelineSpec& p, Schedule schedule) {
  const int chunks = p.chunks();
  if (schedule == v1::SCHEDULE_ZB_V) {
    if (chunks != 0 && chunks != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pipeline.chunks=", chunks, ": zb_v holds 2 chunks per worker"));
    }
    return 2;
  }
  if (schedule == v1::SCHEDULE_INTERLEAVED_1F1B) {
    if (chunks < 0 || chunks > kMaxChunks) {
      return absl::InvalidArgumentError(
          absl::StrCat("pipeline.chunks=", chunks, " must be in [1, ",
                       kMaxChunks, "] (0: the default 2)"));
    }
    return chunks == 0 ? 2 : chunks;
  }
  if (chunks > 1 || chunks < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline.chunks=", chunks, ": ", ScheduleName(schedule),
        " holds one chunk per worker; interleaved_1f1b and zb_v hold more"));
  }
  return 1;
}

// A schedule program: the job's workers, chunks and microbatches are the
// program's (the spec's, when set, must agree).
absl::Status ApplyProgram(const v1::PipelineSpec& p, PipelinePolicy* policy) {
  if (!p.schedule_file().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline.schedule_file='", p.schedule_file(),
        "' is read by aq submit and aq train-local; a job sent otherwise "
        "carries the program's text in pipeline.schedule_program"));
  }
  const bool custom = policy->schedule == v1::SCHEDULE_CUSTOM;
  if (p.schedule_program().empty()) {
    if (!custom) return absl::OkStatus();
    return absl::InvalidArgumentError(
        "pipeline.schedule='custom' needs pipeline.schedule_file (or "
        "schedule_program)");
  }
  if (!custom && !p.schedule().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline.schedule='", p.schedule(),
        "' with a schedule program: leave it unset or set 'custom'"));
  }
  ASSIGN_OR_RETURN(const ir::Program program, CustomProgram(p));
  const int ranks = program.layout.ranks;
  if (p.workers() > 0 && p.workers() != ranks) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline.workers=", p.workers(),
                     ": the schedule program "
                     "has ",
                     ranks, " ranks"));
  }
  if (p.microbatches() > 0 && p.microbatches() != program.microbatches) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline.microbatches=", p.microbatches(),
                     ": the schedule program has ", program.microbatches));
  }
  if (p.chunks() > 0 && p.chunks() != program.layout.stages_per_rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline.chunks=", p.chunks(), ": the schedule program holds ",
        program.layout.stages_per_rank, " per rank"));
  }
  policy->schedule = v1::SCHEDULE_CUSTOM;
  policy->workers = ranks;
  policy->microbatches = program.microbatches;
  policy->chunks = program.layout.stages_per_rank;
  policy->v_placement = program.layout.placement == ir::Placement::kV;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PipelinePolicy> ResolvePipeline(const JobSpec& spec) {
  const v1::PipelineSpec& p = spec.pipeline();
  PipelinePolicy policy;
  ASSIGN_OR_RETURN(policy.schedule, ParseSchedule(p.schedule()));
  ASSIGN_OR_RETURN(policy.transport, ParseTransport(p.transport()));
  ASSIGN_OR_RETURN(policy.cost_model, ParseCostModel(p.cost_model()));
  ASSIGN_OR_RETURN(policy.topology, ParseTopology(p.topology()));
  ASSIGN_OR_RETURN(policy.pipemare_warmup_steps,
                   StalenessCorrection(p, policy.schedule));
  if (p.workers() < 0 || p.workers() > kMaxJobWorkers) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline.workers=", p.workers(), " must be in [1, ",
                     kMaxJobWorkers, "]"));
  }
  policy.workers = std::max(1, p.workers());
  if (p.wait_for_workers_ms() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline.wait_for_workers_ms=", p.wait_for_workers_ms(),
                     " must not be negative"));
  }
  policy.wait_for_workers = absl::Milliseconds(p.wait_for_workers_ms());
  const double bw = p.bandwidth_bytes_per_s();
  if (!(bw >= 0) || !std::isfinite(bw)) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline.bandwidth_bytes_per_s=", bw,
                     " must be positive and finite (0: the default 1e9)"));
  }
  if (bw > 0) policy.bandwidth_bytes_per_s = bw;
  if (p.microbatches() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline.microbatches=", p.microbatches(), " must not be negative"));
  }
  policy.microbatches = p.microbatches();
  if (p.tensor_parallel() < 0 || p.tensor_parallel() > kMaxTensorParallel) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline.tensor_parallel=", p.tensor_parallel(),
                     " must be in [1, ", kMaxTensorParallel, "] (0: 1)"));
  }
  policy.tensor_parallel = p.tensor_parallel();
  policy.sequence_parallel = p.sequence_parallel();
  policy.straight = p.straight() || !p.stages().empty();
  if (spec.data().has_text()) policy.positions = spec.data().text().context();
  policy.recompute_fixed = !p.recompute().empty() && p.recompute() != "auto";
  ASSIGN_OR_RETURN(policy.recompute,
                   ParseRecompute(policy.recompute_fixed ? p.recompute() : "",
                                  "pipeline.recompute"));
  RETURN_IF_ERROR(ApplyProgram(p, &policy));
  if (policy.schedule != v1::SCHEDULE_CUSTOM) {
    ASSIGN_OR_RETURN(policy.chunks, ChunksOf(p, policy.schedule));
  }
  if (policy.microbatches > 0 && spec.batch_size() > 0 &&
      SplitsMinibatches(policy.schedule) &&
      spec.batch_size() % policy.microbatches != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline.microbatches=", policy.microbatches,
                     " does not divide batch_size=", spec.batch_size()));
  }
  return policy;
}

absl::StatusOr<int> MicrobatchesFor(const PipelinePolicy& policy,
                                    int64_t batch_size, int workers) {
  if (!SplitsMinibatches(policy.schedule)) return 1;
  const bool multiple = policy.schedule == v1::SCHEDULE_INTERLEAVED_1F1B;
  if (policy.microbatches <= 0 && batch_size > 0) {
    // Unset: the smallest divisor of the batch that gives every worker a
    // microbatch (the batch itself when it has fewer samples than
    // workers), so that a restart onto fewer workers never fails on a
    // number the user did not set.
    // Interleaved 1F1B takes microbatches a round of workers at a time.
    const int64_t step = multiple ? std::max(1, workers) : 1;
    for (int64_t micro = std::max(1, workers); micro < batch_size;
         micro += step) {
      if (batch_size % micro == 0) return static_cast<int>(micro);
    }
    if (multiple && batch_size % std::max(1, workers) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "interleaved_1f1b needs microbatches that are a multiple of the ",
          workers, " workers and divide batch_size=", batch_size,
          "; there are none"));
    }
    return static_cast<int>(std::min<int64_t>(batch_size, kMaxJobWorkers));
  }
  const int micro = policy.microbatches;
  if (micro <= 0 || batch_size % micro != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline.microbatches=", micro,
                     " does not divide batch_size=", batch_size));
  }
  if (multiple && micro % std::max(1, workers) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline.microbatches=", micro,
        ": interleaved_1f1b takes microbatches a round of workers at a "
        "time, so they must be a multiple of the ",
        workers, " workers (Megatron-LM's rule)"));
  }
  return micro;
}

absl::StatusOr<int64_t> TotalSteps(const JobSpec& spec, int64_t train_samples) {
  if (spec.batch_size() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_size=", spec.batch_size(), " must be positive"));
  }
  const int64_t per_epoch = train_samples / spec.batch_size();
  int64_t total = std::numeric_limits<int64_t>::max();
  if (spec.epochs() > 0) {
    total = per_epoch > std::numeric_limits<int64_t>::max() / spec.epochs()
                ? std::numeric_limits<int64_t>::max()
                : spec.epochs() * per_epoch;
  }
  if (spec.max_steps() > 0) total = std::min(total, spec.max_steps());
  if (total <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch_size=", spec.batch_size(), " is larger than the training set (",
        train_samples, " samples)"));
  }
  return total;
}

}  // namespace aqueduct
