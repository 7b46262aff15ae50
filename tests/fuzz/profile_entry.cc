// The profile target: a profile as `aq plan` reads it and as the
// coordinator takes one with a submission (PipeDream's text or a JSON
// ModelProfile), then what the planner and the memory checks do with it. Round
// trips: a graph read from text is written and read back to the same text;
// every graph goes through the proto form (what the coordinator journals)
// unchanged.
#include <string>
#include <vector>

#include "common/check.h"
#include "common/status.h"
#include "coordinator/planner/memory_fit.h"
#include "coordinator/planner/plan.h"
#include "coordinator/planner/profile_graph.h"
#include "pipeline/policy.h"
#include "tests/fuzz/entries.h"

namespace aqueduct {
namespace fuzz {

namespace {

// The planner enumerates a graph's antichains, which grows quickly with
// the width of a DAG: only small graphs are planned, so that one input
// stays well under a second.
constexpr int kMostNodesPlanned = 10;

// Each worker's memory in the fit checks: a 16 GiB device.
constexpr int64_t kWorkerMemory = int64_t{16} << 30;

void CheckRoundTrips(const ProfileGraph& graph, bool from_text) {
  if (from_text) {
    const std::string text = graph.ToPipeDreamText();
    absl::StatusOr<ProfileGraph> again = ProfileGraph::FromPipeDreamText(text);
    AQ_CHECK(again.ok());
    AQ_CHECK(again->ToPipeDreamText() == text);
  }
  const ModelProfile proto = graph.ToProto();
  absl::StatusOr<ProfileGraph> again = ProfileGraph::FromProto(proto);
  AQ_CHECK(again.ok());
  AQ_CHECK(again->ToProto().SerializeAsString() == proto.SerializeAsString());
}

// The planner on `graph` as the coordinator's driver asks it (one level,
// one thread; coordinator/driver.cc RequestFor), under both cost models;
// the workers, schedule and microbatches vary with the input so that the
// fuzzer reaches replicated, straight and flushed plans. Then the checks
// the coordinator makes of a plan and of a supplied profile against its
// workers' memory.
void Plan(const ProfileGraph& graph, size_t input_size) {
  if (graph.size() > kMostNodesPlanned) return;
  const int workers = 1 + static_cast<int>(input_size % 4);
  const Schedule schedules[] = {v1::SCHEDULE_1F1B_STASHED,
                                v1::SCHEDULE_1F1B_FLUSH, v1::SCHEDULE_GPIPE};
  for (CostModel model : {v1::COST_MODEL_PIPEDREAM, v1::COST_MODEL_AQUEDUCT}) {
    PlanRequest request;
    request.cost_model = model;
    request.schedule = schedules[input_size / 4 % 3];
    request.levels = {{workers, 1e9}};
    request.threads = 1;
    request.microbatches = workers;
    request.optimizer_state_factor = 2;
    request.straight_pipeline = StashesWeights(request.schedule);
    absl::StatusOr<PartitionPlan> plan = MakePlan(graph, request);
    if (!plan.ok()) continue;
    AQ_CHECK(plan->stages_size() >= 1);
    AQ_CHECK(plan->workers_used() <= plan->workers_total());
    for (const PlanStage& stage : plan->stages()) {
      // Layers, when the profile maps to them, are a non-empty range.
      AQ_CHECK(stage.first_layer() < 0 ||
               stage.end_layer() > stage.first_layer());
    }
    (void)CheckPlanFits(*plan, std::vector<int64_t>(workers, kWorkerMemory),
                        std::vector<std::string>(workers, "fuzz-worker"));
  }
  JobSpec spec;
  spec.set_batch_size(8);
  spec.mutable_optimizer()->mutable_adam()->set_lr(1e-3f);
  spec.mutable_pipeline()->set_workers(workers);
  (void)CheckProfileFits(graph, spec,
                         {kWorkerMemory, "a fuzz worker's memory"});
}

}  // namespace

absl::Status ProfileEntry(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  ASSIGN_OR_RETURN(const ProfileGraph graph, ParseProfile(text, ""));
  const size_t first = text.find_first_not_of(" \t\r\n");
  CheckRoundTrips(graph, first == std::string::npos || text[first] != '{');
  Plan(graph, size);
  return absl::OkStatus();
}

}  // namespace fuzz
}  // namespace aqueduct
