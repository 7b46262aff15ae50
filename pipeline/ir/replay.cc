#include "pipeline/ir/replay.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace aqueduct::ir {
namespace {

enum Flag : uint16_t {
  kDidF = 1,
  kDidB = 2,
  kDidI = 4,
  kDidW = 8,
  kGotF = 16,
  kGotB = 32,
  kSentF = 64,
  kSentB = 128,
};

// Whether microbatch u's backward of a stage is whole (B, or I then W).
bool BackwardDone(uint16_t f) { return (f & kDidB) || (f & kDidW); }

// What the ranks did to each (stage, microbatch) and stage: one table for
// every rank (a rank touches only its own stages').
struct Marks {
  Marks(int stages, int microbatches)
      : flags(stages, std::vector<uint16_t>(microbatches, 0)),
        reduced(stages, false),
        stepped(stages, false) {}
  std::vector<std::vector<uint16_t>> flags;
  std::vector<bool> reduced, stepped;
};

// Checks one rank's list on its own (Validate's first half).
class RankChecker {
 public:
  RankChecker(const Program& p, int rank, Marks* marks)
      : p_(p),
        l_(p.layout),
        r_(rank),
        flags_(marks->flags),
        reduced_(marks->reduced),
        stepped_(marks->stepped) {}

  absl::Status Check() {
    const std::vector<Action>& actions = p_.ranks[r_];
    for (size_t k = 0; k < actions.size(); ++k) {
      const std::string why = Rule(actions[k]);
      if (!why.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("rank ", r_, ", action ", k, " (",
                         ActionText(actions[k]), "): ", why));
      }
    }
    const std::string missing = Missing();
    if (missing.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("rank ", r_, ": ", missing));
  }

 private:
  // Why `a` may not come here ("" when it may).
  std::string Rule(const Action& a) {
    const int s = a.stage;
    if (s < 0 || s >= l_.stages()) {
      return absl::StrCat("stage ", s, " does not exist (", l_.stages(),
                          " stages)");
    }
    if (l_.RankOf(s) != r_) {
      return absl::StrCat("stage ", s, " is on rank ", l_.RankOf(s));
    }
    if (a.kind == Kind::kReduceGrad || a.kind == Kind::kStep) {
      return StageRule(a);
    }
    if (a.microbatch < 0 || a.microbatch >= p_.microbatches) {
      return absl::StrCat("microbatch ", a.microbatch, " does not exist (",
                          p_.microbatches, " microbatches)");
    }
    std::string why = IsCompute(a.kind) ? ComputeRule(a) : CommRule(a);
    if (why.empty()) Mark(a);
    return why;
  }

  std::string ComputeRule(const Action& a) {
    const int s = a.stage, u = a.microbatch;
    const uint16_t f = flags_[s][u];
    switch (a.kind) {
      case Kind::kF:
        if (f & kDidF) return "a second F of this microbatch";
        if (s == 0) return "";
        if (l_.RankOf(s - 1) == r_) {
          return (flags_[s - 1][u] & kDidF)
                     ? ""
                     : absl::StrCat("F before stage ", s - 1,
                                    "'s F of the microbatch");
        }
        return (f & kGotF) ? "" : "F before its RECV_F";
      case Kind::kB:
      case Kind::kI:
        if (!(f & kDidF)) return "a backward before its F";
        if (f & (kDidB | kDidI)) return "a second backward of this microbatch";
        if (s + 1 == l_.stages()) return "";
        if (l_.RankOf(s + 1) == r_) {
          return (flags_[s + 1][u] & (kDidB | kDidI))
                     ? ""
                     : absl::StrCat("a backward before stage ", s + 1,
                                    "'s of the microbatch");
        }
        return (f & kGotB) ? "" : "a backward before its RECV_B";
      default:  // W
        if (f & kDidW) return "a second W of this microbatch";
        return (f & kDidI) ? "" : "W before its I";
    }
  }

