#include "coordinator/planner/plan.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "pipeline/limits.h"
#include "pipeline/policy.h"
#include "pipeline/schedule.h"

namespace aqueduct {

namespace {

void FillLayers(const ProfileGraph& g, const StateSequence& seq,
                PlanStage* stage) {
  int first = -1, last = -1;
  for (int node : seq.NodesOfRange(stage->start(), stage->end())) {
    stage->add_node_ids(g.nodes()[node].id);
    const int layer = g.nodes()[node].layer_index;
    if (layer < 0) continue;
    first = first < 0 ? layer : std::min(first, layer);
    last = std::max(last, layer);
  }
  stage->set_first_layer(first);
  stage->set_end_layer(last < 0 ? -1 : last + 1);
}

double Range(const StateSequence& seq, int a, int b_exclusive,
             double AntichainState::*field) {
  const double hi = seq.states[b_exclusive - 1].*field;
  return a == 0 ? hi : hi - seq.states[a - 1].*field;
}

// A stage as placed by either cost model, before it becomes a PlanStage.
struct Placed {
  int start, end, replicas, first_rank;
  double time, compute, allreduce, transfer, memory;
  int depth;
};

// The levels' workers and links: every count in range and every bandwidth
// finite (a NaN one once planned a job that ran to SUCCEEDED), and the
// product of the counts checked before it is used, since it sizes the
// solvers' tables.
absl::Status ValidateLevels(const std::vector<PlannerLevel>& levels) {
  if (levels.empty()) return absl::InvalidArgumentError("no workers given");
  int64_t total = 1;
  for (size_t l = 0; l < levels.size(); ++l) {
    const std::string field = absl::StrCat("levels[", l, "]");
    RETURN_IF_ERROR(
        CheckInRange(field + ".workers", levels[l].workers, 1, kMaxJobWorkers));
    RETURN_IF_ERROR(CheckFiniteInRange(field + ".bandwidth_bytes_per_s",
                                       levels[l].bandwidth_bytes_per_s, 1,
                                       kMaxBandwidthBytesPerS));
    total = SaturatingMul(total, levels[l].workers);
  }
  if (total > kMaxJobWorkers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the levels' workers multiply to ",
        total == kSaturated ? "more than 2^63" : absl::StrCat(total),
        ", more than ", kMaxJobWorkers));
  }
  return absl::OkStatus();
}

// The request's numbers, before any of them sizes or feeds the solvers:
// finite and in range, named as PlanRequest names them.
absl::Status ValidateRequest(const PlanRequest& r) {
  RETURN_IF_ERROR(ValidateLevels(r.levels));
  if (r.memory_limit_bytes.has_value()) {
    RETURN_IF_ERROR(CheckFiniteInRange("memory_limit_bytes",
                                       *r.memory_limit_bytes, 1, 1e18));
  }
  if (r.activation_compression_ratio.has_value()) {
    RETURN_IF_ERROR(CheckFiniteInRange("activation_compression_ratio",
                                       *r.activation_compression_ratio, 1e-6,
                                       1e6));
  }
  for (size_t i = 0; i < r.worker_speed.size(); ++i) {
    RETURN_IF_ERROR(CheckFiniteInRange(absl::StrCat("worker_speed[", i, "]"),
                                       r.worker_speed[i], 1e-6, 1e6));
  }
  RETURN_IF_ERROR(
      CheckFiniteInRange("allreduce_overlap", r.allreduce_overlap, 0, 1));
  RETURN_IF_ERROR(CheckFiniteInRange("optimizer_state_factor",
                                     r.optimizer_state_factor, 0, 16));
  RETURN_IF_ERROR(
      CheckInRange("microbatches", r.microbatches, 0, kMaxMicrobatches));
  return CheckInRange("threads", r.threads, 0, 1024);
}

// The request's checks that need the states: enough states for a straight
// pipeline, and tables of states x workers of a bounded size. Returns the
// total number of workers (ValidateLevels bounded it).
absl::StatusOr<int> TotalWorkers(const PlanRequest& request,
                                 const StateSequence& seq) {
  int total = 1;
  for (const PlannerLevel& l : request.levels) total *= l.workers;
  // The solvers keep a cell per state and worker (and PipeDream one per
  // pair of states): 2^24 cells is a few hundred MB.
  constexpr int64_t kMaxCells = int64_t{1} << 24;
  const int64_t states = static_cast<int64_t>(seq.states.size());
  if (SaturatingMul(states, std::max<int64_t>(states, total)) > kMaxCells) {
    return absl::InvalidArgumentError(
        absl::StrCat("the profile's ", states, " states over ", total,
                     " workers are more than the planner's tables hold (",
                     kMaxCells, " cells of states x max(states, workers))"));
  }
  if (request.straight_pipeline &&
      total > static_cast<int>(seq.states.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a straight pipeline over ", total, " workers needs at least ", total,
        " stages, but the profile has only ", seq.states.size(),
        " states to cut"));
  }
  return total;
}

