#include "coordinator/planner/pipedream.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace aqueduct {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// One A[i][j][m] entry. Undefined (PipeDream's None) when time is infinite.
struct Cell {
  double time = kInf;
  int split_k = -1;  // The last split: stage ends at state split_k ...
  int split_m = -1;  // ... and the prefix uses split_m + 1 machines.
  int machines = 0;  // Machines of the last stage.
};

bool Defined(const Cell& c) { return c.time < kInf; }

// Everything one level's rows depend on.
struct Level {
  const StateSequence* seq = nullptr;
  int n = 0;
  int machines = 1;
  double bandwidth = 1e9;
  double within = 1;
  bool final_level = false;
  const PipeDreamOptions* options = nullptr;
  // Cumulative per state.
  const std::vector<double>* compute = nullptr;
  const std::vector<double>* activation = nullptr;
  const std::vector<double>* parameters = nullptr;
  const std::vector<double>* out = nullptr;
  // T(i..j) of this level when not the first: n x n, row-major.
  const std::vector<double>* t_matrix = nullptr;
  // Fast path allowed for (i, j) iff i + 1 >= mono_start[j].
  std::vector<int> mono_start;
  // T(a, j) falls as a grows and grows with j everywhere: the sweep applies.
  bool fully_monotone = false;
  // Non-chain DAGs: bitset of the predecessors of each state.
  const std::vector<std::vector<uint64_t>>* pred_bits = nullptr;

  // PipeDream's compute_times[i][j] (infinite where it holds None).
  double T(int i, int j) const {
    if (j < i || i >= n) return kInf;
    if (t_matrix != nullptr) return (*t_matrix)[static_cast<size_t>(i) * n + j];
    return i == 0 ? (*compute)[j] : (*compute)[j] - (*compute)[i - 1];
  }
  double Act(int i, int j) const {
    return i == 0 ? (*activation)[j] : (*activation)[j] - (*activation)[i - 1];
  }
  double W(int i, int j) const {
    return i == 0 ? (*parameters)[j] : (*parameters)[j] - (*parameters)[i - 1];
  }
  bool MemoryExceeded(double stashed) const {
    return options->use_memory_constraint && stashed > options->memory_bytes;
  }
};

// Per-thread scratch: one row of A and the sparse tables over it.
struct RowScratch {
  int n = 0;
  // cells[m * n + j]: A[i][.][m] is contiguous, as the sweeps read it.
  std::vector<Cell> cells;
  std::vector<std::vector<std::vector<int>>> tables;  // [m][level][k]
  Cell& at(int j, int m, int /*machines*/) {
    return cells[static_cast<size_t>(m) * n + j];
  }
};

class RowSolver {
 public:
  explicit RowSolver(const Level& level) : l_(level) {}

  // Fills scratch->cells with A[i][.][.].
  void Solve(int i, RowScratch* s) {
    const int n = l_.n, M = l_.machines;
    const PipeDreamOptions& o = *l_.options;
    s->n = n;
    s->cells.assign(static_cast<size_t>(n) * M, Cell());
    const int max_m = o.straight_pipeline ? 1 : M;
    for (int j = i; j < n; ++j) {
      const double t = l_.T(i, j);
      const double act = l_.Act(i, j), w = l_.W(i, j);
      for (int m = 0; m < max_m; ++m) {
        const double stashed =
            std::ceil(static_cast<double>(M - (m + 1)) / (m + 1)) * (act + w);
        if (l_.MemoryExceeded(stashed)) continue;
        double dp = (4.0 * m * w) / (l_.bandwidth * (m + 1));
        dp /= l_.within;
        if (t == kInf) continue;
        s->at(j, m, M) = Cell{(t + dp) / (m + 1), -1, -1, m + 1};
      }
    }
    if (l_.final_level && i != 0) return;
    const bool fast = l_.seq->is_chain && !o.force_plain_loops &&
                      !o.activation_compression_ratio.has_value();
    if (fast && l_.fully_monotone) {
      SolveSweep(i, s);
      return;
    }
    if (fast) s->tables.resize(M);
    if (fast) BuildTable(s, 0);
    for (int m = 1; m < M; ++m) {
      for (int j = i + 1; j < n; ++j) {
        Cell best = s->at(j, m, M);
        if (o.use_fewer_machines) {
          const Cell& fewer = s->at(j, m - 1, M);
          if (!Defined(best) || (Defined(fewer) && fewer.time < best.time)) {
            best = fewer;
          }
        }
        if (fast && i + 1 >= l_.mono_start[j]) {
          ImproveFast(i, j, m, s, &best);
        } else {
          ImprovePlain(i, j, m, s, &best);
        }
        s->at(j, m, M) = best;
      }
      if (fast) BuildTable(s, m);
    }
  }

