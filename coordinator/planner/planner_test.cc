// The profile formats, the antichain states and PipeDream's dynamic program:
// hand-worked cases, and the DP (fast path and plain loops) against an
// exhaustive search over every partition on many small random chains and
// DAGs.
#include <cmath>
#include <functional>
#include <random>

#include "absl/strings/str_cat.h"
#include "coordinator/planner/antichain.h"
#include "coordinator/planner/pipedream.h"
#include "coordinator/planner/profile_graph.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

constexpr char kDagText[] =
    "node1 -- Input0 -- forward_compute_time=0.000, "
    "backward_compute_time=0.000, activation_size=602112.0, "
    "parameter_size=0.000\n"
    "node2 -- Conv2d(3, 64) -- forward_compute_time=1.5, "
    "backward_compute_time=3.0, activation_size=[1000.0; 24.0], "
    "parameter_size=7000.0 -- stage_id=0\n"
    "node3 -- ReLU() -- forward_compute_time=0.25, "
    "backward_compute_time=0.5, activation_size=1024.0, "
    "parameter_size=0.0\n"
    "node4 -- Conv2d(64, 64) -- forward_compute_time=2.0, "
    "backward_compute_time=4.0, activation_size=1024.0, "
    "parameter_size=36000.0\n"
    "node5 -- Add -- forward_compute_time=0.1, backward_compute_time=0.1, "
    "activation_size=1024.0, parameter_size=0.0\n"
    "node6 -- __getitem__ -- forward_compute_time=0.0, "
    "backward_compute_time=0.0, activation_size=8.0, parameter_size=0.0\n"
    "\tnode1 -- node2\n"
    "\tnode2 -- node3\n"
    "\tnode2 -- node4\n"
    "\tnode3 -- node5\n"
    "\tnode4 -- node5\n"
    "\tnode5 -- node6\n";

TEST(ProfileGraphTest, ReadsPipeDreamText) {
  auto g = ProfileGraph::FromPipeDreamText(kDagText);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ(g->size(), 6);
  EXPECT_EQ(g->nodes()[1].description, "Conv2d(3, 64)");
  EXPECT_DOUBLE_EQ(g->nodes()[1].activation_bytes, 1024.0);  // 1000 + 24.
  EXPECT_EQ(g->nodes()[1].stage_id, 0);
  EXPECT_EQ(g->nodes()[2].stage_id, -1);
  EXPECT_DOUBLE_EQ(g->nodes()[3].backward_ms, 4.0);
  EXPECT_EQ(g->out(1), (std::vector<int>{2, 3}));
  EXPECT_EQ(g->in(4), (std::vector<int>{2, 3}));

  ProfileGraph p = g->WithoutInputsAndGetitemSinks();
  ASSERT_EQ(p.size(), 4);
  EXPECT_EQ(p.nodes()[0].id, "node2");
  EXPECT_EQ(p.nodes()[3].id, "node5");
  EXPECT_TRUE(p.in(0).empty());
}

TEST(ProfileGraphTest, RoundTripsTextAndJson) {
  auto g = ProfileGraph::FromPipeDreamText(kDagText);
  ASSERT_TRUE(g.ok());
  const std::string text = g->ToPipeDreamText();
  auto again = ProfileGraph::FromPipeDreamText(text);
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << text;
  EXPECT_EQ(again->ToPipeDreamText(), text);
  ASSERT_EQ(again->size(), g->size());
  for (int i = 0; i < g->size(); ++i) {
    EXPECT_EQ(again->nodes()[i].id, g->nodes()[i].id);
    EXPECT_EQ(again->nodes()[i].forward_ms, g->nodes()[i].forward_ms);
    EXPECT_EQ(again->nodes()[i].activation_bytes,
              g->nodes()[i].activation_bytes);
    EXPECT_EQ(again->nodes()[i].stage_id, g->nodes()[i].stage_id);
    EXPECT_EQ(again->out(i), g->out(i));
  }
  // Irrational values survive too.
  ProfileNode odd{"a", "x", 1.0 / 3.0, 2.0 / 7.0, 1e-3, 12345.678};
  auto chain = ProfileGraph::Chain({odd});
  ASSERT_TRUE(chain.ok());
  auto back = ProfileGraph::FromPipeDreamText(chain->ToPipeDreamText());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->nodes()[0].forward_ms, 1.0 / 3.0);

  auto json = ProfileGraph::FromProto(g->ToProto());
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(json->ToPipeDreamText(), text);
}

