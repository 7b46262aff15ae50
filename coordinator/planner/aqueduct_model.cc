#include "coordinator/planner/aqueduct_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace aqueduct {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

int TotalWorkers(const AqueductModelOptions& o) {
  int total = 1;
  for (const PlannerLevel& l : o.levels) total *= l.workers;
  return total;
}

// The bandwidth between ranks lo..hi: that of the smallest level whose
// groups hold them all.
double EnclosingBandwidth(const AqueductModelOptions& o, int lo, int hi) {
  int group = 1;
  for (const PlannerLevel& l : o.levels) {
    group *= l.workers;
    if (lo / group == hi / group) return l.bandwidth_bytes_per_s;
  }
  return o.levels.back().bandwidth_bytes_per_s;
}

double Range(const std::vector<double>& cumulative, int a, int b) {
  return a == 0 ? cumulative[b] : cumulative[b] - cumulative[a - 1];
}

struct Cumulative {
  std::vector<double> compute, backward, activation, parameters, out;
  explicit Cumulative(const StateSequence& seq) {
    for (const AntichainState& s : seq.states) {
      compute.push_back(s.compute_s);
      backward.push_back(s.backward_s);
      activation.push_back(s.activation_bytes);
      parameters.push_back(s.parameter_bytes);
      out.push_back(s.output_activation_bytes);
    }
  }
};

StageCost Cost(const Cumulative& c, const AqueductModelOptions& o, int total,
               int a, int b, int lo, int hi, double speed) {
  const int n = static_cast<int>(c.compute.size());
  const int r = hi - lo + 1;
  StageCost cost;
  cost.compute_s = Range(c.compute, a, b);
  const double w = Range(c.parameters, a, b);
  const double act = Range(c.activation, a, b);
  const double compute = cost.compute_s / speed;
  if (o.pipedream_costs) {
    // PipeDream's (T + 4 m W / (B (m+1))) / (m+1), m = r - 1.
    const double allreduce =
        4.0 * (r - 1) * w / (EnclosingBandwidth(o, lo, hi) * r);
    cost.allreduce_s = allreduce / r;
    cost.time_s = (compute + allreduce) / r;
  } else {
    double allreduce = 0;
    if (r > 1) {
      allreduce = 2.0 * (r - 1) / r * w / EnclosingBandwidth(o, lo, hi);
    }
    const double hidden = o.allreduce_overlap * Range(c.backward, a, b) / speed;
    const double exposed = std::max(0.0, allreduce - hidden);
    double transfer = 0;
    if (a > 0) {
      transfer += 2.0 * c.out[a - 1] / EnclosingBandwidth(o, lo - 1, lo);
    }
    if (b < n - 1) {
      transfer += 2.0 * c.out[b] / EnclosingBandwidth(o, hi, hi + 1);
    }
    cost.allreduce_s = exposed / r;
    cost.transfer_s = transfer / r;
    cost.time_s = std::max((compute + exposed) / r, cost.transfer_s);
  }
  cost.warmup_depth =
      static_cast<int>(std::ceil(static_cast<double>(total - (hi + 1)) / r));
  cost.memory_bytes =
      StageMemoryBytes(o.schedule, o.microbatches, w, act, cost.warmup_depth,
                       o.optimizer_state_factor);
  cost.feasible = !o.memory_limit_bytes.has_value() ||
                  cost.memory_bytes <= *o.memory_limit_bytes;
  return cost;
}

absl::Status Validate(const StateSequence& seq, const AqueductModelOptions& o) {
  if (o.levels.empty()) {
    return absl::InvalidArgumentError("no topology levels given");
  }
  for (size_t l = 0; l < o.levels.size(); ++l) {
    if (o.levels[l].workers < 1 || !(o.levels[l].bandwidth_bytes_per_s > 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "level ", l, " needs at least 1 worker and a positive bandwidth"));
    }
  }
  const int total = TotalWorkers(o);
  if (!o.worker_speed.empty()) {
    if (static_cast<int>(o.worker_speed.size()) != total) {
      return absl::InvalidArgumentError(
          absl::StrCat(o.worker_speed.size(), " worker speeds given for ",
                       total, " workers"));
    }
    for (size_t i = 0; i < o.worker_speed.size(); ++i) {
      if (!(o.worker_speed[i] > 0) || !std::isfinite(o.worker_speed[i])) {
        return absl::InvalidArgumentError(
            absl::StrCat("worker speed ", i, " is ", o.worker_speed[i],
                         "; speeds must be positive"));
      }
    }
  }
  if (!v1::Schedule_IsValid(o.schedule)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "schedule ", static_cast<int>(o.schedule), " is not a known schedule"));
  }
  if (!(o.allreduce_overlap >= 0 && o.allreduce_overlap <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "all-reduce overlap ", o.allreduce_overlap, " must be in [0, 1]"));
  }
  if (seq.states.empty()) {
    return absl::InvalidArgumentError("no states to partition");
  }
  if (!seq.is_chain) {
    return absl::InvalidArgumentError(
        "the aqueduct cost model plans chains of layers; this profile is a "
        "DAG (use --cost-model pipedream)");
  }
  return absl::OkStatus();
}

