#include "pipeline/ir/lower.h"

#include <vector>

namespace aqueduct::ir {
namespace {

// Appends `a` to `out` with the communication around it on rank `r`.
void Emit(const Layout& l, int r, const Action& a, std::vector<Action>* out) {
  const int s = a.stage, u = a.microbatch;
  const bool remote_prev = s > 0 && l.RankOf(s - 1) != r;
  const bool remote_next = s + 1 < l.stages() && l.RankOf(s + 1) != r;
  switch (a.kind) {
    case Kind::kF:
      if (remote_prev) out->push_back({s, Kind::kRecvF, u});
      out->push_back(a);
      if (remote_next) out->push_back({s, Kind::kSendF, u});
      break;
    case Kind::kB:
    case Kind::kI:
      if (remote_next) out->push_back({s, Kind::kRecvB, u});
      out->push_back(a);
      if (remote_prev) out->push_back({s, Kind::kSendB, u});
      break;
    case Kind::kW:
      out->push_back(a);
      break;
    default:
      break;  // Communication and steps are made anew.
  }
}

}  // namespace

bool IsComputeOnly(const Program& program) {
  for (const auto& actions : program.ranks) {
    for (const Action& a : actions) {
      if (!IsCompute(a.kind)) return false;
    }
  }
  return true;
}

Program Lower(const Program& compute, const LowerOptions& options) {
  Program out = compute;
  for (size_t r = 0; r < compute.ranks.size(); ++r) {
    std::vector<Action>& actions = out.ranks[r];
    actions.clear();
    for (const Action& a : compute.ranks[r]) {
      Emit(compute.layout, static_cast<int>(r), a, &actions);
    }
    for (int s : compute.layout.StagesOf(static_cast<int>(r))) {
      if (options.reduce_grad) actions.push_back({s, Kind::kReduceGrad, 0});
      actions.push_back({s, Kind::kStep, 0});
    }
  }
  return out;
}

}  // namespace aqueduct::ir
