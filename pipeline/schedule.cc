#include "pipeline/schedule.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "pipeline/ir/generate.h"
#include "pipeline/ir/lower.h"

namespace aqueduct {

const char* OpKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kRecvActivation:
      return "RecvActivation";
    case OpKind::kForward:
      return "F";
    case OpKind::kSendActivation:
      return "SendActivation";
    case OpKind::kRecvGradient:
      return "RecvGradient";
    case OpKind::kBackward:
      return "B";
    case OpKind::kBackwardInput:
      return "I";
    case OpKind::kBackwardWeight:
      return "W";
    case OpKind::kSendGradient:
      return "SendGradient";
    case OpKind::kAllReduce:
      return "AllReduce";
    case OpKind::kOptimizerStep:
      return "Step";
  }
  return "?";
}

namespace {

struct Builder {
  const ScheduleConfig& c;
  std::vector<Op> ops;
  bool first() const { return c.stage == 0; }
  bool last() const { return c.stage == c.num_stages - 1; }
  void Add(OpKind kind, int64_t m, int j) {
    ops.push_back({kind, m, j, c.stage});
  }
  void Forward(int64_t m, int j) {
    if (!first()) Add(OpKind::kRecvActivation, m, j);
    Add(OpKind::kForward, m, j);
    if (!last()) Add(OpKind::kSendActivation, m, j);
  }
  void Backward(int64_t m, int j) {
    if (!last()) Add(OpKind::kRecvGradient, m, j);
    Add(OpKind::kBackward, m, j);
    if (!first()) Add(OpKind::kSendGradient, m, j);
  }
  void BackwardInput(int64_t m, int j) {
    if (!last()) Add(OpKind::kRecvGradient, m, j);
    Add(OpKind::kBackwardInput, m, j);
    if (!first()) Add(OpKind::kSendGradient, m, j);
  }
  void Step(int64_t m) {
    if (c.replicas > 1) Add(OpKind::kAllReduce, m, 0);
    Add(OpKind::kOptimizerStep, m, 0);
  }
};

// This stage's F, I and W of one minibatch of a zero-bubble schedule, in
// the order of `rank` (the stage's list of ir::ComputeSchedule for these
// microbatches: the k-th of `mine`).
void ZeroBubble(const std::vector<ir::Action>& rank, int64_t m,
                const std::vector<int>& mine, Builder* b) {
  for (const ir::Action& a : rank) {
    const int j = mine[a.microbatch];
    if (a.kind == ir::Kind::kF) {
      b->Forward(m, j);
    } else if (a.kind == ir::Kind::kI) {
      b->BackwardInput(m, j);
    } else if (a.kind == ir::Kind::kW) {
      b->Add(OpKind::kBackwardWeight, m, j);
    }
  }
}

// The zero-bubble program's list for config `c`'s stage, over `count`
// microbatches.
absl::StatusOr<std::vector<ir::Action>> ZeroBubbleRank(const ScheduleConfig& c,
                                                       int count) {
  const ir::ScheduleKind kind = c.policy == v1::SCHEDULE_ZB_H2
                                    ? ir::ScheduleKind::kZbH2
                                    : ir::ScheduleKind::kZbH1;
  ASSIGN_OR_RETURN(ir::Program program,
                   ir::ComputeSchedule(kind, {c.num_stages, count, 1}));
  return program.ranks[c.stage];
}

absl::Status CheckConfig(const ScheduleConfig& c) {
  if (c.num_stages < 1 || c.stage < 0 || c.stage >= c.num_stages ||
      c.replicas < 1 || c.replica < 0 || c.replica >= c.replicas ||
      c.num_minibatches < 0 || c.microbatches < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("schedule for stage ", c.stage, " of ", c.num_stages,
                     ", replica ", c.replica, " of ", c.replicas, " with ",
                     c.microbatches, " microbatches is inconsistent"));
  }
  const bool two_bw = c.policy == v1::SCHEDULE_2BW;
  if (StashesWeights(c.policy) &&
      (c.replicas > 1 || (c.microbatches > 1 && !two_bw))) {
    return absl::InvalidArgumentError(absl::StrCat(
        ScheduleName(c.policy), " runs unreplicated stages",
        two_bw ? "" : " on whole minibatches",
        "; replicated stages need a flushing schedule (1f1b_flush, gpipe, "
        "zb_h1, zb_h2)"));
  }
  if (two_bw && c.microbatches < c.num_stages - 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "2bw needs at least as many microbatches as stages less one (",
        c.num_stages - 1, "), got ", c.microbatches,
        ": the first stage's warm-up must not outrun the version a "
        "minibatch uses"));
  }
  if (c.microbatches < c.replicas) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a stage with ", c.replicas, " replicas needs at least ", c.replicas,
        " microbatches per minibatch, got ", c.microbatches));
  }
  return absl::OkStatus();
}

