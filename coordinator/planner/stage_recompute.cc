#include "coordinator/planner/stage_recompute.h"

#include <algorithm>
#include <map>

#include "coordinator/planner/aqueduct_model.h"
#include "pipeline/policy.h"

namespace aqueduct {

namespace {

// What layers [begin, end) cost in one mode: forward plus backward
// milliseconds, and the bytes kept for backward (as the planner's states
// sum them: coordinator/planner/antichain.cc).
struct RangeCost {
  double ms = 0;
  double saved = 0;
};

RangeCost CostOf(const ModelProfile& profile, int begin, int end) {
  RangeCost c;
  for (const LayerProfile& n : profile.nodes()) {
    if (!n.has_layer_index() || n.layer_index() < begin ||
        n.layer_index() >= end) {
      continue;
    }
    c.ms += n.forward_ms() + n.backward_ms();
    c.saved += n.saved_bytes() > 0 ? n.saved_bytes() : n.activation_bytes();
  }
  return c;
}

std::map<int, double> MemoryPerWorker(const PartitionPlan& plan) {
  std::map<int, double> per_worker;
  for (const PlanStage& stage : plan.stages()) {
    for (int rank : stage.worker_ranks()) {
      per_worker[rank] += stage.predicted_memory_bytes();
    }
  }
  return per_worker;
}

// Stage `stage` as mode `lighter` instead of its mode's `now`: `extra`
// bytes more per worker.
void Lighten(Recompute lighter, const RangeCost& now, const RangeCost& to,
             double extra, PlanStage* stage) {
  const double compute = stage->compute_time_s() + (to.ms - now.ms) / 1000.0;
  const int replicas = std::max(1, stage->replicas());
  stage->set_compute_time_s(compute);
  stage->set_predicted_time_s(
      std::max(compute / replicas + stage->allreduce_time_s(),
               stage->transfer_time_s()));
  stage->set_predicted_memory_bytes(stage->predicted_memory_bytes() + extra);
  stage->set_recompute(RecomputeName(lighter));
}

// The stage whose workers compute longest per minibatch (the step's
// bound under the planner's simulation).
PlanStage* Busiest(PartitionPlan* plan) {
  PlanStage* busiest = nullptr;
  double most = -1;
  for (PlanStage& stage : *plan->mutable_stages()) {
    const double s = stage.compute_time_s() / std::max(1, stage.replicas());
    if (s > most) {
      most = s;
      busiest = &stage;
    }
  }
  return busiest;
}

// The lightest mode below the stage's own that fits `worker_memory` on
// each of its workers, applied; false when none does.
bool LightenStage(const ProfilesByMode& profiles, Schedule schedule,
                  int microbatches, int64_t worker_memory,
                  std::map<int, double>* per_worker, PlanStage* stage) {
  const absl::StatusOr<Recompute> mode =
      ParseRecompute(stage->recompute(), "recompute");
  if (!mode.ok() || stage->first_layer() < 0) return false;
  const int begin = stage->first_layer(), end = stage->end_layer();
  const RangeCost now = CostOf(*profiles[static_cast<int>(*mode)], begin, end);
  // Minibatches of activations the stage keeps (act's factor).
  const double in_flight =
      StageMemoryBytes(schedule, microbatches, 0, 1, stage->warmup_depth(), 0);
  for (int m = 0; m < static_cast<int>(*mode); ++m) {
    const RangeCost to = CostOf(*profiles[m], begin, end);
    const double extra = (to.saved - now.saved) * in_flight;
    bool fits = true;
    for (int rank : stage->worker_ranks()) {
      fits = fits &&
             (*per_worker)[rank] + extra <= static_cast<double>(worker_memory);
    }
    if (!fits) continue;
    for (int rank : stage->worker_ranks()) (*per_worker)[rank] += extra;
    Lighten(static_cast<Recompute>(m), now, to, extra, stage);
    return true;
  }
  return false;
}

}  // namespace

bool LightenRecomputation(const ProfilesByMode& profiles, Recompute mode,
                          int64_t worker_memory, PartitionPlan* plan) {
  const absl::StatusOr<Schedule> schedule =
      ParseSchedule(plan->pipeline().schedule());
  if (mode == Recompute::kNone || worker_memory <= 0 || !schedule.ok()) {
    return false;
  }
  const int micro = std::max(1, plan->pipeline().microbatches());
  std::map<int, double> per_worker = MemoryPerWorker(*plan);
  bool changed = false;
  // Only the busiest stage bounds the step: lighten it while it fits.
  while (LightenStage(profiles, *schedule, micro, worker_memory, &per_worker,
                      Busiest(plan))) {
    changed = true;
  }
  // The plan's time per minibatch: its slowest stage's.
  double slowest = 0;
  for (const PlanStage& stage : plan->stages()) {
    slowest = std::max(slowest, stage.predicted_time_s());
  }
  if (changed && slowest < plan->time_per_minibatch_s()) {
    plan->set_time_per_minibatch_s(slowest);
  }
  return changed;
}

}  // namespace aqueduct