  std::string CommRule(const Action& a) {
    const int s = a.stage;
    const uint16_t f = flags_[s][a.microbatch];
    const bool forward = a.kind == Kind::kSendF || a.kind == Kind::kRecvF;
    const bool send = a.kind == Kind::kSendF || a.kind == Kind::kSendB;
    // The stage on the other end.
    const int other = (forward == send) ? s + 1 : s - 1;
    if (other < 0 || other >= l_.stages()) {
      return absl::StrCat("stage ", s, " has no neighbour to ",
                          send ? "send to" : "receive from", " that way");
    }
    if (l_.RankOf(other) == r_) {
      return absl::StrCat("stage ", other,
                          " is on this rank: nothing to send or receive");
    }
    const uint16_t bit = a.kind == Kind::kSendF   ? kSentF
                         : a.kind == Kind::kSendB ? kSentB
                         : a.kind == Kind::kRecvF ? kGotF
                                                  : kGotB;
    if (f & bit) return "the same message a second time";
    if (a.kind == Kind::kSendF && !(f & kDidF)) return "SEND_F before its F";
    if (a.kind == Kind::kSendB && !(f & (kDidB | kDidI))) {
      return "SEND_B before its B or I";
    }
    return "";
  }

  std::string StageRule(const Action& a) {
    const int s = a.stage;
    for (int u = 0; u < p_.microbatches; ++u) {
      if (!BackwardDone(flags_[s][u])) {
        return absl::StrCat("before the weight gradients of microbatch ", u);
      }
    }
    if (stepped_[s]) {
      return a.kind == Kind::kStep ? "a second STEP" : "REDUCE_GRAD after STEP";
    }
    if (a.kind == Kind::kReduceGrad) {
      if (reduced_[s]) return "a second REDUCE_GRAD";
      reduced_[s] = true;
    } else {
      stepped_[s] = true;
    }
    return "";
  }

  void Mark(const Action& a) {
    uint16_t& f = flags_[a.stage][a.microbatch];
    switch (a.kind) {
      case Kind::kF:
        f |= kDidF;
        break;
      case Kind::kB:
        f |= kDidB;
        break;
      case Kind::kI:
        f |= kDidI;
        break;
      case Kind::kW:
        f |= kDidW;
        break;
      case Kind::kSendF:
        f |= kSentF;
        break;
      case Kind::kSendB:
        f |= kSentB;
        break;
      case Kind::kRecvF:
        f |= kGotF;
        break;
      case Kind::kRecvB:
        f |= kGotB;
        break;
      default:
        break;
    }
  }

  // What the rank never does ("" when nothing).
  std::string Missing() const {
    for (int s : l_.StagesOf(r_)) {
      const bool remote_next = s + 1 < l_.stages() && l_.RankOf(s + 1) != r_;
      const bool remote_prev = s > 0 && l_.RankOf(s - 1) != r_;
      for (int u = 0; u < p_.microbatches; ++u) {
        const uint16_t f = flags_[s][u];
        const std::string what = absl::StrCat("stage ", s, ", microbatch ", u);
        if (!(f & kDidF)) return absl::StrCat(what, ": no F");
        if ((f & kDidI) && !(f & kDidW)) return absl::StrCat(what, ": I, no W");
        if (!BackwardDone(f)) return absl::StrCat(what, ": no B (or I and W)");
        if (remote_next && !(f & kSentF))
          return absl::StrCat(what, ": no SEND_F");
        if (remote_prev && !(f & kSentB))
          return absl::StrCat(what, ": no SEND_B");
      }
      if (!stepped_[s]) return absl::StrCat("stage ", s, ": no STEP");
    }
    return "";
  }

  const Program& p_;
  const Layout& l_;
  const int r_;
  std::vector<std::vector<uint16_t>>& flags_;
  std::vector<bool>&reduced_, &stepped_;
};

// Runs every rank together: receives wait for their sends.
class Replayer {
 public:
  Replayer(const Program& p, const ActionCosts& c)
      : p_(p),
        c_(c),
        scale_(1.0 / p.layout.stages_per_rank),
        pos_(p.ranks.size(), 0),
        time_(p.ranks.size(), 0),
        start_(p.ranks.size(), -1),
        busy_(p.ranks.size(), 0),
        held_(p.ranks.size(), 0),
        peak_(p.ranks.size(), 0),
        timeline_(p.ranks.size()) {}

