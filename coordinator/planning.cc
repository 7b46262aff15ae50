#include "coordinator/planning.h"

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "coordinator/planner/pinned_cut.h"
#include "coordinator/planner/profile_graph.h"
#include "coordinator/planner/stage_recompute.h"
#include "coordinator/planner/tensor_groups.h"
#include "pipeline/ir/action.h"
#include "pipeline/limits.h"
#include "pipeline/memory.h"
#include "pipeline/policy.h"
#include "pipeline/spec.h"

namespace aqueduct {

namespace {

// The planner's request for a job on `workers` workers: on `levels`, or
// when there are none on one level at the spec's bandwidth.
absl::StatusOr<PlanRequest> RequestFor(
    const JobSpec& spec, int workers,
    const std::vector<PlannerLevel>& levels = {}) {
  ASSIGN_OR_RETURN(PipelinePolicy policy, ResolvePipeline(spec));
  PlanRequest request;
  request.cost_model = policy.cost_model;
  request.schedule = policy.schedule;
  request.levels = {{workers, policy.bandwidth_bytes_per_s}};
  if (!levels.empty()) request.levels = levels;
  request.threads = 1;
  // Optimizer state per parameter byte, for the predicted memory.
  request.optimizer_state_factor = OptimizerStateFactor(spec.optimizer());
  auto microbatches = MicrobatchesFor(policy, spec.batch_size(), workers);
  request.microbatches = microbatches.ok() ? *microbatches : 1;
  // Weight stashing runs unreplicated stages: plan a straight pipeline
  // (and when the spec asks for one).
  request.straight_pipeline =
      StashesWeights(policy.schedule) || policy.straight;
  return request;
}

// Several chunks per worker (interleaved_1f1b, zb_v): the plan of a
// straight pipeline over workers * chunks stages, each stage then placed on
// the worker of its pipeline position (a loop, or zb_v's V).
ir::Layout ChunkLayout(const PipelinePolicy& policy, int workers) {
  ir::Layout where;
  where.ranks = workers;
  where.stages_per_rank = policy.chunks;
  where.placement = policy.schedule == v1::SCHEDULE_ZB_V || policy.v_placement
                        ? ir::Placement::kV
                        : ir::Placement::kLoop;
  return where;
}

absl::Status FoldChunks(const PipelinePolicy& policy, int workers,
                        PartitionPlan* plan) {
  const ir::Layout where = ChunkLayout(policy, workers);
  if (plan->stages_size() != where.stages()) {
    return absl::FailedPreconditionError(absl::StrCat(
        ScheduleName(policy.schedule), " on ", workers, " workers needs ",
        where.stages(), " stages (", policy.chunks,
        " chunks per worker); the planner cut the model into ",
        plan->stages_size(), ": it has too few layers to cut"));
  }
  for (int s = 0; s < plan->stages_size(); ++s) {
    PlanStage* stage = plan->mutable_stages(s);
    stage->clear_worker_ranks();
    stage->add_worker_ranks(where.RankOf(s));
    stage->set_replicas(1);
  }
  plan->set_workers_used(workers);
  plan->set_workers_total(workers);
  return absl::OkStatus();
}

// The speeds the planner sees for `speeds` (one per worker; empty: all
// equal): with chunks, pipeline position s runs on worker RankOf(s) and
// has its speed.
std::vector<double> PositionSpeeds(const PipelinePolicy& policy,
                                   const std::vector<double>& speeds) {
  if (speeds.empty() || policy.chunks <= 1) return speeds;
  const int workers = static_cast<int>(speeds.size());
  const ir::Layout where = ChunkLayout(policy, workers);
  std::vector<double> positions;
  for (int s = 0; s < where.stages(); ++s) {
    positions.push_back(speeds[where.RankOf(s)]);
  }
  return positions;
}

// Tensor groups of `degree`: group g holds workers [g degree, (g+1)
// degree) and runs at its slowest member's speed.
std::vector<double> GroupSpeeds(const std::vector<double>& speeds, int degree) {
  if (speeds.empty() || degree <= 1) return speeds;
  std::vector<double> groups;
  for (size_t g = 0; g + degree <= speeds.size(); g += degree) {
    groups.push_back(
        *std::min_element(speeds.begin() + g, speeds.begin() + g + degree));
  }
  return groups;
}

// The pipeline decided once, into the plan: schedule, microbatches,
// chunks and transport for these workers, and the simulator's bubble.
// INVALID_ARGUMENT naming the rule when the microbatches do not fit (the
// job fails, or a restart onto these workers does, with that reason).
absl::Status DecidePipeline(const PipelinePolicy& policy, const JobSpec& spec,
                            int workers, PartitionPlan* plan) {
  ASSIGN_OR_RETURN(const int micro,
                   MicrobatchesFor(policy, spec.batch_size(), workers));
  v1::PipelineDecision* d = plan->mutable_pipeline();
  d->set_schedule(ScheduleName(policy.schedule));
  d->set_microbatches(micro);
  d->set_chunks(policy.chunks);
  d->set_transport(TransportName(policy.transport));
  if (policy.schedule == v1::SCHEDULE_CUSTOM) {
    ASSIGN_OR_RETURN(const ir::Program program, CustomProgram(spec.pipeline()));
    d->set_program(ir::ProgramText(program));
  }
  const absl::StatusOr<ir::Simulation> predicted = SimulateDecision(*plan);
  if (predicted.ok()) {
    d->set_predicted_bubble(predicted->bubble);
    d->set_predicted_step_s(predicted->step_time);
  }
  return absl::OkStatus();
}

// The plan of `workers` (tensor groups, when the stages are) over a
// member's profile: the planner's cut, chunks folded onto the workers.
absl::StatusOr<PartitionPlan> PlanGroups(
    const JobSpec& spec, const PipelinePolicy& policy,
    const ProfileGraph& profile, int workers,
    const std::vector<PlannerLevel>& levels, const std::vector<double>& speeds);

// The most activations a worker of `plan` holds at once under its
// decided schedule, in microbatches of its share (the simulator's peak);
// 0 when it has no one-minibatch program.
double PeakActivations(const PartitionPlan& plan) {
  const absl::StatusOr<ir::Simulation> sim = SimulateDecision(plan);
  if (!sim.ok()) return 0;
  return *std::max_element(sim->peak_activations.begin(),
                           sim->peak_activations.end());
}

// The most memory a worker of `plan` is predicted to hold: the planner's
// per-stage figures (which count 1F1B's activations in flight) summed
// over a worker's chunks, with the activations scaled by how many more
// the schedule keeps than 1F1B (`ratio`, at least 1; it scales the whole
// figure, so it overstates).
double WorkerMemory(const PartitionPlan& plan, double ratio) {
  std::map<int, double> per_worker;
  for (const PlanStage& stage : plan.stages()) {
    for (int rank : stage.worker_ranks()) {
      per_worker[rank] += stage.predicted_memory_bytes();
    }
  }
  double most = 0;
  for (const auto& [rank, bytes] : per_worker) most = std::max(most, bytes);
  return most * std::max(1.0, ratio);
}

// schedule "auto": every schedule that flushes, planned for these workers
// and simulated; the fastest whose predicted memory fits `worker_memory`
// (0: unknown, then none that keeps more activations than 1F1B).
absl::StatusOr<PartitionPlan> ChooseSchedule(
    const JobSpec& spec, const ModelProfile& profile, int workers,
    const std::vector<PlannerLevel>& levels, int64_t worker_memory,
    double latency, const std::vector<double>& speeds) {
  std::optional<PartitionPlan> best;
  std::vector<std::string> notes;
  double baseline = 0;  // 1f1b_flush's peak.
  for (Schedule s :
       {v1::SCHEDULE_1F1B_FLUSH, v1::SCHEDULE_ZB_H1, v1::SCHEDULE_ZB_H2,
        v1::SCHEDULE_INTERLEAVED_1F1B, v1::SCHEDULE_ZB_V}) {
    JobSpec candidate = spec;
    candidate.mutable_pipeline()->set_schedule(ScheduleName(s));
    candidate.mutable_pipeline()->clear_chunks();
    auto plan = PlanOn(candidate, profile, workers, levels, 0, latency, speeds);
    if (!plan.ok()) {
      notes.push_back(
          absl::StrCat(ScheduleName(s), ": ", plan.status().message()));
      continue;
    }
    const double peak = PeakActivations(*plan);
    if (s == v1::SCHEDULE_1F1B_FLUSH) baseline = peak;
    const double ratio = baseline > 0 ? peak / baseline : 1;
    const double memory = WorkerMemory(*plan, ratio);
    if (worker_memory > 0 ? memory > static_cast<double>(worker_memory)
                          : ratio > 1.0 + 1e-9) {
      notes.push_back(absl::StrFormat(
          "%s: predicted %.3g bytes per worker (%.2fx 1F1B's activations), "
          "more than %s",
          ScheduleName(s), memory, ratio,
          worker_memory > 0 ? absl::StrCat(worker_memory, " bytes")
                            : std::string("1F1B's (worker memory unknown)")));
      continue;
    }
    const v1::PipelineDecision& d = plan->pipeline();
    notes.push_back(absl::StrFormat("%s: %.4g s, bubble %.1f%%",
                                    ScheduleName(s), d.predicted_step_s(),
                                    d.predicted_bubble() * 100));
    if (!best.has_value() ||
        d.predicted_step_s() < best->pipeline().predicted_step_s()) {
      best = *std::move(plan);
    }
  }
  if (!best.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "schedule auto: no schedule fits: ", absl::StrJoin(notes, "; ")));
  }
  best->mutable_pipeline()->set_chosen_by(
      absl::StrCat("auto chose ", best->pipeline().schedule(), " (",
                   absl::StrJoin(notes, "; "), ")"));
  return *std::move(best);
}