  // The chain case when T is monotone in both of its ends. For fixed
  // (i, m, m'), the crossing q*(j) of the suffix minimum of X = A[i][.][m-m']
  // and of Y_j (the last stage k+1..j) can only move right as j grows (the
  // suffix minimum over [q, j-1] only falls with j, Y_j(q) only grows), so
  // one sweep over j with a monotone deque (the sliding-window minimum of X
  // over [q, j-1]) finds every j's best split in amortised O(1).
  void SolveSweep(int i, RowScratch* s) {
    const PipeDreamOptions& o = *l_.options;
    const int n = l_.n, M = l_.machines;
    // One row (the final level) has no rows to share among threads: share
    // the m' sweeps of each m instead.
    const int threads = std::max(1, mp_threads_);
    std::vector<std::vector<Cell>> partial(threads - 1, std::vector<Cell>(n));
    std::vector<std::vector<int>> deques(threads, std::vector<int>(n));
    for (int m = 1; m < M; ++m) {
      Cell* best = &s->at(0, m, M);
      if (o.use_fewer_machines) {
        const Cell* fewer = &s->at(0, m - 1, M);
        for (int j = i + 1; j < n; ++j) {
          if (!Defined(best[j]) ||
              (Defined(fewer[j]) && fewer[j].time < best[j].time)) {
            best[j] = fewer[j];
          }
        }
      }
      const int max_mp = o.straight_pipeline ? 1 : m;
      if (threads == 1 || max_mp < 16 || n < 512) {
        for (int mp = 1; mp <= max_mp; ++mp) {
          Sweep(i, m, mp, s, best, deques[0].data());
        }
        continue;
      }
      auto work = [&](int t) {
        Cell* out = t == 0 ? best : partial[t - 1].data();
        if (t > 0)
          std::fill(partial[t - 1].begin(), partial[t - 1].end(), Cell());
        for (int mp = 1 + t; mp <= max_mp; mp += threads) {
          Sweep(i, m, mp, s, out, deques[t].data());
        }
      };
      std::vector<std::thread> pool;
      for (int t = 1; t < threads; ++t) pool.emplace_back(work, t);
      work(0);
      for (std::thread& t : pool) t.join();
      for (int t = 1; t < threads; ++t) {
        for (int j = i + 1; j < n; ++j) {
          const Cell& c = partial[t - 1][j];
          if (Defined(c) && (!Defined(best[j]) || best[j].time > c.time)) {
            best[j] = c;
          }
        }
      }
    }
  }