  absl::StatusOr<Simulation> Run() {
    bool moved = true;
    while (moved) {
      moved = false;
      for (size_t r = 0; r < p_.ranks.size(); ++r) {
        while (pos_[r] < p_.ranks[r].size() && StepRank(r)) moved = true;
      }
    }
    if (std::string blocked = Blocked(); !blocked.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the ranks deadlock: ", blocked));
    }
    return Result();
  }

 private:
  // (F or B, the receiving stage, the microbatch) of a message.
  using Message = std::tuple<bool, int, int>;

  static Message Sent(const Action& a) {
    const bool f = a.kind == Kind::kSendF;
    return {f, f ? a.stage + 1 : a.stage - 1, a.microbatch};
  }
  static Message Wanted(const Action& a) {
    return {a.kind == Kind::kRecvF, a.stage, a.microbatch};
  }

  double Cost(const Action& a) const {
    switch (a.kind) {
      case Kind::kF:
        return c_.f * scale_;
      case Kind::kB:
        return c_.b * scale_;
      case Kind::kI:
        return c_.i * scale_;
      case Kind::kW:
        return c_.w * scale_;
      case Kind::kReduceGrad:
        return c_.reduce_grad * scale_;
      case Kind::kStep:
        return c_.step * scale_;
      default:
        return 0;
    }
  }

  // Carries out rank r's next action; false when it waits for a message.
  bool StepRank(size_t r) {
    const Action& a = p_.ranks[r][pos_[r]];
    if (a.kind == Kind::kRecvF || a.kind == Kind::kRecvB) {
      auto it = posted_.find(Wanted(a));
      if (it == posted_.end()) return false;
      time_[r] = std::max(time_[r], it->second);
    } else if (a.kind == Kind::kSendF || a.kind == Kind::kSendB) {
      posted_[Sent(a)] = time_[r] + c_.transfer;
    } else {
      if (start_[r] < 0) start_[r] = time_[r];
      timeline_[r].push_back({time_[r], time_[r] + Cost(a), a});
      time_[r] += Cost(a);
      busy_[r] += Cost(a);
      Hold(r, a);
    }
    ++pos_[r];
    return true;
  }

  void Hold(size_t r, const Action& a) {
    if (a.kind == Kind::kF) held_[r] += scale_;
    if (a.kind == Kind::kB || a.kind == Kind::kI) held_[r] -= scale_;
    peak_[r] = std::max(peak_[r], held_[r]);
  }

  std::string Blocked() const {
    std::vector<std::string> out;
    for (size_t r = 0; r < p_.ranks.size(); ++r) {
      if (pos_[r] == p_.ranks[r].size()) continue;
      const Action& a = p_.ranks[r][pos_[r]];
      std::string line = absl::StrCat("rank ", r, " waits at action ", pos_[r],
                                      " (", ActionText(a), ")");
      const int from =
          p_.layout.RankOf(a.kind == Kind::kRecvF ? a.stage - 1 : a.stage + 1);
      if (from >= 0 && static_cast<size_t>(from) < pos_.size() &&
          pos_[from] == p_.ranks[from].size()) {
        absl::StrAppend(&line, ", which rank ", from,
                        " finished without sending");
      }
      out.push_back(line);
    }
    return absl::StrJoin(out, "; ");
  }

  Simulation Result() const {
    Simulation s;
    s.busy = busy_;
    s.peak_activations = peak_;
    s.timeline = timeline_;
    s.makespan = *std::max_element(time_.begin(), time_.end());
    for (size_t r = 0; r < time_.size(); ++r) {
      s.step_time = std::max(s.step_time, time_[r] - std::max(0.0, start_[r]));
    }
    const double ideal = *std::max_element(busy_.begin(), busy_.end());
    s.bubble = ideal > 0 ? s.step_time / ideal - 1 : 0;
    return s;
  }