struct Entry {
  double time = kInf;
  int split_k = -1;  // Previous stage ends at state split_k.
  int replicas = 0;  // Of the last stage.
};

}  // namespace

StageCost AqueductStageCost(const StateSequence& seq,
                            const AqueductModelOptions& options, int a, int b,
                            int lo, int hi) {
  Cumulative c(seq);
  double speed = kInf;
  for (int rank = lo; rank <= hi; ++rank) {
    speed = std::min(
        speed, options.worker_speed.empty() ? 1.0 : options.worker_speed[rank]);
  }
  return Cost(c, options, TotalWorkers(options), a, b, lo, hi, speed);
}

absl::StatusOr<AqueductSolution> SolveAqueductModel(
    const StateSequence& seq, const AqueductModelOptions& o) {
  if (absl::Status s = Validate(seq, o); !s.ok()) return s;
  const Cumulative c(seq);
  const int n = static_cast<int>(seq.states.size());
  const int M = TotalWorkers(o);
  auto speed_of = [&](int rank) {
    return o.worker_speed.empty() ? 1.0 : o.worker_speed[rank];
  };
  // A[j][m]: states 0..j on ranks 0..m, every rank used.
  std::vector<Entry> A(static_cast<size_t>(n) * M);
  auto at = [&](int j, int m) -> Entry& {
    return A[static_cast<size_t>(j) * M + m];
  };
  for (int j = 0; j < n; ++j) {
    for (int m = 0; m < M; ++m) {
      Entry& e = at(j, m);
      double speed = kInf;
      for (int rank = 0; rank <= m; ++rank)
        speed = std::min(speed, speed_of(rank));
      if (!o.straight_pipeline || m == 0) {
        const StageCost cost = Cost(c, o, M, 0, j, 0, m, speed);
        if (cost.feasible) e = Entry{cost.time_s, -1, m + 1};
      }
      // The last stage: states k+1..j on ranks m-r+1..m.
      double last_speed = kInf;
      const int max_r = o.straight_pipeline ? std::min(1, m) : m;
      for (int r = 1; r <= max_r; ++r) {
        last_speed = std::min(last_speed, speed_of(m - r + 1));
        for (int k = j - 1; k >= 0; --k) {
          // Compute alone bounds the stage time and grows as k falls.
          if (Range(c.compute, k + 1, j) / (last_speed * r) >= e.time) break;
          const Entry& prefix = at(k, m - r);
          if (prefix.time >= e.time) continue;
          const StageCost cost =
              Cost(c, o, M, k + 1, j, m - r + 1, m, last_speed);
          if (!cost.feasible) continue;
          const double t = std::max(prefix.time, cost.time_s);
          if (t < e.time) e = Entry{t, k, r};
        }
      }
    }
  }
  int best_m = M - 1;
  if (o.use_fewer_machines) {
    for (int m = 0; m < M; ++m) {
      if (at(n - 1, m).time < at(n - 1, best_m).time) best_m = m;
    }
  }
  const Entry& answer = at(n - 1, best_m);
  if (answer.time == kInf) {
    return absl::FailedPreconditionError(
        "no partition fits the memory limit under the aqueduct cost model");
  }
  AqueductSolution solution;
  solution.time_per_minibatch_s = answer.time;
  solution.workers_used = best_m + 1;
  int j = n - 1, m = best_m;
  while (j >= 0) {
    const Entry& e = at(j, m);
    const int start = e.split_k + 1;
    const int lo = m - e.replicas + 1;
    AqueductStage stage;
    stage.start = start;
    stage.end = j + 1;
    stage.first_rank = lo;
    stage.replicas = e.replicas;
    stage.cost = AqueductStageCost(seq, o, start, j, lo, m);
    solution.stages.push_back(stage);
    j = e.split_k;
    m = lo - 1;
  }
  std::reverse(solution.stages.begin(), solution.stages.end());
  return solution;
}

double StageMemoryBytes(Schedule schedule, int microbatches, double w,
                        double act, int depth, double optimizer_state_factor) {
  const bool stashed = StashesWeights(schedule);
  const int versions = schedule == v1::SCHEDULE_2BW ? 2
                       : stashed                    ? depth + 1
                                                    : 1;
  // Activations in flight, in minibatches (act is a minibatch's).
  double in_flight = depth + 1;
  const int m = std::max(1, microbatches);
  if (schedule == v1::SCHEDULE_GPIPE) {
    in_flight = 1;  // Every microbatch of the minibatch.
  } else if (schedule == v1::SCHEDULE_1F1B_FLUSH ||
             schedule == v1::SCHEDULE_ZB_H1 || schedule == v1::SCHEDULE_2BW) {
    in_flight = static_cast<double>(std::min(m, depth + 1)) / m;
  } else if (schedule == v1::SCHEDULE_ZB_H2) {
    in_flight = static_cast<double>(std::min(m, 2 * depth + 1)) / m;
  }
  return w * (versions + 1 + optimizer_state_factor) + act * in_flight;
}

}  // namespace aqueduct
