#include "pipeline/ir/generate.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace aqueduct::ir {
namespace {

constexpr std::pair<ScheduleKind, const char*> kNames[] = {
    {ScheduleKind::kGpipe, "gpipe"},
    {ScheduleKind::k1F1B, "1f1b_flush"},
    {ScheduleKind::kInterleaved1F1B, "interleaved_1f1b"},
    {ScheduleKind::kZbH1, "zb_h1"},
    {ScheduleKind::kZbH2, "zb_h2"},
    {ScheduleKind::kZbV, "zb_v"},
};

Program Empty(const Layout& layout, int microbatches) {
  Program p;
  p.layout = layout;
  p.microbatches = microbatches;
  p.ranks.assign(layout.ranks, {});
  return p;
}

Program Gpipe(int ranks, int m) {
  Program p = Empty(Layout{ranks, 1, Placement::kLoop}, m);
  for (int r = 0; r < ranks; ++r) {
    for (int u = 0; u < m; ++u) p.ranks[r].push_back({r, Kind::kF, u});
    for (int u = m - 1; u >= 0; --u) p.ranks[r].push_back({r, Kind::kB, u});
  }
  return p;
}

Program OneFOneB(int ranks, int m) {
  Program p = Empty(Layout{ranks, 1, Placement::kLoop}, m);
  for (int r = 0; r < ranks; ++r) {
    std::vector<Action>& out = p.ranks[r];
    const int warm = std::min(ranks - r - 1, m);
    for (int u = 0; u < warm; ++u) out.push_back({r, Kind::kF, u});
    for (int u = warm; u < m; ++u) {
      out.push_back({r, Kind::kF, u});
      out.push_back({r, Kind::kB, u - warm});
    }
    for (int u = m - warm; u < m; ++u) out.push_back({r, Kind::kB, u});
  }
  return p;
}

// ZB-H1 as the zero-bubble paper builds it by hand: 1F1B with each B split
// into I and W, rank r's W of microbatch u placed after its I of
// microbatch u + r (the last ranks, whose activations are fewest, defer
// the most W's into the drain), the rest at the end. A rank then holds at
// most p microbatches from F to W, 1F1B's peak at the first rank.
Program ZbH1(int ranks, int m) {
  Program p = OneFOneB(ranks, m);
  for (int r = 0; r < ranks; ++r) {
    std::vector<Action> out;
    int next_w = 0;
    for (const Action& a : p.ranks[r]) {
      if (a.kind != Kind::kB) {
        out.push_back(a);
        continue;
      }
      out.push_back({r, Kind::kI, a.microbatch});
      if (a.microbatch >= r) out.push_back({r, Kind::kW, next_w++});
    }
    while (next_w < m) out.push_back({r, Kind::kW, next_w++});
    p.ranks[r] = std::move(out);
  }
  return p;
}

// Megatron-LM's order: the k-th forward (or backward) of rank r.
Action InterleavedAction(int r, int p, int v, int k, bool forward) {
  const int in_group = k % (p * v);
  int chunk = in_group / p;
  if (!forward) chunk = v - 1 - chunk;
  const int microbatch = (k / (p * v)) * p + in_group % p;
  return {chunk * p + r, forward ? Kind::kF : Kind::kB, microbatch};
}

Program Interleaved(int ranks, int m, int v) {
  Program p = Empty(Layout{ranks, v, Placement::kLoop}, m);
  const int total = m * v;
  for (int r = 0; r < ranks; ++r) {
    std::vector<Action>& out = p.ranks[r];
    const int warm =
        m == ranks ? total
                   : std::min(total, 2 * (ranks - r - 1) + (v - 1) * ranks);
    for (int k = 0; k < warm; ++k) {
      out.push_back(InterleavedAction(r, ranks, v, k, true));
    }
    for (int k = 0; k < total - warm; ++k) {
      out.push_back(InterleavedAction(r, ranks, v, warm + k, true));
      out.push_back(InterleavedAction(r, ranks, v, k, false));
    }
    for (int k = total - warm; k < total; ++k) {
      out.push_back(InterleavedAction(r, ranks, v, k, false));
    }
  }
  return p;
}

// List scheduling of F, I, W at unit costs (the zero-bubble schedules).
class ZeroBubble {
 public:
  ZeroBubble(const Layout& layout, int m, std::vector<int> limits)
      : layout_(layout),
        m_(m),
        limits_(std::move(limits)),
        program_(Empty(layout, m)),
        f_end_(layout.stages(), std::vector<int>(m, kNever)),
        i_end_(layout.stages(), std::vector<int>(m, kNever)),
        next_f_(layout.stages(), 0),
        next_i_(layout.stages(), 0),
        time_(layout.ranks, 0),
        in_flight_(layout.ranks, 0),
        pending_w_(layout.ranks),
        left_(layout.ranks, 3 * m * layout.stages_per_rank) {}

  Program Run() {
    for (int r = Next(); r >= 0; r = Next()) {
      // Nothing ready: wait one unit (every action takes one).
      if (!RunOne(r)) ++time_[r];
    }
    return std::move(program_);
  }

 private:
  static constexpr int kNever = std::numeric_limits<int>::max();

  // The rank with work left at the earliest time (-1: none).
  int Next() const {
    int best = -1;
    for (int r = 0; r < layout_.ranks; ++r) {
      if (left_[r] > 0 && (best < 0 || time_[r] < time_[best])) best = r;
    }
    return best;
  }