// PipeDream's options from the request.
PipeDreamOptions PipeDreamOptionsOf(const PlanRequest& request) {
  PipeDreamOptions o;
  o.levels = request.levels;
  o.straight_pipeline = request.straight_pipeline;
  o.use_fewer_machines = request.use_fewer_machines;
  o.use_memory_constraint = request.memory_limit_bytes.has_value();
  if (o.use_memory_constraint) o.memory_bytes = *request.memory_limit_bytes;
  o.activation_compression_ratio = request.activation_compression_ratio;
  o.threads = request.threads;
  return o;
}

// The bandwidth of the innermost level that `replicas` workers fit in (the
// outermost level's if none).
double ReplicaBandwidth(const PlanRequest& request, int replicas) {
  double bandwidth = request.levels.back().bandwidth_bytes_per_s;
  int group = 1;
  for (const PlannerLevel& l : request.levels) {
    group *= l.workers;
    if (replicas <= group) {
      bandwidth = l.bandwidth_bytes_per_s;
      break;
    }
  }
  return bandwidth;
}

// Solves under PipeDream's cost model; sets the plan's times and workers
// used, and returns the stages with each one's time under PipeDream's
// formula, at the bandwidth of the innermost level its replicas fit in.
absl::StatusOr<std::vector<Placed>> PlacePipeDream(const StateSequence& seq,
                                                   const PlanRequest& request,
                                                   PartitionPlan* plan) {
  ASSIGN_OR_RETURN(PipeDreamSolution s,
                   SolvePipeDream(seq, PipeDreamOptionsOf(request)));
  plan->set_time_per_minibatch_s(s.time_per_stage_s);
  plan->set_single_worker_time_s(s.single_worker_time_s);
  plan->set_data_parallel_time_s(s.data_parallel_time_s);
  std::vector<Placed> placed;
  int rank = 0, used = 0;
  for (const PipeDreamStage& st : s.stages) used += st.replicas;
  for (const PipeDreamStage& st : s.stages) {
    const double t = Range(seq, st.start, st.end, &AntichainState::compute_s);
    const double w =
        Range(seq, st.start, st.end, &AntichainState::parameter_bytes);
    const double act =
        Range(seq, st.start, st.end, &AntichainState::activation_bytes);
    const double bandwidth = ReplicaBandwidth(request, st.replicas);
    const int r = st.replicas;
    const double allreduce = (4.0 * (r - 1) * w) / (bandwidth * r) / r;
    const int depth =
        static_cast<int>(std::ceil(static_cast<double>(used - rank - r) / r));
    placed.push_back(
        {st.start, st.end, r, rank, t / r + allreduce, t, allreduce, 0,
         StageMemoryBytes(request.schedule, request.microbatches, w, act, depth,
                          request.optimizer_state_factor),
         depth});
    rank += r;
  }
  plan->set_workers_used(used);
  return placed;
}

// Solves under the Aqueduct cost model (or, with `pipedream_costs`, its
// exact DP over contiguous ranks of unequal speed with PipeDream's stage
// time); sets the plan's times (with the same baselines under this model:
// one worker; all `total` workers as replicas of one stage) and workers
// used, and returns the stages.
absl::StatusOr<std::vector<Placed>> PlaceAqueduct(const StateSequence& seq,
                                                  const PlanRequest& request,
                                                  int total,
                                                  PartitionPlan* plan,
                                                  bool pipedream_costs) {
  AqueductModelOptions o;
  o.pipedream_costs = pipedream_costs;
  o.levels = request.levels;
  o.worker_speed = request.worker_speed;
  o.straight_pipeline = request.straight_pipeline;
  o.use_fewer_machines = request.use_fewer_machines;
  o.memory_limit_bytes = request.memory_limit_bytes;
  o.schedule = request.schedule;
  o.allreduce_overlap = request.allreduce_overlap;
  o.optimizer_state_factor = request.optimizer_state_factor;
  o.microbatches = request.microbatches;
  if (request.activation_compression_ratio.has_value()) {
    return absl::InvalidArgumentError(
        "activation compression is a PipeDream cost-model option");
  }
  ASSIGN_OR_RETURN(AqueductSolution s, SolveAqueductModel(seq, o));
  plan->set_time_per_minibatch_s(s.time_per_minibatch_s);
  std::vector<Placed> placed;
  for (const AqueductStage& st : s.stages) {
    placed.push_back({st.start, st.end, st.replicas, st.first_rank,
                      st.cost.time_s, st.cost.compute_s, st.cost.allreduce_s,
                      st.cost.transfer_s, st.cost.memory_bytes,
                      st.cost.warmup_depth});
  }
  plan->set_workers_used(s.workers_used);
  const int n = static_cast<int>(seq.states.size());
  plan->set_single_worker_time_s(
      AqueductStageCost(seq, o, 0, n - 1, 0, 0).time_s);
  plan->set_data_parallel_time_s(
      AqueductStageCost(seq, o, 0, n - 1, 0, total - 1).time_s);
  return placed;
}