// A member's profile when the stages are tensor groups of `degree` (or
// recompute): pipeline/tensor_groups.h.
absl::StatusOr<ModelProfile> ProfileFor(const JobSpec& spec,
                                        const PipelinePolicy& policy,
                                        const ModelProfile& profile, int degree,
                                        int workers, double latency) {
  if (degree == 1 && policy.recompute == Recompute::kNone) return profile;
  MemberCosts costs;
  costs.degree = degree;
  costs.recompute = policy.recompute;
  costs.bandwidth_bytes_per_s = policy.bandwidth_bytes_per_s;
  costs.batch_size = spec.batch_size();
  costs.step_latency_s = latency;
  costs.sequence = policy.sequence_parallel;
  auto micro = MicrobatchesFor(policy, spec.batch_size(), workers / degree);
  costs.microbatches = micro.ok() ? *micro : 1;
  return MemberProfile(spec.model(), profile, costs);
}

// The tensor degrees the planner weighs: the spec's; else every degree
// that divides the workers (and the innermost level's groups, so that a
// tensor group stays inside one) and splits every transformer layer; 1
// alone for models without transformer layers, schedules that stash
// weights or hold chunks, and custom programs.
std::vector<int> DegreesToWeigh(const JobSpec& spec,
                                const PipelinePolicy& policy, int workers,
                                const std::vector<PlannerLevel>& levels) {
  if (policy.tensor_parallel > 0) return {policy.tensor_parallel};
  if (!HasTransformerLayers(spec.model()) ||
      !SplitsMinibatches(policy.schedule) || policy.chunks > 1 ||
      policy.schedule == v1::SCHEDULE_CUSTOM) {
    return {1};
  }
  PipelinePolicy on_these = policy;
  on_these.workers = workers;
  std::vector<int> degrees;
  const int inner = levels.empty() ? workers : levels.front().workers;
  for (int t : TensorDegreesFor(spec.model(), on_these)) {
    if (inner % t == 0) degrees.insert(degrees.begin(), t);
  }
  return degrees;
}