  // One (m, m') sweep over j, improving best[j].
  void Sweep(int i, int m, int mp, RowScratch* s, Cell* best,
             int* deque) const {
    const PipeDreamOptions& o = *l_.options;
    const int n = l_.n, M = l_.machines;
    const int row = m - mp;
    const Cell* prefix = &s->at(0, row, M);
    auto x = [prefix](int k) { return prefix[k].time; };
    // LastStage(k, j, m, mp) with the loop invariants hoisted; the same
    // floating-point operations.
    const double ceil_factor = std::ceil(static_cast<double>(M - (m + 1)) / mp);
    const double dp_numerator = 4.0 * (mp - 1);
    const double dp_denominator = l_.bandwidth * mp;
    const bool check_memory = o.use_memory_constraint;
    auto last_stage = [&](int k, int j) {
      const double t = l_.T(k + 1, j);
      if (t == kInf) return kInf;
      const double w = l_.W(k + 1, j);
      if (check_memory) {
        double stashed = l_.Act(k + 1, j) + w;
        stashed *= ceil_factor;
        if (stashed > o.memory_bytes) return kInf;
      }
      return (t + (dp_numerator * w) / dp_denominator) / mp;
    };
    int head = 0, tail = 0;  // deque[head, tail): window argmins.
    int q = i;
    for (int j = i + 1; j < n; ++j) {
      const int k_new = j - 1;
      if (k_new >= q) {
        while (tail > head && x(deque[tail - 1]) > x(k_new)) --tail;
        deque[tail++] = k_new;
      }
      // Advance q while the suffix minimum is below the last stage.
      while (q <= j - 1 && x(deque[head]) < last_stage(q, j)) {
        ++q;
        if (head < tail && deque[head] < q) ++head;
      }
      if (q <= j - 1) {
        const int k = deque[head];
        const double xv = x(k);
        if (xv < kInf) {
          Consider(std::max(xv, last_stage(k, j)), k, m, mp, &best[j]);
        }
      }
      if (q - 1 >= i) {
        int k = q - 1;
        if (q <= j - 1 && x(deque[head]) < x(k)) k = deque[head];
        const double xv = x(k);
        if (xv < kInf) {
          Consider(std::max(xv, last_stage(k, j)), k, m, mp, &best[j]);
        }
      }
    }
  }

  void set_mp_threads(int threads) { mp_threads_ = threads; }

 private:
  // The last stage k+1..j on m' machines, or infinity where PipeDream skips.
  double LastStage(int k, int j, int m, int mp) const {
    const double t = l_.T(k + 1, j);
    if (t == kInf) return kInf;
    const double w = l_.W(k + 1, j);
    double stashed = l_.Act(k + 1, j) + w;
    stashed *= std::ceil(static_cast<double>(l_.machines - (m + 1)) / mp);
    if (l_.MemoryExceeded(stashed)) return kInf;
    double last = t + (4.0 * (mp - 1) * w) / (l_.bandwidth * mp);
    return last / mp;
  }

  void Consider(double candidate, int k, int m, int mp, Cell* best) const {
    if (candidate < kInf && (!Defined(*best) || best->time > candidate)) {
      *best = Cell{candidate, k, m - mp, mp};
    }
  }

  // PipeDream's loops, verbatim.
  void ImprovePlain(int i, int j, int m, RowScratch* s, Cell* best) const {
    const PipeDreamOptions& o = *l_.options;
    const int M = l_.machines, n = l_.n;
    const int max_mp = o.straight_pipeline ? 1 : m;
    auto consider_k = [&](int k) {
      for (int mp = 1; mp <= max_mp; ++mp) {
        double in = (2.0 * (*l_.out)[k]) / (l_.bandwidth * mp);
        double out = kInf;
        const bool has_out = j < n - 1;
        if (has_out) out = (2.0 * (*l_.out)[j]) / (l_.bandwidth * mp);
        const double last = LastStage(k, j, m, mp);
        if (last == kInf) continue;
        const Cell& prefix = s->at(k, m - mp, M);
        if (!Defined(prefix)) continue;
        double t = std::max(prefix.time, last);
        if (o.activation_compression_ratio.has_value()) {
          in /= *o.activation_compression_ratio;
          t = std::max(t, in);
          if (has_out) {
            out /= *o.activation_compression_ratio;
            t = std::max(t, out);
          }
        }
        Consider(t, k, m, mp, best);
      }
    };
    if (l_.seq->is_chain) {
      // preds(j) = 0..j-1; preds(i-1) = 0..i-2.
      for (int k = i > 0 ? i - 1 : 0; k < j; ++k) consider_k(k);
      return;
    }
    for (int k : l_.seq->states[j].predecessors) {
      if (i > 0 && ((*l_.pred_bits)[i - 1][k >> 6] >> (k & 63) & 1)) continue;
      consider_k(k);
    }
  }