TEST(ProfileGraphTest, RejectsMalformedText) {
  struct Case {
    std::string text, expect;
  };
  const std::string ok_node =
      "node1 -- A -- forward_compute_time=1, backward_compute_time=1, "
      "activation_size=1, parameter_size=1\n";
  const std::vector<Case> cases = {
      {"node1 -- A\n", "line 1: a node line must be"},
      {"node1 -- A -- forward_compute_time=1, backward_compute_time=1\n",
       "line 1: expected 4 comma-separated metadata fields, found 2"},
      {"node1 -- A -- forward_compute_time=x, backward_compute_time=1, "
       "activation_size=1, parameter_size=1\n",
       "line 1: 'x' is not a number"},
      {"node1 -- A -- fwd=1, backward_compute_time=1, activation_size=1, "
       "parameter_size=1\n",
       "line 1: expected 'forward_compute_time=...'"},
      {"node1 -- A -- forward_compute_time=-1, backward_compute_time=1, "
       "activation_size=1, parameter_size=1\n",
       "forward_compute_time=-1 must be finite and >= 0"},
      {"node1 -- A -- forward_compute_time=1, backward_compute_time=1, "
       "activation_size=[1; 2, parameter_size=1\n",
       "activation_size list lacks its ']'"},
      {ok_node + ok_node, "line 2: node 'node1' is defined twice"},
      {ok_node + "\tnode1 -- node9\n",
       "line 2: edge node1 -- node9 names an "
       "unknown node 'node9'"},
      {ok_node + "\tnode1\n", "line 2: an edge line must be"},
      {ok_node + "node1 -- A -- forward_compute_time=1, backward_compute_time"
                 "=1, activation_size=1, parameter_size=1 -- stage_id=x\n",
       "stage_id 'x' is not an index"},
      {"", "the profile has no nodes"},
      {ok_node + "node2 -- B -- forward_compute_time=1, "
                 "backward_compute_time=1, activation_size=1, "
                 "parameter_size=1\n\tnode1 -- node2\n\tnode2 -- node1\n",
       "has a cycle through node"},
  };
  for (const Case& c : cases) {
    auto g = ProfileGraph::FromPipeDreamText(c.text);
    ASSERT_FALSE(g.ok()) << c.expect;
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(g.status().message().find(c.expect), std::string::npos)
        << "got: " << g.status().message() << "\nwanted: " << c.expect;
  }
}

// ParseProfile picks the format by content, and bounds a node's indexes: a
// layer_index of 2^31 - 1 made the planner's end_layer overflow.
TEST(ProfileGraphTest, ParseProfileReadsBothFormatsAndBoundsIndexes) {
  auto text = ParseProfile(kDagText, "");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->size(), 6);
  auto json = ParseProfile(
      R"({"nodes": [{"id": "a", "forward_ms": 1, "layer_index": 4095}]})", "");
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(json->nodes()[0].layer_index, 4095);
  EXPECT_FALSE(ParseProfile(kDagText, "json").ok());
  EXPECT_EQ(ParseProfile(kDagText, "yaml").status().message(),
            "profile format 'yaml' is not one of: pipedream, json");
  for (const char* bad :
       {R"({"nodes": [{"id": "a", "layer_index": 2147483647}]})",
        R"({"nodes": [{"id": "a", "layer_index": -2}]})",
        R"({"nodes": [{"id": "a", "stage_id": 4096}]})"}) {
    auto g = ParseProfile(bad, "");
    ASSERT_FALSE(g.ok()) << bad;
    EXPECT_NE(g.status().message().find("must be -1 (not given) or in [0, "
                                        "4096)"),
              std::string::npos)
        << g.status().message();
  }
}