std::vector<Recompute> ModesToWeigh(const JobSpec& spec,
                                    const PipelinePolicy& policy) {
  if (policy.recompute_fixed || !HasTransformerLayers(spec.model())) {
    return {policy.recompute};
  }
  return {Recompute::kNone, Recompute::kSelective, Recompute::kFull};
}

double StepOf(const PartitionPlan& plan) {
  return plan.pipeline().predicted_step_s() > 0
             ? plan.pipeline().predicted_step_s()
             : plan.time_per_minibatch_s();
}

// One configuration planned, for the joint choice.
struct Weighed {
  v1::PlanCandidate candidate;
  std::optional<PartitionPlan> plan;
};

Weighed Weigh(const JobSpec& spec, const ModelProfile& profile, int workers,
              const std::vector<PlannerLevel>& levels, int64_t worker_memory,
              double latency, const std::vector<double>& speeds, int degree,
              Recompute mode) {
  Weighed w;
  v1::PlanCandidate& c = w.candidate;
  c.set_tensor_parallel(degree);
  c.set_recompute(RecomputeName(mode));
  JobSpec fixed = spec;
  fixed.mutable_pipeline()->set_tensor_parallel(degree);
  fixed.mutable_pipeline()->set_recompute(RecomputeName(mode));
  absl::StatusOr<PartitionPlan> plan =
      PlanOn(fixed, profile, workers, levels, worker_memory, latency, speeds);
  if (!plan.ok()) {
    c.set_rejected(std::string(plan.status().message()));
    return w;
  }
  c.set_schedule(plan->pipeline().schedule());
  c.set_predicted_step_s(StepOf(*plan));
  c.set_predicted_memory_bytes(WorkerMemory(*plan, 1));
  c.set_stages(plan->stages_size());
  for (const PlanStage& s : plan->stages()) {
    c.set_replicas(std::max(c.replicas(), s.replicas()));
  }
  if (worker_memory > 0 &&
      c.predicted_memory_bytes() > static_cast<double>(worker_memory)) {
    c.set_rejected(absl::StrCat(
        "needs ", FormatBytes(static_cast<int64_t>(c.predicted_memory_bytes())),
        " per worker, more than the smallest worker's ",
        FormatBytes(worker_memory)));
    return w;
  }
  w.plan = *std::move(plan);
  return w;
}