// Appends one PlanStage per placed stage, with its workers and layers.
void AddStages(const ProfileGraph& graph, const StateSequence& seq,
               const std::vector<Placed>& placed, PartitionPlan* plan) {
  for (const Placed& p : placed) {
    PlanStage* stage = plan->add_stages();
    stage->set_start(p.start);
    stage->set_end(p.end);
    stage->set_replicas(p.replicas);
    for (int r = 0; r < p.replicas; ++r) {
      stage->add_worker_ranks(p.first_rank + r);
    }
    stage->set_warmup_depth(p.depth);
    stage->set_predicted_time_s(p.time);
    stage->set_compute_time_s(p.compute);
    stage->set_allreduce_time_s(p.allreduce);
    stage->set_transfer_time_s(p.transfer);
    stage->set_predicted_memory_bytes(p.memory);
    FillLayers(graph, seq, stage);
  }
}

// Whether `speeds` (one per rank; empty: all equal) are not all equal.
bool Unequal(const std::vector<double>& speeds) {
  return std::any_of(speeds.begin(), speeds.end(),
                     [&](double v) { return v != speeds.front(); });
}

// Workers of unequal speed: each rank's speed in the plan, and each stage's
// (the slowest of its ranks').
void RecordSpeeds(const std::vector<double>& speeds, PartitionPlan* plan) {
  plan->mutable_worker_speeds()->Add(speeds.begin(), speeds.end());
  for (PlanStage& stage : *plan->mutable_stages()) {
    double slowest = 0;
    for (int rank : stage.worker_ranks()) {
      const double v = speeds[rank];
      slowest = slowest == 0 ? v : std::min(slowest, v);
    }
    stage.set_worker_speed(slowest);
  }
}

// Sets the plan's NOAM and its speed-ups over the baselines.
void SetSummary(PartitionPlan* plan) {
  const int input_replicas = plan->stages(0).replicas();
  plan->set_noam(static_cast<int>(
      std::ceil(static_cast<double>(plan->workers_used()) / input_replicas)));
  if (plan->time_per_minibatch_s() > 0) {
    plan->set_speedup_vs_single(plan->single_worker_time_s() /
                                plan->time_per_minibatch_s());
    plan->set_speedup_vs_data_parallel(plan->data_parallel_time_s() /
                                       plan->time_per_minibatch_s());
  }
}

}  // namespace

absl::StatusOr<PartitionPlan> MakePlan(const ProfileGraph& raw,
                                       const PlanRequest& request) {
  RETURN_IF_ERROR(ValidateRequest(request));
  RETURN_IF_ERROR(raw.Validate());
  const ProfileGraph graph = raw.WithoutInputsAndGetitemSinks();
  if (graph.size() == 0) {
    return absl::InvalidArgumentError(
        "the profile has nothing to plan once its Input and __getitem__ "
        "nodes are removed");
  }
  ASSIGN_OR_RETURN(StateSequence seq, BuildAntichainStates(graph));
  ASSIGN_OR_RETURN(const int total, TotalWorkers(request, seq));

  PartitionPlan plan;
  plan.set_cost_model(CostModelName(request.cost_model));
  for (const PlannerLevel& l : request.levels) {
    TopologyLevel* level = plan.add_levels();
    level->set_workers(l.workers);
    level->set_bandwidth_bytes_per_s(l.bandwidth_bytes_per_s);
  }
  plan.set_workers_total(total);

  std::vector<Placed> placed;
  const bool aqueduct = request.cost_model == v1::COST_MODEL_AQUEDUCT;
  if (!aqueduct && request.cost_model != v1::COST_MODEL_PIPEDREAM &&
      request.cost_model != v1::COST_MODEL_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        absl::StrCat("cost model ", static_cast<int>(request.cost_model),
                     " is not one of: pipedream, aqueduct"));
  }
  // PipeDream's DP counts workers, not which: over workers of unequal
  // speed (chains only) the contiguous-rank DP places its stage times.
  const bool speeds =
      Unequal(request.worker_speed) && (aqueduct || seq.is_chain);
  if (aqueduct || speeds) {
    ASSIGN_OR_RETURN(placed, PlaceAqueduct(seq, request, total, &plan,
                                           /*pipedream_costs=*/!aqueduct));
  } else {
    ASSIGN_OR_RETURN(placed, PlacePipeDream(seq, request, &plan));
  }
  AddStages(graph, seq, placed, &plan);
  if (speeds) RecordSpeeds(request.worker_speed, &plan);
  SetSummary(&plan);
  return plan;
}

