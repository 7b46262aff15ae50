// Time of PipeDream's partitioner (coordinator/planner) on seeded random
// chains: the configurations of docs/benchmarks.md. Prints one JSON line per
// case. Also writes each profile in PipeDream's format when --write-dir is
// given, so PipeDream's own optimizer can be run on the same input.
//
//   planner_bench [--write-dir DIR] [--repeat 3] [--threads 0]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "coordinator/planner/antichain.h"
#include "coordinator/planner/pipedream.h"
#include "coordinator/planner/profile_graph.h"

namespace aqueduct {
namespace {

ProfileGraph RandomChain(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> ms(0.05, 5.0), act(1e5, 5e7),
      params(0, 5e7);
  std::vector<ProfileNode> nodes;
  for (int i = 0; i < n; ++i) {
    nodes.push_back({absl::StrCat("node", i + 1), absl::StrCat("Layer", i),
                     ms(rng), 2 * ms(rng), act(rng), params(rng)});
  }
  return *ProfileGraph::Chain(std::move(nodes));
}

int Main(int argc, char** argv) {
  std::string write_dir;
  int repeat = 3, threads = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--write-dir") {
      write_dir = argv[i + 1];
    } else if (flag == "--repeat") {
      (void)absl::SimpleAtoi(argv[i + 1], &repeat);
    } else if (flag == "--threads") {
      (void)absl::SimpleAtoi(argv[i + 1], &threads);
    } else {
      std::fprintf(stderr, "planner_bench: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  struct Case {
    int layers;
    std::vector<PlannerLevel> levels;
  };
  const std::vector<Case> cases = {
      {200, {{8, 1e9}}},
      {200, {{16, 1e9}}},
      {200, {{32, 1e9}}},
      {1000, {{8, 1e11}, {128, 1e9}}},
      {1000, {{32, 1e11}, {32, 1e9}}},
  };
  for (const Case& c : cases) {
    ProfileGraph g = RandomChain(c.layers, 42);
    std::string shape;
    for (const PlannerLevel& l : c.levels) {
      absl::StrAppend(&shape, shape.empty() ? "" : "x", l.workers);
    }
    if (!write_dir.empty()) {
      const std::string path =
          absl::StrCat(write_dir, "/chain", c.layers, ".txt");
      if (std::FILE* f = std::fopen(path.c_str(), "w")) {
        const std::string text = g.ToPipeDreamText();
        std::fwrite(text.data(), 1, text.size(), f);
        std::fclose(f);
      }
    }
    std::vector<double> seconds;
    double objective = 0;
    size_t stages = 0;
    for (int r = 0; r < repeat; ++r) {
      const auto start = std::chrono::steady_clock::now();
      auto seq = BuildAntichainStates(g.WithoutInputsAndGetitemSinks());
      PipeDreamOptions o;
      o.levels = c.levels;
      o.threads = threads;
      auto s = SolvePipeDream(*seq, o);
      seconds.push_back(std::chrono::duration<double>(
                            std::chrono::steady_clock::now() - start)
                            .count());
      if (!s.ok()) {
        std::fprintf(stderr, "%s\n", s.status().ToString().c_str());
        return 1;
      }
      objective = s->time_per_stage_s;
      stages = s->stages.size();
    }
    std::sort(seconds.begin(), seconds.end());
    std::printf(
        "{\"layers\":%d,\"workers\":\"%s\",\"seconds_median\":%.4f,"
        "\"seconds_min\":%.4f,\"time_per_minibatch_s\":%.17g,\"stages\":%zu}"
        "\n",
        c.layers, shape.c_str(), seconds[seconds.size() / 2], seconds[0],
        objective, stages);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace aqueduct

int main(int argc, char** argv) { return aqueduct::Main(argc, argv); }