// Stage-aware recomputation (coordinator/planner/stage_recompute.h) on a
// configuration that fits: its stages lightened where the smallest
// worker's memory allows, the step simulated again, and its row of the
// weighed configurations showing each stage's mode ("full,none").
void LightenStages(const JobSpec& spec, const ModelProfile& profile,
                   int workers, const std::vector<PlannerLevel>& levels,
                   int64_t worker_memory, double latency, Weighed* chosen) {
  // As PlanOn's member profile.
  absl::StatusOr<Recompute> mode =
      ParseRecompute(chosen->candidate.recompute(), "recompute");
  absl::StatusOr<PipelinePolicy> policy = ResolvePipeline(spec);
  if (!mode.ok() || *mode == Recompute::kNone || !policy.ok()) return;
  const int degree = chosen->candidate.tensor_parallel();
  if (degree > 1 && !levels.empty()) {
    policy->bandwidth_bytes_per_s = levels.front().bandwidth_bytes_per_s;
  }
  std::array<ModelProfile, 3> member;
  ProfilesByMode by_mode;
  for (int m = 0; m < 3; ++m) {
    policy->recompute = static_cast<Recompute>(m);
    absl::StatusOr<ModelProfile> p =
        ProfileFor(spec, *policy, profile, degree, workers, latency);
    if (!p.ok()) return;
    member[m] = *std::move(p);
    by_mode[m] = &member[m];
  }
  PartitionPlan& plan = *chosen->plan;
  if (!LightenRecomputation(by_mode, *mode, worker_memory, &plan)) return;
  const absl::StatusOr<ir::Simulation> sim = SimulateDecision(plan);
  if (sim.ok()) {
    plan.mutable_pipeline()->set_predicted_step_s(sim->step_time);
    plan.mutable_pipeline()->set_predicted_bubble(sim->bubble);
  }
  std::vector<std::string> modes;
  for (const PlanStage& s : plan.stages()) modes.push_back(s.recompute());
  plan.mutable_pipeline()->set_recompute(absl::StrJoin(modes, ","));
  chosen->candidate.set_recompute(plan.pipeline().recompute());
  chosen->candidate.set_predicted_step_s(StepOf(plan));
  chosen->candidate.set_predicted_memory_bytes(WorkerMemory(plan, 1));
}

// Faster first; among equals, the smaller degree and less recomputation.
bool Better(const v1::PlanCandidate& a, const v1::PlanCandidate& b) {
  if (a.predicted_step_s() != b.predicted_step_s()) {
    return a.predicted_step_s() < b.predicted_step_s();
  }
  if (a.tensor_parallel() != b.tensor_parallel()) {
    return a.tensor_parallel() < b.tensor_parallel();
  }
  return a.recompute() < b.recompute();
}

