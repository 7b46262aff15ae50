#include "worker/runtime/layout.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "pipeline/limits.h"
#include "pipeline/policy.h"
#include "pipeline/schedule.h"

namespace aqueduct {

absl::StatusOr<PipelineLayout> LayoutFromPlan(const PartitionPlan& plan,
                                              int num_layers, Schedule policy,
                                              int64_t num_minibatches,
                                              int microbatches) {
  PipelineLayout layout;
  layout.policy = policy;
  layout.num_minibatches = num_minibatches;
  layout.microbatches = microbatches;
  int expected = 0;
  for (int s = 0; s < plan.stages_size(); ++s) {
    const PlanStage& st = plan.stages(s);
    if (st.first_layer() != expected || st.end_layer() <= st.first_layer()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "plan stage ", s, " covers layers [", st.first_layer(), ", ",
          st.end_layer(), "); expected it to start at layer ", expected));
    }
    if (st.worker_ranks_size() == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan stage ", s, " names no worker ranks"));
    }
    layout.layer_begin.push_back(st.first_layer());
    layout.ranks.emplace_back(st.worker_ranks().begin(),
                              st.worker_ranks().end());
    layout.warmup_depth.push_back(st.warmup_depth());
    const int t = std::max(1, st.tensor_parallel());
    if (st.worker_ranks_size() % t != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "plan stage ", s, " names ", st.worker_ranks_size(),
          " worker ranks, not a multiple of its tensor-parallel degree ", t));
    }
    layout.tensor.push_back(t);
    ASSIGN_OR_RETURN(
        Recompute mode,
        ParseRecompute(st.recompute(),
                       absl::StrCat("plan stage ", s, " recompute")));
    layout.recompute.push_back(mode);
    expected = st.end_layer();
  }
  if (expected != num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("the plan covers ", expected,
                                                   " of the model's ",
                                                   num_layers, " layers"));
  }
  layout.layer_begin.push_back(num_layers);
  return layout;
}

std::vector<int> PipelineLayout::DataGroup(int s, int k) const {
  std::vector<int> group;
  for (int d = 0; d < Replicas(s); ++d) group.push_back(RankAt(s, d, k));
  return group;
}

std::vector<int> PipelineLayout::TensorGroup(int s, int d) const {
  std::vector<int> group;
  for (int k = 0; k < TensorDegree(s); ++k) group.push_back(RankAt(s, d, k));
  return group;
}

ir::Layout PipelineLayout::ChunkLayout() const {
  ir::Layout l;
  l.stages_per_rank = std::max(1, chunks);
  l.ranks = std::max(1, num_stages() / l.stages_per_rank);
  l.placement = policy == v1::SCHEDULE_ZB_V || v_placement
                    ? ir::Placement::kV
                    : ir::Placement::kLoop;
  return l;
}

std::vector<int> PipelineLayout::StagesOfRank(int rank) const {
  std::vector<int> stages;
  for (int s = 0; s < num_stages(); ++s) {
    for (int r : ranks[s]) {
      if (r == rank) stages.push_back(s);
    }
  }
  return stages;
}

absl::Status CheckChunks(const PipelineLayout& layout) {
  if (layout.chunks <= 1) return absl::OkStatus();
  const ir::Layout l = layout.ChunkLayout();
  if (layout.num_stages() != l.stages()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a plan of ", layout.num_stages(), " stages cannot hold ",
        layout.chunks, " chunks per worker: it needs a multiple of ",
        layout.chunks));
  }
  for (int s = 0; s < layout.num_stages(); ++s) {
    const int first = l.StagesOf(l.RankOf(s)).front();
    if (layout.ranks[s] != layout.ranks[first] ||
        layout.TensorDegree(s) != layout.TensorDegree(first)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "plan stage ", s, " is a chunk of pipeline position ", l.RankOf(s),
          " and must sit on the ranks (and tensor groups) of stage ", first));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Op>> RankSchedule(const PipelineLayout& layout,
                                             int rank, int64_t first) {
  RETURN_IF_ERROR(CheckChunks(layout));
  const std::vector<int> stages = layout.StagesOfRank(rank);
  if (stages.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " holds no stage of the plan"));
  }
  const std::vector<int>& ranks = layout.ranks[stages[0]];
  ProgramConfig c;
  c.replicas = layout.Replicas(stages[0]);
  // The members of a tensor group run their replica's list.
  const int replica =
      static_cast<int>(std::find(ranks.begin(), ranks.end(), rank) -
                       ranks.begin()) /
      layout.TensorDegree(stages[0]);
  for (int j = 0; j < layout.microbatches; ++j) {
    if (ReplicaFor(j, c.replicas) == replica) c.mine.push_back(j);
  }
  const ir::Layout where = layout.ChunkLayout();
  // A custom program, or the schedule's generated one.
  std::optional<ir::Program> generated;
  if (layout.program == nullptr) {
    ASSIGN_OR_RETURN(generated,
                     ProgramFor(layout.policy, where.ranks, layout.chunks,
                                static_cast<int>(c.mine.size())));
  }
  c.program = generated.has_value() ? &*generated : layout.program.get();
  c.rank = where.RankOf(stages[0]);
  c.num_minibatches = layout.num_minibatches - first;
  ASSIGN_OR_RETURN(std::vector<Op> ops, BuildProgramSchedule(c));
  for (Op& op : ops) op.minibatch += first;
  return ops;
}

int64_t JobLayout::loss_samples_per_minibatch() const {
  const int replicas = pipeline.Replicas(pipeline.num_stages() - 1);
  const int micro = pipeline.microbatches;
  int mine = 0;
  for (int j = 0; j < micro; ++j) mine += ReplicaFor(j, replicas) == replica;
  return batch_size / micro * mine;
}