TEST(AntichainTest, ChainStatesAreTheLayers) {
  std::vector<ProfileNode> nodes;
  for (int i = 0; i < 5; ++i) {
    nodes.push_back(
        {absl::StrCat("n", i), "L", 1.0 * (i + 1), 2.0, 10.0 * i, 100.0});
  }
  auto g = ProfileGraph::Chain(nodes);
  ASSERT_TRUE(g.ok());
  auto seq = BuildAntichainStates(*g);
  ASSERT_TRUE(seq.ok()) << seq.status();
  ASSERT_EQ(seq->states.size(), 5u);
  EXPECT_TRUE(seq->is_chain);
  // State 2 covers nodes 0..2: (1+2 + 2+2 + 3+2) ms.
  EXPECT_DOUBLE_EQ(seq->states[2].compute_s, 0.012);
  EXPECT_DOUBLE_EQ(seq->states[2].parameter_bytes, 300);
  EXPECT_DOUBLE_EQ(seq->states[2].output_activation_bytes, 20);
  EXPECT_EQ(seq->NodesOfRange(1, 3), (std::vector<int>{1, 2}));
  EXPECT_EQ(seq->PredecessorsOf(3), (std::vector<int>{0, 1, 2}));
}

// A node's weight update counts as compute, and survives the proto round
// trip.
TEST(AntichainTest, WeightUpdatesCountAsCompute) {
  std::vector<ProfileNode> nodes;
  for (int i = 0; i < 3; ++i) {
    nodes.push_back({absl::StrCat("n", i), "L", 1.0, 2.0, 10.0, 100.0});
    nodes.back().optimizer_ms = 0.5 * i;
  }
  auto g = ProfileGraph::Chain(nodes);
  ASSERT_TRUE(g.ok());
  auto seq = BuildAntichainStates(*g);
  ASSERT_TRUE(seq.ok()) << seq.status();
  // (1 + 2 + 0) + (1 + 2 + 0.5) + (1 + 2 + 1) ms.
  EXPECT_DOUBLE_EQ(seq->states[2].compute_s, 0.0105);
  auto back = ProfileGraph::FromProto(g->ToProto());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->nodes()[2].optimizer_ms, 1.0);
  nodes[1].optimizer_ms = -1;
  EXPECT_NE(ProfileGraph::Chain(nodes).status().message().find(
                "optimizer_time=-1 must be finite and >= 0"),
            std::string::npos);
}

TEST(AntichainTest, DiamondStates) {
  auto g = ProfileGraph::FromPipeDreamText(kDagText);
  ASSERT_TRUE(g.ok());
  auto seq = BuildAntichainStates(g->WithoutInputsAndGetitemSinks());
  ASSERT_TRUE(seq.ok()) << seq.status();
  // node2 | {node2, node3} augmented with node2 | {node3, node4} ...
  EXPECT_FALSE(seq->is_chain);
  ASSERT_GE(seq->states.size(), 4u);
  EXPECT_EQ(seq->states.front().antichain, (std::vector<int>{0}));
  EXPECT_EQ(seq->states.back().antichain, (std::vector<int>{3}));
  // The last state covers the whole graph.
  EXPECT_NEAR(seq->states.back().compute_s, (4.5 + 0.75 + 6 + 0.2) / 1000,
              1e-15);
  for (size_t s = 1; s < seq->states.size(); ++s) {
    EXPECT_FALSE(seq->states[s].predecessors.empty());
    EXPECT_EQ(seq->states[s].predecessors.front(), 0);
  }
}

// ---------------------------------------------------------------------------
// Exhaustive search: every sequence of split states (each an antichain-DAG
// predecessor of the next) and every replica count per stage, scored as
// PipeDream scores a partition at one level.

struct Brute {
  const StateSequence& seq;
  PipeDreamOptions o;
  double best = std::numeric_limits<double>::infinity();

  double T(int a, int b) const {
    return a == 0 ? seq.states[b].compute_s
                  : seq.states[b].compute_s - seq.states[a - 1].compute_s;
  }
  double W(int a, int b) const {
    return a == 0 ? seq.states[b].parameter_bytes
                  : seq.states[b].parameter_bytes -
                        seq.states[a - 1].parameter_bytes;
  }
  double Act(int a, int b) const {
    return a == 0 ? seq.states[b].activation_bytes
                  : seq.states[b].activation_bytes -
                        seq.states[a - 1].activation_bytes;
  }

