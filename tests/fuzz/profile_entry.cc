// The profile target: a profile as `aq plan` reads it and as the
// coordinator takes one with a submission (PipeDream's text or a JSON
// ModelProfile), then what the planner does with it. Round trips: a graph
// read from text is written and read back to the same text; every graph
// goes through the proto form (what the coordinator journals) unchanged.
#include <string>

#include "common/check.h"
#include "common/status.h"
#include "coordinator/planner/plan.h"
#include "coordinator/planner/profile_graph.h"
#include "tests/fuzz/entries.h"

namespace aqueduct {
namespace fuzz {

namespace {

// The planner enumerates a graph's antichains, which grows quickly with
// the width of a DAG: only small graphs are planned, so that one input
// stays well under a second.
constexpr int kMostNodesPlanned = 10;

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
// one thread), under both cost models; the worker count varies with the
// input so that the fuzzer reaches replicated and straight plans.
void Plan(const ProfileGraph& graph, size_t input_size) {
  if (graph.size() > kMostNodesPlanned) return;
  for (CostModel model : {v1::COST_MODEL_PIPEDREAM, v1::COST_MODEL_AQUEDUCT}) {
    PlanRequest request;
    request.cost_model = model;
    request.levels = {{1 + static_cast<int>(input_size % 4), 1e9}};
    request.threads = 1;
    request.straight_pipeline = input_size % 2 == 0;
    absl::StatusOr<PartitionPlan> plan = MakePlan(graph, request);
    if (!plan.ok()) continue;
    AQ_CHECK(plan->stages_size() >= 1);
    AQ_CHECK(plan->workers_used() <= plan->workers_total());
  }
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