// 1F1B over the stream of every minibatch's `micro` microbatches, never
// flushing: `depth` warm-up forwards, then one forward and one backward,
// then the drain; a step after the backward of each minibatch's last
// microbatch (1f1b_stashed and vertical sync: micro = 1; 2bw).
void OneFOneBStream(const ScheduleConfig& c, int depth, int micro, Builder* b) {
  const int64_t n = c.num_minibatches * micro;
  const int64_t warm = std::min<int64_t>(depth, n);
  auto backward = [&](int64_t g) {
    b->Backward(g / micro, static_cast<int>(g % micro));
    if (g % micro == micro - 1) b->Step(g / micro);
  };
  for (int64_t g = 0; g < warm; ++g) {
    b->Forward(g / micro, static_cast<int>(g % micro));
  }
  for (int64_t g = warm; g < n; ++g) {
    b->Forward(g / micro, static_cast<int>(g % micro));
    backward(g - warm);
  }
  for (int64_t g = std::max<int64_t>(0, n - warm); g < n; ++g) backward(g);
}

// The flushing schedules: per minibatch, this replica's microbatches.
absl::Status Flushing(const ScheduleConfig& c, int depth, Builder* b) {
  std::vector<int> mine;
  for (int j = 0; j < c.microbatches; ++j) {
    if (ReplicaFor(j, c.replicas) == c.replica) mine.push_back(j);
  }
  const int count = static_cast<int>(mine.size());
  std::vector<ir::Action> zero_bubble;
  if (SplitsBackward(c.policy)) {
    ASSIGN_OR_RETURN(zero_bubble, ZeroBubbleRank(c, count));
  }
  for (int64_t m = 0; m < c.num_minibatches; ++m) {
    if (SplitsBackward(c.policy)) {
      ZeroBubble(zero_bubble, m, mine, b);
    } else if (c.policy == v1::SCHEDULE_GPIPE) {
      for (int j : mine) b->Forward(m, j);
      for (int k = count - 1; k >= 0; --k) b->Backward(m, mine[k]);
    } else {
      const int warm = std::min(depth, count);
      for (int k = 0; k < warm; ++k) b->Forward(m, mine[k]);
      for (int k = warm; k < count; ++k) {
        b->Forward(m, mine[k]);
        b->Backward(m, mine[k - warm]);
      }
      for (int k = count - warm; k < count; ++k) b->Backward(m, mine[k]);
    }
    b->Step(m);
  }
  return absl::OkStatus();
}

OpKind OpKindOf(ir::Kind kind) {
  switch (kind) {
    case ir::Kind::kF:
      return OpKind::kForward;
    case ir::Kind::kB:
      return OpKind::kBackward;
    case ir::Kind::kI:
      return OpKind::kBackwardInput;
    case ir::Kind::kW:
      return OpKind::kBackwardWeight;
    case ir::Kind::kSendF:
      return OpKind::kSendActivation;
    case ir::Kind::kRecvF:
      return OpKind::kRecvActivation;
    case ir::Kind::kSendB:
      return OpKind::kSendGradient;
    case ir::Kind::kRecvB:
      return OpKind::kRecvGradient;
    case ir::Kind::kReduceGrad:
      return OpKind::kAllReduce;
    case ir::Kind::kStep:
      return OpKind::kOptimizerStep;
  }
  return OpKind::kOptimizerStep;
}