  // Stages ending at `ends` (ascending, last = N-1) with `reps`.
  double Score(const std::vector<int>& ends, const std::vector<int>& reps) {
    const int M = o.levels[0].workers;
    const double B = o.levels[0].bandwidth_bytes_per_s;
    const int n = static_cast<int>(seq.states.size());
    double worst = 0;
    int used = 0;
    for (size_t t = 0; t < ends.size(); ++t) {
      const int r = reps[t];
      used += r;
      const int start = t == 0 ? 0 : ends[t - 1] + 1;
      const int j = ends[t];
      double time;
      if (t == 0) {
        const int m = r - 1;
        const double stashed =
            std::ceil(static_cast<double>(M - (m + 1)) / (m + 1)) *
            (Act(0, j) + W(0, j));
        if (o.use_memory_constraint && stashed > o.memory_bytes) return 1e300;
        time = (T(0, j) + (4.0 * m * W(0, j)) / (B * (m + 1))) / (m + 1);
      } else {
        const int m = used - 1;
        double stashed = Act(start, j) + W(start, j);
        stashed *= std::ceil(static_cast<double>(M - (m + 1)) / r);
        if (o.use_memory_constraint && stashed > o.memory_bytes) return 1e300;
        time = (T(start, j) + (4.0 * (r - 1) * W(start, j)) / (B * r)) / r;
        if (o.activation_compression_ratio.has_value()) {
          const double c = *o.activation_compression_ratio;
          time = std::max(
              time, 2.0 * seq.states[ends[t - 1]].output_activation_bytes /
                        (B * r) / c);
          if (j < n - 1) {
            time = std::max(time, 2.0 * seq.states[j].output_activation_bytes /
                                      (B * r) / c);
          }
        }
      }
      worst = std::max(worst, time);
    }
    return worst;
  }

  void Run() {
    const int n = static_cast<int>(seq.states.size());
    // Choose split sequences backwards from the last state.
    std::function<void(int)> splits = [&](int j) {
      ends.insert(ends.begin(), j);
      AssignReplicas();
      for (int k : seq.PredecessorsOf(j)) splits(k);
      ends.erase(ends.begin());
    };
    splits(n - 1);
  }

  void AssignReplicas() {
    const int M = o.levels[0].workers;
    const int stages = static_cast<int>(ends.size());
    if (stages > M) return;
    std::vector<int> reps(stages, 1);
    std::function<void(int, int)> assign = [&](int t, int left) {
      if (t == stages - 1) {
        const int r = left;
        if (r < 1 || (o.straight_pipeline && r != 1)) return;
        reps[t] = r;
        best = std::min(best, Score(ends, reps));
        return;
      }
      for (int r = 1; r <= left - (stages - 1 - t); ++r) {
        if (o.straight_pipeline && r != 1) break;
        reps[t] = r;
        assign(t + 1, left - r);
      }
    };
    assign(0, M);
  }

  std::vector<int> ends;
};

ProfileGraph RandomChain(std::mt19937* rng, int n) {
  std::uniform_real_distribution<double> ms(0.1, 10), bytes(1e3, 1e7);
  std::vector<ProfileNode> nodes;
  for (int i = 0; i < n; ++i) {
    nodes.push_back({absl::StrCat("node", i), "L", ms(*rng), ms(*rng),
                     bytes(*rng), (*rng)() % 3 == 0 ? 0.0 : bytes(*rng)});
  }
  return *ProfileGraph::Chain(nodes);
}