absl::Status CheckAssignment(const StageAssignment& a) {
  if (a.job_id().empty() || a.stage() < 0 ||
      a.stage() >= a.plan().stages_size() || a.replica() < 0 ||
      a.replica() >=
          a.plan().stages(a.stage()).replicas() *
              std::max(1, a.plan().stages(a.stage()).tensor_parallel())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "assignment of stage ", a.stage(), " replica ", a.replica(),
        " does not fit its plan of ", a.plan().stages_size(), " stage(s)"));
  }
  return absl::OkStatus();
}

// Gradient accumulation: each of grad_accumulation passes runs the plan's
// microbatches, so a step runs that many times as many (pipeline/spec.h
// refuses schedules that do not split minibatches).
absl::StatusOr<int> WithAccumulation(const JobSpec& spec,
                                     const PipelinePolicy& policy, int micro) {
  const int64_t passes = std::max<int64_t>(1, spec.grad_accumulation());
  if (passes == 1) return micro;
  if (!SplitsMinibatches(policy.schedule)) {
    return absl::InvalidArgumentError(
        absl::StrCat("grad_accumulation=", passes,
                     " needs a schedule that splits "
                     "minibatches, not ",
                     ScheduleName(policy.schedule)));
  }
  const int64_t total = passes * micro;
  if (total > kMaxMicrobatches || spec.batch_size() % total != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "grad_accumulation=", passes, " passes of the plan's ", micro,
        " microbatches (", total, ") do not divide batch_size=",
        spec.batch_size(), " (or exceed ", kMaxMicrobatches, ")"));
  }
  return static_cast<int>(total);
}

bool RunsLocally(const PartitionPlan& plan) {
  return plan.stages_size() == 1 && plan.stages(0).replicas() == 1 &&
         plan.stages(0).tensor_parallel() <= 1;
}

absl::StatusOr<JobLayout> LayoutFromAssignment(const StageAssignment& a,
                                               int num_layers,
                                               int64_t train_samples) {
  RETURN_IF_ERROR(CheckAssignment(a));
  const JobSpec& spec = a.spec();
  JobLayout layout;
  ASSIGN_OR_RETURN(layout.policy, ResolvePipeline(spec));
  // The coordinator decided the pipeline once, into the plan (plans from
  // before that resolve it here, from the spec, over the job's workers).
  const v1::PipelineDecision& decided = a.plan().pipeline();
  int micro = decided.microbatches();
  if (micro <= 0) {
    ASSIGN_OR_RETURN(micro, MicrobatchesFor(layout.policy, spec.batch_size(),
                                            a.world_size()));
  }
  if (decided.chunks() > 0) layout.policy.chunks = decided.chunks();
  if (!decided.schedule().empty()) {
    // "auto" in the spec: the schedule the coordinator picked.
    ASSIGN_OR_RETURN(layout.policy.schedule, ParseSchedule(decided.schedule()));
  }
  if (spec.batch_size() % micro != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the plan's ", micro,
        " microbatches do not divide batch_size=", spec.batch_size()));
  }
  ASSIGN_OR_RETURN(micro, WithAccumulation(spec, layout.policy, micro));
  ASSIGN_OR_RETURN(layout.total_steps, TotalSteps(spec, train_samples));
  ASSIGN_OR_RETURN(layout.pipeline,
                   LayoutFromPlan(a.plan(), num_layers, layout.policy.schedule,
                                  layout.total_steps, micro));
  layout.pipeline.chunks = layout.policy.chunks;
  layout.pipeline.v_placement = layout.policy.v_placement;
  if (layout.policy.schedule == v1::SCHEDULE_CUSTOM) {
    ASSIGN_OR_RETURN(ir::Program program, CustomProgram(spec.pipeline()));
    layout.pipeline.program =
        std::make_shared<const ir::Program>(std::move(program));
  }
  RETURN_IF_ERROR(CheckChunks(layout.pipeline));
  layout.stages = layout.policy.chunks > 1
                      ? layout.pipeline.StagesOfRank(a.rank())
                      : std::vector<int>{a.stage()};
  if (layout.stages.empty() || layout.stages.front() != a.stage()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the assignment of stage ", a.stage(), " to rank ",
                     a.rank(), " does not match its plan's chunks"));
  }
  const std::vector<int>& ranks = layout.pipeline.ranks[a.stage()];
  if (a.replica() >= static_cast<int>(ranks.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan stage ", a.stage(), " names ", ranks.size(),
                     " worker rank(s); this worker is replica ", a.replica()));
  }
  layout.stage = a.stage();
  const int t = layout.pipeline.TensorDegree(a.stage());
  layout.replica = a.replica() / t;
  layout.member = a.replica() % t;
  layout.rank = a.rank();
  layout.world_size = a.world_size();
  layout.layer_begin = layout.pipeline.layer_begin[a.stage()];
  layout.layer_end = layout.pipeline.layer_begin[a.stage() + 1];
  layout.batch_size = spec.batch_size();
  return layout;
}

std::string DescribeRanks(const StageAssignment& a) {
  std::string ranks;
  for (int s = 0; s < a.plan().stages_size() && s < a.peers_size(); ++s) {
    for (int r = 0; r < a.plan().stages(s).worker_ranks_size() &&
                    r < a.peers(s).worker_ids_size();
         ++r) {
      absl::StrAppend(&ranks, ranks.empty() ? "" : ", ",
                      a.plan().stages(s).worker_ranks(r), "=",
                      a.peers(s).worker_ids(r), " (stage ", s, ")");
    }
  }
  return ranks;
}

}  // namespace aqueduct