// Pipeline stages, replicas, tensor degree, recomputation (and, under
// "auto", the schedule) chosen together: every configuration the spec
// leaves open planned, the fastest predicted that fits the smallest
// worker's memory kept, the others listed with why they lost.
absl::StatusOr<PartitionPlan> PlanJointly(
    const JobSpec& spec, const ModelProfile& profile, int workers,
    const std::vector<PlannerLevel>& levels, int64_t worker_memory,
    double latency, const std::vector<double>& speeds,
    const std::vector<int>& degrees, const std::vector<Recompute>& modes) {
  std::vector<Weighed> all;
  for (int t : degrees) {
    for (Recompute r : modes) {
      all.push_back(Weigh(spec, profile, workers, levels, worker_memory,
                          latency, speeds, t, r));
      if (all.back().plan.has_value() && modes.size() > 1) {
        LightenStages(spec, profile, workers, levels, worker_memory, latency,
                      &all.back());
      }
    }
  }
  std::stable_sort(
      all.begin(), all.end(), [](const Weighed& a, const Weighed& b) {
        if (a.plan.has_value() != b.plan.has_value()) {
          return a.plan.has_value();
        }
        return a.plan.has_value() && Better(a.candidate, b.candidate);
      });
  if (!all.front().plan.has_value()) {
    std::vector<std::string> why;
    for (const Weighed& w : all) {
      why.push_back(absl::StrCat("tensor ", w.candidate.tensor_parallel(),
                                 ", recompute ", w.candidate.recompute(), ": ",
                                 w.candidate.rejected()));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("no configuration fits: ", absl::StrJoin(why, "; ")));
  }
  PartitionPlan best = *all.front().plan;
  const double fastest = all.front().candidate.predicted_step_s();
  for (size_t i = 0; i < all.size(); ++i) {
    v1::PlanCandidate c = all[i].candidate;
    if (i > 0 && all[i].plan.has_value()) {
      c.set_rejected(absl::StrFormat(
          "slower: %.1f%% over the chosen",
          100 * (c.predicted_step_s() / std::max(fastest, 1e-12) - 1)));
    }
    *best.mutable_pipeline()->add_candidates() = c;
  }
  return best;
}

}  // namespace

double StepLatencyOf(const std::vector<HostShare>& workers) {
  std::map<std::string, std::pair<int, int>> hosts;  // threads, cores
  for (const HostShare& w : workers) {
    auto& [threads, cores] = hosts[w.host];
    threads += w.threads;
    cores = std::max(cores, w.cores);
  }
  for (const auto& [host, use] : hosts) {
    if (use.second > 0 && use.first > use.second) {
      return kOversubscribedStepLatencyS;
    }
  }
  return kRingStepLatencyS;
}

namespace {

// pipeline.stages against the stages these workers hold: one per worker
// (tensor group), times the chunks each holds.
absl::Status CheckPinnedCount(const PipelinePolicy& policy,
                              const std::vector<int>& pinned, int groups) {
  const int chunks = std::max(1, policy.chunks);
  if (static_cast<int>(pinned.size()) == groups * chunks) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "pipeline.stages pins ", pinned.size(), " stages, but the job's ", groups,
      chunks > 1 ? absl::StrCat(" workers of ", chunks, " chunks each")
                 : std::string(" worker(s)"),
      policy.tensor_parallel > 1 ? " (tensor groups)" : "", " hold ",
      groups * chunks));
}

}  // namespace