// A random DAG: node i > 0 gets 1-2 in-edges from earlier nodes.
ProfileGraph RandomDag(std::mt19937* rng, int n) {
  std::uniform_real_distribution<double> ms(0.1, 10), bytes(1e3, 1e7);
  ProfileGraph g;
  for (int i = 0; i < n; ++i) {
    EXPECT_TRUE(g.AddNode({absl::StrCat("node", i), "L", ms(*rng), ms(*rng),
                           bytes(*rng), bytes(*rng)})
                    .ok());
  }
  for (int i = 1; i < n; ++i) {
    const int a = static_cast<int>((*rng)() % i);
    EXPECT_TRUE(
        g.AddEdge(absl::StrCat("node", a), absl::StrCat("node", i)).ok());
    if (i > 1 && (*rng)() % 2 == 0) {
      const int b = static_cast<int>((*rng)() % i);
      if (b != a) {
        EXPECT_TRUE(
            g.AddEdge(absl::StrCat("node", b), absl::StrCat("node", i)).ok());
      }
    }
  }
  // One sink: join every other sink into the last node.
  for (int i = 0; i + 1 < n; ++i) {
    if (g.out(i).empty()) {
      EXPECT_TRUE(
          g.AddEdge(absl::StrCat("node", i), absl::StrCat("node", n - 1)).ok());
    }
  }
  return g;
}

void ExpectNear(double a, double b, const std::string& what) {
  EXPECT_LE(std::fabs(a - b), 1e-9 * std::max(std::fabs(a), std::fabs(b)))
      << what << ": " << a << " vs " << b;
}

void CompareWithBruteForce(const ProfileGraph& g, PipeDreamOptions o,
                           const std::string& what) {
  auto seq = BuildAntichainStates(g);
  ASSERT_TRUE(seq.ok()) << seq.status();
  Brute brute{*seq, o, std::numeric_limits<double>::infinity(), {}};
  brute.Run();
  auto fast = SolvePipeDream(*seq, o);
  o.force_plain_loops = true;
  auto plain = SolvePipeDream(*seq, o);
  if (brute.best >= 1e299) {
    EXPECT_FALSE(fast.ok()) << what;
    EXPECT_FALSE(plain.ok()) << what;
    return;
  }
  ASSERT_TRUE(fast.ok()) << what << ": " << fast.status();
  ASSERT_TRUE(plain.ok()) << what << ": " << plain.status();
  ExpectNear(fast->time_per_stage_s, brute.best, what + " fast");
  ExpectNear(plain->time_per_stage_s, brute.best, what + " plain");
  // The backtracked stages tile the states and use every worker.
  int next = 0, workers = 0;
  for (const PipeDreamStage& s : fast->stages) {
    EXPECT_EQ(s.start, next) << what;
    EXPECT_GT(s.end, s.start) << what;
    next = s.end;
    workers += s.replicas;
  }
  EXPECT_EQ(next, static_cast<int>(seq->states.size())) << what;
  EXPECT_EQ(workers, o.levels[0].workers) << what;
}

TEST(PipeDreamTest, MatchesExhaustiveSearchOnRandomChains) {
  std::mt19937 rng(1);
  for (int trial = 0; trial < 150; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 7);
    const int workers = 1 + static_cast<int>(rng() % 5);
    PipeDreamOptions o;
    o.levels = {{workers, trial % 2 ? 1e9 : 5e8}};
    o.straight_pipeline = trial % 5 == 0;
    if (trial % 3 == 0) {
      o.use_memory_constraint = true;
      o.memory_bytes = 2e7;
    }
    if (trial % 7 == 3) o.activation_compression_ratio = 2.5;
    CompareWithBruteForce(RandomChain(&rng, n), o,
                          absl::StrCat("chain trial ", trial));
  }
}

TEST(PipeDreamTest, MatchesExhaustiveSearchOnRandomDags) {
  std::mt19937 rng(2);
  for (int trial = 0; trial < 80; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 6);
    const int workers = 1 + static_cast<int>(rng() % 4);
    PipeDreamOptions o;
    o.levels = {{workers, 1e9}};
    o.straight_pipeline = trial % 4 == 0;
    if (trial % 3 == 1) o.activation_compression_ratio = 1.5;
    CompareWithBruteForce(RandomDag(&rng, n), o,
                          absl::StrCat("dag trial ", trial));
  }
}