  const Program& p_;
  const ActionCosts& c_;
  const double scale_;
  std::map<Message, double> posted_;
  std::vector<size_t> pos_;
  // When each rank began its first computation (-1: not yet).
  std::vector<double> time_, start_, busy_, held_, peak_;
  std::vector<std::vector<Simulation::Slot>> timeline_;
};

}  // namespace

absl::Status Validate(const Program& program) {
  if (absl::Status s = CheckLayout(program.layout); !s.ok()) return s;
  if (static_cast<int>(program.ranks.size()) != program.layout.ranks) {
    return absl::InvalidArgumentError(
        absl::StrCat("the program lists ", program.ranks.size(),
                     " ranks; its layout has ", program.layout.ranks));
  }
  if (program.microbatches < 1) {
    return absl::InvalidArgumentError("a program needs at least 1 microbatch");
  }
  if (static_cast<int64_t>(program.layout.stages()) * program.microbatches >
      kMaxStageMicrobatches) {
    return absl::InvalidArgumentError(
        absl::StrCat("the program has ", program.layout.stages(), " stages of ",
                     program.microbatches, " microbatches; at most ",
                     kMaxStageMicrobatches, " (stage, microbatch) pairs"));
  }
  Marks marks(program.layout.stages(), program.microbatches);
  for (int r = 0; r < program.layout.ranks; ++r) {
    if (absl::Status s = RankChecker(program, r, &marks).Check(); !s.ok()) {
      return s;
    }
  }
  absl::StatusOr<Simulation> run = Replayer(program, ActionCosts{}).Run();
  if (!run.ok()) return absl::InvalidArgumentError(run.status().message());
  return absl::OkStatus();
}

absl::StatusOr<Simulation> Simulate(const Program& program,
                                    const ActionCosts& costs) {
  if (static_cast<int>(program.ranks.size()) != program.layout.ranks ||
      program.layout.stages_per_rank < 1) {
    return absl::InvalidArgumentError("the program's ranks and layout differ");
  }
  return Replayer(program, costs).Run();
}

namespace {

// The shortest computation of the timeline (1 when there is none).
double ShortestSlot(const Simulation& sim) {
  double q = 0;
  for (const auto& slots : sim.timeline) {
    for (const Simulation::Slot& slot : slots) {
      const double d = slot.end - slot.start;
      if (d > 0 && (q == 0 || d < q)) q = d;
    }
  }
  return q > 0 ? q : 1;
}

// Rank r's line of the grid.
std::string GridLine(const std::vector<Simulation::Slot>& slots, double q,
                     int columns, size_t width) {
  std::string line;
  size_t k = 0;
  for (int c = 0; c < columns; ++c) {
    const double mid = (c + 0.5) * q;
    while (k < slots.size() && slots[k].end <= mid) ++k;
    std::string cell = k < slots.size() && slots[k].start <= mid
                           ? ActionText(slots[k].action)
                           : ".";
    cell.resize(width, ' ');
    absl::StrAppend(&line, " ", cell);
  }
  return line;
}

}  // namespace

std::string TimeGrid(const Simulation& sim, double quantum, int max_columns) {
  const double q = quantum > 0 ? quantum : ShortestSlot(sim);
  double end = 0;
  size_t width = 1;
  for (const auto& slots : sim.timeline) {
    for (const Simulation::Slot& slot : slots) {
      end = std::max(end, slot.end);
      if (slot.end > slot.start) {
        width = std::max(width, ActionText(slot.action).size());
      }
    }
  }
  const int needed = static_cast<int>(std::ceil(end / q - 1e-9));
  const int columns = std::min(needed, std::max(1, max_columns));
  std::string out;
  for (size_t r = 0; r < sim.timeline.size(); ++r) {
    absl::StrAppend(&out, "rank ", r, " |",
                    GridLine(sim.timeline[r], q, columns, width),
                    columns < needed ? " ..." : "", "\n");
  }
  return out;
}

}  // namespace aqueduct::ir