// One minibatch of the rank's lowered actions, with an all-reduce for every
// stage it steps when stages are replicated (whatever the program says),
// all before the first step.
std::vector<Op> MinibatchOps(const std::vector<ir::Action>& actions,
                             const ProgramConfig& c) {
  std::vector<Op> ops, reduces;
  size_t first_step = 0;
  bool stepped = false;
  for (const ir::Action& a : actions) {
    const OpKind kind = OpKindOf(a.kind);
    if (kind == OpKind::kAllReduce) continue;  // Made below where needed.
    if (kind == OpKind::kOptimizerStep) {
      if (c.replicas > 1)
        reduces.push_back({OpKind::kAllReduce, 0, 0, a.stage});
      if (!stepped) first_step = ops.size();
      stepped = true;
    }
    const bool micro = kind != OpKind::kOptimizerStep;
    ops.push_back({kind, 0, micro ? c.mine[a.microbatch] : 0, a.stage});
  }
  if (!stepped) first_step = ops.size();
  ops.insert(ops.begin() + static_cast<std::ptrdiff_t>(first_step),
             reduces.begin(), reduces.end());
  return ops;
}

}  // namespace

absl::StatusOr<ir::Program> ProgramFor(Schedule policy, int ranks, int chunks,
                                       int microbatches) {
  ir::ScheduleKind kind;
  switch (policy) {
    case v1::SCHEDULE_GPIPE:
      kind = ir::ScheduleKind::kGpipe;
      break;
    case v1::SCHEDULE_1F1B_FLUSH:
      kind = ir::ScheduleKind::k1F1B;
      break;
    case v1::SCHEDULE_ZB_H1:
      kind = ir::ScheduleKind::kZbH1;
      break;
    case v1::SCHEDULE_ZB_H2:
      kind = ir::ScheduleKind::kZbH2;
      break;
    case v1::SCHEDULE_INTERLEAVED_1F1B:
      kind = ir::ScheduleKind::kInterleaved1F1B;
      break;
    case v1::SCHEDULE_ZB_V:
      kind = ir::ScheduleKind::kZbV;
      chunks = 2;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(ScheduleName(policy),
                       " overlaps its minibatches: it has no one-minibatch "
                       "program"));
  }
  if (!HoldsChunks(policy)) chunks = 1;
  return ir::ComputeSchedule(kind, {ranks, microbatches, chunks});
}

absl::StatusOr<ir::Simulation> PredictSchedule(Schedule policy, int ranks,
                                               int chunks, int microbatches,
                                               double rank_compute_s) {
  ASSIGN_OR_RETURN(const ir::Program program,
                   ProgramFor(policy, ranks, chunks, microbatches));
  return SimulateProgram(program, rank_compute_s);
}

absl::StatusOr<ir::Simulation> SimulateProgram(const ir::Program& program,
                                               double rank_compute_s) {
  const double f = rank_compute_s / std::max(1, program.microbatches) / 3;
  ir::ActionCosts costs;
  costs.f = costs.i = costs.w = f;
  costs.b = 2 * f;
  return ir::Simulate(ir::IsComputeOnly(program) ? ir::Lower(program) : program,
                      costs);
}

absl::StatusOr<std::vector<Op>> BuildProgramSchedule(const ProgramConfig& c) {
  if (c.program == nullptr || c.rank < 0 ||
      c.rank >= static_cast<int>(c.program->ranks.size()) ||
      static_cast<int>(c.mine.size()) != c.program->microbatches ||
      c.num_minibatches < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a program schedule for rank ", c.rank, " with ",
                     c.mine.size(), " microbatches does not fit its program"));
  }
  const ir::Program lowered =
      ir::IsComputeOnly(*c.program) ? ir::Lower(*c.program) : *c.program;
  const std::vector<Op> once = MinibatchOps(lowered.ranks[c.rank], c);
  std::vector<Op> ops;
  ops.reserve(once.size() * static_cast<size_t>(c.num_minibatches));
  for (int64_t m = 0; m < c.num_minibatches; ++m) {
    for (Op op : once) {
      op.minibatch = m;
      ops.push_back(op);
    }
  }
  return ops;
}

absl::StatusOr<std::vector<Op>> BuildSchedule(const ScheduleConfig& c) {
  RETURN_IF_ERROR(CheckConfig(c));
  const int depth =
      c.warmup_depth >= 0 ? c.warmup_depth : c.num_stages - c.stage - 1;
  Builder b{c, {}};
  if (StashesWeights(c.policy)) {
    OneFOneBStream(c, depth, c.policy == v1::SCHEDULE_2BW ? c.microbatches : 1,
                   &b);
  } else {
    RETURN_IF_ERROR(Flushing(c, depth, &b));
  }
  return b.ops;
}

}  // namespace aqueduct