TEST(PipeDreamTest, HandWorkedTwoStages) {
  // Two layers of 6 ms and 4 ms (fwd+bwd), no parameters, 2 workers,
  // straight: stages {0} and {1}; the bottleneck is 6 ms.
  auto g =
      ProfileGraph::Chain({{"a", "A", 2, 4, 100, 0}, {"b", "B", 1, 3, 100, 0}});
  auto seq = BuildAntichainStates(*g);
  PipeDreamOptions o;
  o.levels = {{2, 1e9}};
  o.straight_pipeline = true;
  auto s = SolvePipeDream(*seq, o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_DOUBLE_EQ(s->time_per_stage_s, 0.006);
  ASSERT_EQ(s->stages.size(), 2u);
  EXPECT_EQ(s->stages[0].end, 1);
  EXPECT_DOUBLE_EQ(s->single_worker_time_s, 0.010);
  // Data parallel without parameters: 10 ms / 2.
  EXPECT_DOUBLE_EQ(s->data_parallel_time_s, 0.005);

  // Replication allowed: one stage on both workers costs the all-reduce of
  // 1 MB of parameters: (0.010 + 4*1*1e6/(1e9*2)) / 2 = 6 ms, against
  // max((6 + 0)/1, 4) = 6 ms split: with 2e6 bytes, the split wins.
  auto g2 = ProfileGraph::Chain(
      {{"a", "A", 2, 4, 100, 1e6}, {"b", "B", 1, 3, 100, 1e6}});
  auto seq2 = BuildAntichainStates(*g2);
  o.straight_pipeline = false;
  auto s2 = SolvePipeDream(*seq2, o);
  ASSERT_TRUE(s2.ok());
  EXPECT_DOUBLE_EQ(s2->time_per_stage_s, 0.006);
  EXPECT_EQ(s2->stages.size(), 2u);
  // With tiny parameters, data parallelism wins: (10 ms + 4*1*2/(2e9)) / 2.
  auto g3 =
      ProfileGraph::Chain({{"a", "A", 2, 4, 100, 1}, {"b", "B", 1, 3, 100, 1}});
  auto s3 = SolvePipeDream(*BuildAntichainStates(*g3), o);
  ASSERT_TRUE(s3.ok());
  EXPECT_DOUBLE_EQ(s3->time_per_stage_s, (0.010 + 8.0 / 2e9) / 2);
  ASSERT_EQ(s3->stages.size(), 1u);
  EXPECT_EQ(s3->stages[0].replicas, 2);
}

TEST(PipeDreamTest, HierarchicalMatchesPlainLoopsAndComposesReplicas) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 40; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 12);
    ProfileGraph g = RandomChain(&rng, n);
    auto seq = BuildAntichainStates(g);
    PipeDreamOptions o;
    o.levels = {{1 + static_cast<int>(rng() % 4), 1e10},
                {1 + static_cast<int>(rng() % 4), 1e9}};
    if (trial % 3 == 0) o.levels.push_back({2, 2e8});
    o.use_fewer_machines = trial % 2 == 1;
    auto fast = SolvePipeDream(*seq, o);
    o.force_plain_loops = true;
    auto plain = SolvePipeDream(*seq, o);
    ASSERT_TRUE(fast.ok() && plain.ok());
    ExpectNear(fast->time_per_stage_s, plain->time_per_stage_s,
               absl::StrCat("hierarchical trial ", trial));
    int total = 1;
    for (const PlannerLevel& l : o.levels) total *= l.workers;
    int workers = 0, next = 0;
    for (const PipeDreamStage& s : fast->stages) {
      EXPECT_EQ(s.start, next);
      next = s.end;
      workers += s.replicas;
    }
    EXPECT_EQ(next, n);
    if (!o.use_fewer_machines) {
      EXPECT_EQ(workers, total);
    } else {
      EXPECT_LE(workers, total);
    }
  }
}