  // min over k in [i, j-1] of max(X(k), Y(k)) with X(k) = A[i][k][m-m'] and
  // Y(k) = LastStage(k, j), Y non-increasing in k: at the crossing of the
  // suffix minimum of X (non-decreasing in its start) and Y.
  void ImproveFast(int i, int j, int m, RowScratch* s, Cell* best) const {
    const int max_mp = l_.options->straight_pipeline ? 1 : m;
    for (int mp = 1; mp <= max_mp; ++mp) {
      const int row = m - mp;
      // Smallest q in [i, j] with SX(q) >= Y(q) (q = j: none).
      int lo = i, hi = j;
      while (lo < hi) {
        const int q = lo + (hi - lo) / 2;
        const double sx =
            s->at(ArgMin(s, row, q, j - 1), row, l_.machines).time;
        if (sx >= LastStage(q, j, m, mp)) {
          hi = q;
        } else {
          lo = q + 1;
        }
      }
      for (int q : {lo, lo - 1}) {
        if (q < i || q > j - 1) continue;
        const int k = ArgMin(s, row, q, j - 1);
        const double x = s->at(k, row, l_.machines).time;
        if (x == kInf) continue;
        const double y = LastStage(k, j, m, mp);
        if (y == kInf) continue;
        Consider(std::max(x, y), k, m, mp, best);
      }
    }
  }

  // Sparse table of argmin over k of A[i][k][m].time.
  void BuildTable(RowScratch* s, int m) const {
    const int n = l_.n, M = l_.machines;
    auto& table = s->tables[m];
    int levels = 1;
    while ((1 << levels) <= n) ++levels;
    table.resize(levels);
    table[0].resize(n);
    for (int k = 0; k < n; ++k) table[0][k] = k;
    for (int lv = 1; lv < levels; ++lv) {
      const int half = 1 << (lv - 1);
      table[lv].resize(n);
      for (int k = 0; k + (1 << lv) <= n; ++k) {
        const int a = table[lv - 1][k], b = table[lv - 1][k + half];
        table[lv][k] = s->at(b, m, M).time < s->at(a, m, M).time ? b : a;
      }
    }
  }

  int ArgMin(RowScratch* s, int m, int lo, int hi) const {
    const auto& table = s->tables[m];
    int lv = 0;
    while ((2 << lv) <= hi - lo + 1) ++lv;
    const int a = table[lv][lo], b = table[lv][hi - (1 << lv) + 1];
    return s->at(b, m, l_.machines).time < s->at(a, m, l_.machines).time ? b
                                                                         : a;
  }

  const Level& l_;
  int mp_threads_ = 1;
};

// PipeDream's analyze_partitioning: (start, end, replicas) of the stages of
// states [start, end) on `machines` machines, from row `start` of A.
absl::StatusOr<std::vector<PipeDreamStage>> Backtrack(RowScratch& row,
                                                      int start, int end,
                                                      int machines) {
  Cell cell = row.at(end - 1, machines - 1, machines);
  if (!Defined(cell)) {
    return absl::FailedPreconditionError(
        absl::StrCat("no partition of states [", start, ", ", end, ") on ",
                     machines, " workers fits the memory limit"));
  }
  std::vector<int> splits, replicas;
  while (cell.split_k >= 0) {
    splits.push_back(cell.split_k + 1);
    replicas.push_back(cell.machines);
    cell = row.at(cell.split_k, cell.split_m, machines);
  }
  replicas.push_back(cell.machines);
  std::reverse(splits.begin(), splits.end());
  std::reverse(replicas.begin(), replicas.end());
  std::vector<PipeDreamStage> stages;
  int from = start;
  for (size_t s = 0; s <= splits.size(); ++s) {
    const int to = s < splits.size() ? splits[s] : end;
    stages.push_back({from, to, replicas[s]});
    from = to;
  }
  return stages;
}

// Column j's fast path holds for rows i with i + 1 >= start: T(a, j) must not
// increase with a over a in [start, j].
bool FullyMonotone(const Level& l) {
  if (l.t_matrix == nullptr) return true;
  for (int j = 0; j < l.n; ++j) {
    if (l.mono_start[j] != 0) return false;
    for (int a = 0; a <= j && j + 1 < l.n; ++a) {
      if (!(l.T(a, j) <= l.T(a, j + 1))) return false;
    }
  }
  return true;
}