  // When stage s's F or I of microbatch u may start (kNever: not known).
  int FReady(int s, int u) const { return s == 0 ? 0 : f_end_[s - 1][u]; }
  int IReady(int s, int u) const {
    const int grad = s + 1 == layout_.stages() ? 0 : i_end_[s + 1][u];
    return std::max(f_end_[s][u], grad);
  }

  // Runs one action of rank r that is ready now; false when none is.
  bool RunOne(int r) {
    const int now = time_[r];
    for (int s : Deepest(r)) {  // I first: it frees the previous stages.
      const int u = next_i_[s];
      if (u < m_ && IReady(s, u) <= now) return Do(r, {s, Kind::kI, u});
    }
    if (in_flight_[r] < limits_[r]) {
      for (int s : Deepest(r)) {
        const int u = next_f_[s];
        if (u < m_ && FReady(s, u) <= now) return Do(r, {s, Kind::kF, u});
      }
    }
    if (!pending_w_[r].empty()) {
      Action w = pending_w_[r].front();
      pending_w_[r].pop_front();
      return Do(r, w);
    }
    return false;
  }

  // Rank r's stages, deepest first.
  std::vector<int> Deepest(int r) const {
    std::vector<int> stages = layout_.StagesOf(r);
    std::reverse(stages.begin(), stages.end());
    return stages;
  }

  bool Do(int r, const Action& a) {
    const int end = ++time_[r];
    program_.ranks[r].push_back(a);
    --left_[r];
    if (a.kind == Kind::kF) {
      f_end_[a.stage][a.microbatch] = end;
      ++next_f_[a.stage];
      ++in_flight_[r];
    } else if (a.kind == Kind::kI) {
      i_end_[a.stage][a.microbatch] = end;
      ++next_i_[a.stage];
      pending_w_[r].push_back({a.stage, Kind::kW, a.microbatch});
      --in_flight_[r];
    }
    return true;
  }

  const Layout layout_;
  const int m_;
  const std::vector<int> limits_;
  Program program_;
  std::vector<std::vector<int>> f_end_, i_end_;
  std::vector<int> next_f_, next_i_, time_, in_flight_;
  std::vector<std::deque<Action>> pending_w_;
  std::vector<int> left_;
};

absl::Status CheckShape(ScheduleKind kind, const ScheduleShape& s) {
  if (s.ranks < 1 || s.microbatches < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a schedule needs at least 1 rank and 1 microbatch, got ",
                     s.ranks, " and ", s.microbatches));
  }
  if (kind == ScheduleKind::kInterleaved1F1B) {
    if (s.chunks < 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "interleaved_1f1b needs at least 2 chunks per rank, got ", s.chunks,
          " (with 1 it is 1f1b_flush)"));
    }
    if (s.microbatches % s.ranks != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "interleaved_1f1b needs the microbatches (", s.microbatches,
          ") to be a multiple of the ranks (", s.ranks,
          "): Megatron-LM's rule, each chunk takes the microbatches ", s.ranks,
          " at a time"));
    }
  } else if (s.chunks != 1 && !(kind == ScheduleKind::kZbV && s.chunks == 2)) {
    return absl::InvalidArgumentError(
        absl::StrCat(ScheduleKindName(kind), " holds ",
                     kind == ScheduleKind::kZbV ? "2 chunks" : "1 chunk",
                     " per rank; chunks is ", s.chunks));
  }
  return absl::OkStatus();
}

std::vector<int> Limits(ScheduleKind kind, int ranks) {
  std::vector<int> limits(ranks);
  for (int r = 0; r < ranks; ++r) {
    switch (kind) {
      case ScheduleKind::kZbH2:
        limits[r] = 2 * (ranks - r) - 1;
        break;
      case ScheduleKind::kZbV:
        limits[r] = 2 * ranks;
        break;
      default:
        limits[r] = ranks - r;
    }
  }
  return limits;
}

}  // namespace

const char* ScheduleKindName(ScheduleKind kind) {
  for (const auto& [k, name] : kNames) {
    if (k == kind) return name;
  }
  return "?";
}

absl::StatusOr<ScheduleKind> ParseScheduleKind(const std::string& name) {
  std::vector<std::string> names;
  for (const auto& [k, n] : kNames) {
    if (name == n) return k;
    names.push_back(n);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown schedule \"", name.substr(0, 64),
                   "\"; one of: ", absl::StrJoin(names, ", ")));
}

std::vector<ScheduleKind> AllScheduleKinds() {
  std::vector<ScheduleKind> out;
  for (const auto& [k, n] : kNames) out.push_back(k);
  return out;
}

absl::StatusOr<Program> ComputeSchedule(ScheduleKind kind,
                                        const ScheduleShape& shape) {
  if (absl::Status s = CheckShape(kind, shape); !s.ok()) return s;
  const int p = shape.ranks, m = shape.microbatches;
  switch (kind) {
    case ScheduleKind::kGpipe:
      return Gpipe(p, m);
    case ScheduleKind::k1F1B:
      return OneFOneB(p, m);
    case ScheduleKind::kInterleaved1F1B:
      return Interleaved(p, m, shape.chunks);
    case ScheduleKind::kZbH1:
      return ZbH1(p, m);
    case ScheduleKind::kZbH2:
      return ZeroBubble(Layout{p, 1, Placement::kLoop}, m, Limits(kind, p))
          .Run();
    case ScheduleKind::kZbV:
      return ZeroBubble(Layout{p, 2, Placement::kV}, m, Limits(kind, p)).Run();
  }
  return absl::InvalidArgumentError("unknown schedule kind");
}

}  // namespace aqueduct::ir