absl::StatusOr<PartitionPlan> PlanOn(const JobSpec& spec,
                                     const ModelProfile& profile, int workers,
                                     const std::vector<PlannerLevel>& levels,
                                     int64_t worker_memory,
                                     double step_latency_s,
                                     const std::vector<double>& worker_speeds) {
  ASSIGN_OR_RETURN(const PipelinePolicy policy, ResolvePipeline(spec));
  if (!worker_speeds.empty() &&
      static_cast<int>(worker_speeds.size()) != workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        worker_speeds.size(), " worker speeds for ", workers, " workers"));
  }
  const std::vector<int> degrees =
      DegreesToWeigh(spec, policy, workers, levels);
  const std::vector<Recompute> modes = ModesToWeigh(spec, policy);
  if (degrees.size() > 1 || modes.size() > 1) {
    return PlanJointly(spec, profile, workers, levels, worker_memory,
                       step_latency_s, worker_speeds, degrees, modes);
  }
  if (policy.schedule == v1::SCHEDULE_AUTO) {
    return ChooseSchedule(spec, profile, workers, levels, worker_memory,
                          step_latency_s, worker_speeds);
  }
  // Tensor groups: planned as workers / degree workers of a member's
  // profile, then expanded.
  const int degree = std::max(1, policy.tensor_parallel);
  if (workers % degree != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("pipeline.tensor_parallel=", degree,
                     " does not divide the job's ", workers, " workers"));
  }
  // A tensor group sits inside the innermost level's group, on its links.
  std::vector<PlannerLevel> member_levels = levels;
  PipelinePolicy member_policy = policy;
  if (degree > 1 && !levels.empty()) {
    if (levels.front().workers % degree != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "pipeline.tensor_parallel=", degree, " does not divide the ",
          levels.front().workers,
          " workers of the innermost group of the measured topology: a "
          "tensor group would straddle two"));
    }
    member_levels.front().workers /= degree;
    member_policy.bandwidth_bytes_per_s = levels.front().bandwidth_bytes_per_s;
  }
  ASSIGN_OR_RETURN(const ModelProfile member,
                   ProfileFor(spec, member_policy, profile, degree, workers,
                              step_latency_s));
  const std::vector<int> pinned(spec.pipeline().stages().begin(),
                                spec.pipeline().stages().end());
  ModelProfile cut = member;
  if (!pinned.empty()) {
    RETURN_IF_ERROR(CheckPinnedCount(policy, pinned, workers / degree));
    ASSIGN_OR_RETURN(cut, MergePinnedStages(member, pinned));
  }
  auto graph = ProfileGraph::FromProto(cut);
  if (!graph.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the profile is invalid: ", graph.status().message()));
  }
  ASSIGN_OR_RETURN(
      PartitionPlan plan,
      PlanGroups(spec, policy, *graph, workers / degree, member_levels,
                 GroupSpeeds(worker_speeds, degree)));
  if (!pinned.empty()) RestorePinnedLayers(member, pinned, &plan);
  ExpandTensorGroups(degree, policy.recompute, &plan);
  // Placed by speed: the plan lists every worker's, by rank.
  if (plan.worker_speeds_size() > 0) {
    plan.mutable_worker_speeds()->Assign(worker_speeds.begin(),
                                         worker_speeds.end());
  }
  RETURN_IF_ERROR(
      DecidePipeline(policy, spec, plan.workers_used() / degree, &plan));
  plan.mutable_pipeline()->set_tensor_parallel(degree);
  plan.mutable_pipeline()->set_recompute(RecomputeName(policy.recompute));
  return plan;
}

namespace {

absl::StatusOr<PartitionPlan> PlanGroups(
    const JobSpec& spec, const PipelinePolicy& policy,
    const ProfileGraph& profile, int workers,
    const std::vector<PlannerLevel>& levels,
    const std::vector<double>& speeds) {
  const ProfileGraph* graph = &profile;
  const int chunks = policy.chunks;
  auto request = RequestFor(spec, workers * chunks,
                            chunks > 1 ? std::vector<PlannerLevel>{} : levels);
  if (!request.ok()) return request.status();
  request->worker_speed = PositionSpeeds(policy, speeds);
  if (chunks > 1) {
    request->straight_pipeline = true;
    auto micro = MicrobatchesFor(policy, spec.batch_size(), workers);
    request->microbatches = micro.ok() ? *micro : 1;
  }
  auto plan = MakePlan(*graph, *request);
  if (!plan.ok()) {
    // With chunks the planner saw workers x chunks "workers": say so.
    const std::string chunked =
        chunks > 1 ? absl::StrCat(ScheduleName(policy.schedule), " on ",
                                  workers, " workers holds ", chunks,
                                  " chunks each, so the model is cut into ",
                                  workers * chunks, " stages: ")
                   : "";
    return absl::Status(
        plan.status().code(),
        absl::StrCat("planning failed: ", chunked, plan.status().message()));
  }
  if (chunks > 1) RETURN_IF_ERROR(FoldChunks(policy, workers, &*plan));
  return plan;
}

}  // namespace

}  // namespace aqueduct