namespace {

std::string Rate(double bytes_per_s) {
  if (bytes_per_s >= 1e9)
    return absl::StrFormat("%.2f GB/s", bytes_per_s / 1e9);
  if (bytes_per_s >= 1e6)
    return absl::StrFormat("%.2f MB/s", bytes_per_s / 1e6);
  return absl::StrFormat("%.0f B/s", bytes_per_s);
}

// The levels when there are several, and the measured topology when the
// plan has one (pipeline.topology "measured"): its groups in rank order.
std::string FormatTopology(const PartitionPlan& plan) {
  if (plan.levels_size() < 2 && !plan.has_topology()) return "";
  std::string out = "levels (innermost first):";
  for (const TopologyLevel& l : plan.levels()) {
    absl::StrAppend(&out, " ", l.workers(), " x ",
                    Rate(l.bandwidth_bytes_per_s()), ";");
  }
  out.back() = '\n';
  if (!plan.has_topology()) return out;
  const v1::PlanTopology& t = plan.topology();
  absl::StrAppend(&out, absl::StrFormat("topology %s (links probed in %.2f s)",
                                        t.kind(), t.probe_seconds()));
  if (!t.note().empty()) absl::StrAppend(&out, ": ", t.note());
  absl::StrAppend(&out, "\n");
  for (int g = 0; g < t.groups_size(); ++g) {
    const v1::WorkerGroup& group = t.groups(g);
    absl::StrAppend(
        &out, absl::StrFormat("group %d ranks [%d, %d): %s (slowest link %s)\n",
                              g, group.first_rank(),
                              group.first_rank() + group.worker_ids_size(),
                              absl::StrJoin(group.worker_ids(), " "),
                              Rate(group.min_bytes_per_second())));
  }
  if (t.groups_size() > 1) {
    absl::StrAppend(&out, "slowest link between groups ",
                    Rate(t.inter_bytes_per_second()), "\n");
  }
  return out;
}

}  // namespace

BusiestWorker BusiestWorkerOf(const PartitionPlan& plan) {
  BusiestWorker b;
  std::map<int, double> per_worker;
  int tensor = 1;
  for (const PlanStage& stage : plan.stages()) {
    b.replicas = std::max(b.replicas, stage.replicas());
    tensor = std::max(tensor, stage.tensor_parallel());
    // A tensor group's members each run the member's compute (the stage's
    // figure); replicas share the microbatches.
    const int t = std::max(1, stage.tensor_parallel());
    const int replicas = std::max(1, stage.worker_ranks_size() / t);
    // Workers of unequal speed: the stage runs at its slowest worker's.
    const double speed = stage.worker_speed() > 0 ? stage.worker_speed() : 1;
    for (int rank : stage.worker_ranks()) {
      per_worker[rank] += stage.compute_time_s() / replicas / speed;
    }
  }
  for (const auto& [rank, s] : per_worker) {
    b.compute_s = std::max(b.compute_s, s);
  }
  b.positions = std::max(1, plan.workers_used() / (b.replicas * tensor));
  return b;
}

absl::StatusOr<ir::Simulation> SimulateDecision(const PartitionPlan& plan) {
  const v1::PipelineDecision& d = plan.pipeline();
  const BusiestWorker busiest = BusiestWorkerOf(plan);
  if (!d.program().empty()) {
    ASSIGN_OR_RETURN(const ir::Program program, ir::ParseProgram(d.program()));
    return SimulateProgram(program, busiest.compute_s);
  }
  ASSIGN_OR_RETURN(const Schedule schedule, ParseSchedule(d.schedule()));
  return PredictSchedule(schedule, busiest.positions, d.chunks(),
                         std::max(1, d.microbatches() / busiest.replicas),
                         busiest.compute_s);
}