std::vector<int> MonotoneStarts(const Level& l) {
  std::vector<int> start(l.n, 0);
  if (l.t_matrix == nullptr) return start;  // Cumulative sums: monotone.
  for (int j = 0; j < l.n; ++j) {
    int a = j;
    while (a > 0 && l.T(a - 1, j) >= l.T(a, j)) --a;
    start[j] = a;
  }
  return start;
}

// INVALID_ARGUMENT for no levels, a level with < 1 worker or a non-positive
// bandwidth, or a non-positive compression ratio.
absl::Status ValidateOptions(const PipeDreamOptions& options) {
  if (options.levels.empty()) {
    return absl::InvalidArgumentError("no topology levels given");
  }
  for (size_t l = 0; l < options.levels.size(); ++l) {
    if (options.levels[l].workers < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("level ", l, " has ", options.levels[l].workers,
                       " workers; it needs at least 1"));
    }
    if (!(options.levels[l].bandwidth_bytes_per_s > 0) ||
        !std::isfinite(options.levels[l].bandwidth_bytes_per_s)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "level ", l, " bandwidth ", options.levels[l].bandwidth_bytes_per_s,
          " must be positive"));
    }
  }
  if (options.activation_compression_ratio.has_value() &&
      !(*options.activation_compression_ratio > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "activation compression ratio ", *options.activation_compression_ratio,
        " must be positive"));
  }
  return absl::OkStatus();
}

// The per-state inputs that every level reads.
struct StateTables {
  // Cumulative per state.
  std::vector<double> compute, activation, parameters, out;
  // Non-chain DAGs: bitset of the predecessors of each state (else empty).
  std::vector<std::vector<uint64_t>> pred_bits;
};

// Copies the states' cumulative sums into flat tables and, for DAGs, sets
// each state's predecessor bits.
StateTables MakeStateTables(const StateSequence& seq) {
  const int n = static_cast<int>(seq.states.size());
  StateTables tables;
  tables.compute.resize(n);
  tables.activation.resize(n);
  tables.parameters.resize(n);
  tables.out.resize(n);
  for (int s = 0; s < n; ++s) {
    tables.compute[s] = seq.states[s].compute_s;
    tables.activation[s] = seq.states[s].activation_bytes;
    tables.parameters[s] = seq.states[s].parameter_bytes;
    tables.out[s] = seq.states[s].output_activation_bytes;
  }
  if (!seq.is_chain) {
    tables.pred_bits.assign(n, std::vector<uint64_t>((n + 63) / 64, 0));
    for (int s = 0; s < n; ++s) {
      for (int p : seq.states[s].predecessors) {
        tables.pred_bits[s][p >> 6] |= uint64_t{1} << (p & 63);
      }
    }
  }
  return tables;
}

// Sets up level `l` over `tables`; levels after the first read their T from
// `t_matrix`.
void InitLevel(const StateSequence& seq, const PipeDreamOptions& options,
               const StateTables& tables, int l,
               const std::vector<double>* t_matrix, Level* level) {
  const int num_levels = static_cast<int>(options.levels.size());
  level->seq = &seq;
  level->n = static_cast<int>(seq.states.size());
  level->machines = options.levels[l].workers;
  level->bandwidth = options.levels[l].bandwidth_bytes_per_s;
  level->within = l == 0 ? 1 : options.levels[l - 1].workers;
  level->final_level = l == num_levels - 1;
  level->options = &options;
  level->compute = &tables.compute;
  level->activation = &tables.activation;
  level->parameters = &tables.parameters;
  level->out = &tables.out;
  level->t_matrix = l == 0 ? nullptr : t_matrix;
  level->pred_bits = &tables.pred_bits;
  level->mono_start = MonotoneStarts(*level);
  level->fully_monotone = FullyMonotone(*level);
}