TEST(PipeDreamTest, HierarchicalHandWorked) {
  // 4 equal layers, 2 workers per server, 2 servers, no parameters: each
  // level halves the work, 40 ms / 4 = 10 ms per minibatch.
  std::vector<ProfileNode> nodes;
  for (int i = 0; i < 4; ++i) {
    nodes.push_back({absl::StrCat("n", i), "L", 4, 6, 1000, 0});
  }
  auto seq = BuildAntichainStates(*ProfileGraph::Chain(nodes));
  PipeDreamOptions o;
  o.levels = {{2, 1e10}, {2, 1e9}};
  o.straight_pipeline = true;
  auto s = SolvePipeDream(*seq, o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_DOUBLE_EQ(s->time_per_stage_s, 0.010);
  ASSERT_EQ(s->stages.size(), 4u);
  ASSERT_EQ(s->level_stages[1].size(), 2u);
  EXPECT_EQ(s->level_stages[1][0].end, 2);
}

// Objective values computed by PipeDream's own optimizer_graph_hierarchical.py
// on this profile (see docs/planner.md), as regression anchors.
TEST(PipeDreamTest, MatchesPipeDreamsOwnOptimizerOnADag) {
  const std::string text =
      "node1 -- Input0 -- forward_compute_time=0.000, "
      "backward_compute_time=0.000, activation_size=602112.0, "
      "parameter_size=0.000\n"
      "node2 -- Conv2d -- forward_compute_time=1.5, "
      "backward_compute_time=3.0, activation_size=[1000.0; 24.0], "
      "parameter_size=7000.0\n"
      "node3 -- ReLU -- forward_compute_time=0.25, "
      "backward_compute_time=0.5, activation_size=1024.0, "
      "parameter_size=0.0\n"
      "node4 -- Conv2d -- forward_compute_time=2.0, "
      "backward_compute_time=4.0, activation_size=1024.0, "
      "parameter_size=36000.0\n"
      "node5 -- Add -- forward_compute_time=0.1, "
      "backward_compute_time=0.1, activation_size=1024.0, "
      "parameter_size=0.0\n"
      "node6 -- Linear -- forward_compute_time=3.0, "
      "backward_compute_time=6.0, activation_size=40.0, "
      "parameter_size=40000.0\n"
      "\tnode1 -- node2\n\tnode2 -- node3\n\tnode2 -- node4\n"
      "\tnode3 -- node5\n\tnode4 -- node5\n\tnode5 -- node6\n";
  auto g = ProfileGraph::FromPipeDreamText(text);
  ASSERT_TRUE(g.ok()) << g.status();
  auto seq = BuildAntichainStates(g->WithoutInputsAndGetitemSinks());
  ASSERT_TRUE(seq.ok());
  struct Case {
    std::vector<PlannerLevel> levels;
    bool straight;
    double pipedream;
  };
  const std::vector<Case> cases = {
      {{{2, 1e9}}, false, 0.010307999999999998},
      {{{3, 1e9}}, false, 0.006890444444444443},
      {{{2, 1e10}, {2, 1e9}}, false, 0.005158149999999999},
      {{{3, 1e9}}, true, 0.008999999999999998},
  };
  for (const Case& c : cases) {
    PipeDreamOptions o;
    o.levels = c.levels;
    o.straight_pipeline = c.straight;
    auto s = SolvePipeDream(*seq, o);
    ASSERT_TRUE(s.ok()) << s.status();
    ExpectNear(s->time_per_stage_s, c.pipedream, "PipeDream reference");
  }
}

TEST(PipeDreamTest, BadInputsAndInfeasibleMemory) {
  auto seq = BuildAntichainStates(*ProfileGraph::Chain(
      {{"a", "A", 1, 1, 1e9, 1e9}, {"b", "B", 1, 1, 1e9, 1e9}}));
  PipeDreamOptions o;
  EXPECT_EQ(SolvePipeDream(*seq, o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.levels = {{0, 1e9}};
  EXPECT_NE(
      SolvePipeDream(*seq, o).status().message().find("level 0 has 0 workers"),
      std::string::npos);
  o.levels = {{2, -1}};
  EXPECT_FALSE(SolvePipeDream(*seq, o).ok());
  o.levels = {{2, 1e9}};
  o.use_memory_constraint = true;
  o.memory_bytes = 1e6;
  // PipeDream's memory model counts what a stage stashes for the workers
  // after it: one stage replicated on every worker stashes nothing and
  // fits, but a straight two-stage pipeline's first stage does not.
  EXPECT_TRUE(SolvePipeDream(*seq, o).ok());
  o.straight_pipeline = true;
  auto s = SolvePipeDream(*seq, o);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("memory limit"), std::string::npos);
}

}  // namespace
}  // namespace aqueduct