namespace {

// The configurations the joint planner weighed, chosen first.
std::string FormatCandidates(const v1::PipelineDecision& d) {
  if (d.candidates().empty()) return "";
  std::string out = absl::StrFormat(
      "weighed %d configurations:\n  %-7s %-10s %-16s %7s %9s %12s %14s  %s\n",
      d.candidates_size(), "tensor", "recompute", "schedule", "stages",
      "replicas", "pred s", "memory/worker", "");
  for (const v1::PlanCandidate& c : d.candidates()) {
    absl::StrAppend(
        &out,
        absl::StrFormat("  %-7d %-10s %-16s %7d %9d %12.6f %10.1f MiB  %s\n",
                        c.tensor_parallel(), c.recompute(), c.schedule(),
                        c.stages(), c.replicas(), c.predicted_step_s(),
                        c.predicted_memory_bytes() / (1 << 20),
                        c.rejected().empty() ? "chosen" : c.rejected()));
  }
  return out;
}

}  // namespace

std::string FormatPlan(const PartitionPlan& plan) {
  std::string out = absl::StrFormat(
      "cost model %s, %d of %d workers, NOAM %d\n", plan.cost_model(),
      plan.workers_used(), plan.workers_total(), plan.noam());
  absl::StrAppend(&out, FormatTopology(plan));
  // Workers of unequal speed: each rank's, and a column of each stage's.
  const bool speeds = plan.worker_speeds_size() > 0;
  if (speeds) {
    absl::StrAppend(&out, "worker speeds by rank (fastest 1):");
    for (double v : plan.worker_speeds()) {
      absl::StrAppend(&out, absl::StrFormat(" %.2f", v));
    }
    absl::StrAppend(&out, "\n");
  }
  absl::StrAppend(
      &out, absl::StrFormat("%-6s %-13s %-13s %8s %6s %6s %10s %10s %12s%s\n",
                            "stage", "states", "layers", "replicas", "tensor",
                            "depth", "pred ms", "compute ms", "memory MiB",
                            speeds ? "  speed" : ""));
  for (int s = 0; s < plan.stages_size(); ++s) {
    const PlanStage& st = plan.stages(s);
    const std::string layers =
        st.first_layer() >= 0
            ? absl::StrCat("[", st.first_layer(), ", ", st.end_layer(), ")")
            : "-";
    absl::StrAppend(
        &out,
        absl::StrFormat(
            "%-6d %-13s %-13s %8d %6d %6d %10.3f %10.3f %12.1f%s\n", s,
            absl::StrCat("[", st.start(), ", ", st.end(), ")"), layers,
            st.replicas(), std::max(1, st.tensor_parallel()), st.warmup_depth(),
            st.predicted_time_s() * 1e3, st.compute_time_s() * 1e3,
            st.predicted_memory_bytes() / (1 << 20),
            speeds ? absl::StrFormat(" %6.2f", st.worker_speed()) : ""));
  }
  absl::StrAppend(
      &out,
      absl::StrFormat(
          "time per minibatch %.6f s; one worker %.6f s (speed-up %.2fx); "
          "data parallel %.6f s (speed-up %.2fx)\n",
          plan.time_per_minibatch_s(), plan.single_worker_time_s(),
          plan.speedup_vs_single(), plan.data_parallel_time_s(),
          plan.speedup_vs_data_parallel()));
  if (plan.has_pipeline()) {
    const v1::PipelineDecision& d = plan.pipeline();
    absl::StrAppend(&out, "schedule ", d.schedule(), ", ", d.microbatches(),
                    " microbatches, ", d.chunks(), " chunk(s) per worker, ",
                    d.transport());
    if (d.predicted_step_s() > 0) {
      absl::StrAppend(
          &out,
          absl::StrFormat("; simulated: %.6f s per minibatch, bubble "
                          "%.2f%%",
                          d.predicted_step_s(), d.predicted_bubble() * 100));
    }
    absl::StrAppend(&out, "\n");
    if (!d.chosen_by().empty()) absl::StrAppend(&out, d.chosen_by(), "\n");
    if (d.tensor_parallel() > 1 || !d.recompute().empty()) {
      absl::StrAppend(&out, "tensor parallel ",
                      std::max(1, d.tensor_parallel()), ", recompute ",
                      d.recompute().empty() ? "none" : d.recompute(), "\n");
    }
    absl::StrAppend(&out, FormatCandidates(d));
  }
  return out;
}

}  // namespace aqueduct