// Solves every row i of a non-final level on `threads` threads; the next
// level's T(i..j), written to `t_next`, is this level's A[i][j][M-1].
void SolveAllRows(const Level& level, int threads,
                  std::vector<double>* t_next) {
  const int n = level.n;
  std::vector<double>& next = *t_next;
  next.assign(static_cast<size_t>(n) * n, kInf);
  auto work = [&](int first, int stride) {
    RowScratch scratch;
    RowSolver solver(level);
    const int M = level.machines;
    for (int i = first; i < n; i += stride) {
      solver.Solve(i, &scratch);
      for (int j = i; j < n; ++j) {
        next[static_cast<size_t>(i) * n + j] = scratch.at(j, M - 1, M).time;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work, t, threads);
  work(0, threads);
  for (std::thread& t : pool) t.join();
}

// PipeDream's data-parallel estimate over all levels.
double DataParallelTime(const PipeDreamOptions& options,
                        const StateTables& tables) {
  const int n = static_cast<int>(tables.compute.size());
  double dp_time = tables.compute[n - 1];
  double within = 1;
  for (const PlannerLevel& level : options.levels) {
    const double comm =
        ((4.0 * (level.workers - 1) * tables.parameters[n - 1]) /
         (level.bandwidth_bytes_per_s * level.workers)) /
        within;
    dp_time = (dp_time + comm) / level.workers;
    within = level.workers;
  }
  return dp_time;
}

// Backtracks from the top level down, filling the solution's stages and
// level_stages; lower levels re-solve the rows they need (rows are cheap,
// and keeping every A would not fit in memory). `top_row` is row 0 of the
// top level.
absl::Status BacktrackLevels(const std::vector<Level>& levels,
                             const PipeDreamOptions& options,
                             RowScratch* top_row, PipeDreamSolution* solution) {
  const int num_levels = static_cast<int>(levels.size());
  std::vector<PipeDreamStage> current = {{0, levels[0].n, 1}};
  solution->level_stages.resize(num_levels);
  for (int l = num_levels - 1; l >= 0; --l) {
    std::vector<PipeDreamStage> next;
    for (const PipeDreamStage& outer : current) {
      RowScratch scratch;
      RowScratch* row = top_row;
      if (l != num_levels - 1 || outer.start != 0) {
        RowSolver(levels[l]).Solve(outer.start, &scratch);
        row = &scratch;
      }
      auto inner =
          Backtrack(*row, outer.start, outer.end, options.levels[l].workers);
      if (!inner.ok()) return inner.status();
      for (const PipeDreamStage& s : *inner) {
        solution->level_stages[l].push_back(s);
        next.push_back({s.start, s.end, s.replicas * outer.replicas});
      }
    }
    current = std::move(next);
  }
  solution->stages = std::move(current);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PipeDreamSolution> SolvePipeDream(
    const StateSequence& seq, const PipeDreamOptions& options) {
  RETURN_IF_ERROR(ValidateOptions(options));
  const int n = static_cast<int>(seq.states.size());
  if (n == 0) return absl::InvalidArgumentError("no states to partition");
  const StateTables tables = MakeStateTables(seq);

  const int num_levels = static_cast<int>(options.levels.size());
  std::vector<std::vector<double>> t_matrices(num_levels);
  std::vector<Level> levels(num_levels);
  const int threads =
      options.threads > 0
          ? options.threads
          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  RowScratch top_row;
  for (int l = 0; l < num_levels; ++l) {
    InitLevel(seq, options, tables, l, &t_matrices[l], &levels[l]);
    if (levels[l].final_level) {
      RowSolver solver(levels[l]);
      solver.set_mp_threads(threads);
      solver.Solve(0, &top_row);
      break;
    }
    SolveAllRows(levels[l], threads, &t_matrices[l + 1]);
  }

  PipeDreamSolution solution;
  const int top_machines = options.levels.back().workers;
  const Cell& answer = top_row.at(n - 1, top_machines - 1, top_machines);
  if (!Defined(answer)) {
    return absl::FailedPreconditionError(
        absl::StrCat("no partition over ", top_machines,
                     " workers fits the memory limit of ", options.memory_bytes,
                     " bytes per worker"));
  }
  solution.time_per_stage_s = answer.time;
  solution.single_worker_time_s = tables.compute[n - 1];
  solution.data_parallel_time_s = DataParallelTime(options, tables);
  RETURN_IF_ERROR(BacktrackLevels(levels, options, &top_row, &solution));
  return solution;
}

}  // namespace aqueduct
