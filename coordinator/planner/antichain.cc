#include "coordinator/planner/antichain.h"

#include <algorithm>
#include <deque>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace aqueduct {

namespace {

using Bits = std::vector<uint64_t>;

bool Test(const Bits& b, int i) { return (b[i >> 6] >> (i & 63)) & 1; }
void Set(Bits& b, int i) { b[i >> 6] |= uint64_t{1} << (i & 63); }

// Transitive predecessor and successor sets of every node.
struct Closure {
  std::vector<Bits> pred, succ;
};

Closure ComputeClosure(const ProfileGraph& g) {
  const int n = g.size();
  const size_t words = (n + 63) / 64;
  // Topological order (Kahn), the graph being valid.
  std::vector<int> indegree(n), order;
  for (int i = 0; i < n; ++i) indegree[i] = static_cast<int>(g.in(i).size());
  for (int i = 0; i < n; ++i) {
    if (indegree[i] == 0) order.push_back(i);
  }
  for (size_t k = 0; k < order.size(); ++k) {
    for (int o : g.out(order[k])) {
      if (--indegree[o] == 0) order.push_back(o);
    }
  }
  Closure c;
  c.pred.assign(n, Bits(words, 0));
  c.succ.assign(n, Bits(words, 0));
  for (int v : order) {
    for (int p : g.in(v)) {
      for (size_t w = 0; w < words; ++w) c.pred[v][w] |= c.pred[p][w];
      Set(c.pred[v], p);
    }
  }
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const int v = *it;
    for (int o : g.out(v)) {
      for (size_t w = 0; w < words; ++w) c.succ[v][w] |= c.succ[o][w];
      Set(c.succ[v], o);
    }
  }
  return c;
}

class AntichainExplorer {
 public:
  AntichainExplorer(const ProfileGraph& g, const Closure& c) : g_(g), c_(c) {}

  // PipeDream's augment_antichain: the antichain plus every predecessor p
  // of one of its nodes x with an out-edge to a node that is neither a
  // predecessor of x nor x. Extra nodes first (ascending), then the
  // antichain in its order.
  std::vector<int> Augment(const std::vector<int>& antichain) {
    std::vector<int> key = antichain;
    std::sort(key.begin(), key.end());
    auto it = augmented_.find(key);
    if (it != augmented_.end()) return it->second;
    std::set<int> extra;
    for (int x : antichain) {
      const Bits& preds = c_.pred[x];
      for (int p = 0; p < g_.size(); ++p) {
        if (!Test(preds, p)) continue;
        for (int o : g_.out(p)) {
          if (!Test(preds, o) && o != x) {
            extra.insert(p);
            break;
          }
        }
      }
    }
    std::vector<int> result(extra.begin(), extra.end());
    result.insert(result.end(), antichain.begin(), antichain.end());
    augmented_[key] = result;
    return result;
  }

  // PipeDream's deaugment_augmented_antichain: drop every node with a
  // successor in the set, and duplicates.
  std::vector<int> Deaugment(const std::vector<int>& augmented) const {
    std::vector<int> result;
    for (int x : augmented) {
      bool remove = false;
      for (int y : augmented) {
        if (Test(c_.succ[x], y)) {
          remove = true;
          break;
        }
      }
      if (!remove &&
          std::find(result.begin(), result.end(), x) == result.end()) {
        result.push_back(x);
      }
    }
    return result;
  }

  std::vector<std::vector<int>> Next(const std::vector<int>& antichain) {
    std::vector<std::vector<int>> next;
    const std::vector<int> augmented = Augment(antichain);
    for (int u : augmented) {
      for (int v : g_.out(u)) {
        if (std::find(antichain.begin(), antichain.end(), v) !=
            antichain.end()) {
          continue;
        }
        bool is_next = true;
        for (int a : augmented) {
          if (Test(c_.succ[v], a)) {
            is_next = false;
            break;
          }
        }
        if (!is_next) continue;
        std::vector<int> replaced = augmented;
        for (int& x : replaced) {
          if (x == u) x = v;
        }
        next.push_back(Deaugment(replaced));
      }
    }
    return next;
  }

 private:
  const ProfileGraph& g_;
  const Closure& c_;
  std::map<std::vector<int>, std::vector<int>> augmented_;
};

std::vector<int> SortedKey(std::vector<int> v) {
  std::sort(v.begin(), v.end());
  return v;
}

// The first node without inputs, or -1 if there is none.
int FirstSource(const ProfileGraph& g) {
  int first_source = -1;
  for (int i = 0; i < g.size() && first_source < 0; ++i) {
    if (g.in(i).empty()) first_source = i;
  }
  return first_source;
}

// The antichain DAG as explored: the augmented antichain of each state (by
// id), the DAG's edges and its node insertion order (what PipeDream's
// topological sort iterates over).
struct AntichainDag {
  std::vector<std::vector<int>> augmented;
  std::vector<std::vector<int>> edges;
  std::vector<int> insertion;
};

// Breadth-first exploration of the antichains reachable from
// {first_source}, recording state ids in order of discovery.
AntichainDag ExploreAntichains(AntichainExplorer* explorer, int first_source) {
  AntichainDag dag;
  std::map<std::vector<int>, int> ids;
  std::vector<bool> inserted;
  auto id_of = [&](const std::vector<int>& antichain) {
    auto key = SortedKey(antichain);
    auto it = ids.find(key);
    if (it != ids.end()) return it->second;
    const int id = static_cast<int>(dag.augmented.size());
    ids.emplace(std::move(key), id);
    dag.augmented.push_back(explorer->Augment(antichain));
    dag.edges.emplace_back();
    inserted.push_back(false);
    return id;
  };
  auto insert = [&](int id) {
    if (!inserted[id]) {
      inserted[id] = true;
      dag.insertion.push_back(id);
    }
  };
  std::set<std::vector<int>> expanded;
  std::deque<std::vector<int>> queue = {{first_source}};
  id_of(queue.front());
  while (!queue.empty()) {
    std::vector<int> antichain = std::move(queue.front());
    queue.pop_front();
    if (!expanded.insert(SortedKey(antichain)).second) continue;
    const int from = id_of(antichain);
    for (std::vector<int>& next : explorer->Next(antichain)) {
      const int to = id_of(next);
      insert(from);
      insert(to);
      dag.edges[from].push_back(to);
      queue.push_back(std::move(next));
    }
  }
  if (dag.insertion.empty()) dag.insertion.push_back(0);  // A single state.
  return dag;
}

// PipeDream's topological sort: depth-first from each node in insertion
// order, children in edge order, each finished node put in front. INTERNAL
// if the DAG has a cycle.
absl::StatusOr<std::vector<int>> TopologicalOrder(const AntichainDag& dag) {
  const std::vector<std::vector<int>>& edges = dag.edges;
  const int num_states = static_cast<int>(dag.augmented.size());
  std::vector<int> order;
  std::vector<char> mark(num_states, 0);  // 0 new, 1 on stack, 2 done.
  for (int root : dag.insertion) {
    if (mark[root]) continue;
    std::vector<std::pair<int, size_t>> stack = {{root, 0}};
    mark[root] = 1;
    while (!stack.empty()) {
      auto& [node, child] = stack.back();
      if (child < edges[node].size()) {
        const int next = edges[node][child++];
        if (mark[next] == 0) {
          mark[next] = 1;
          stack.emplace_back(next, 0);
        } else if (mark[next] == 1) {
          return absl::InternalError("the antichain DAG has a cycle");
        }
        continue;
      }
      mark[node] = 2;
      order.push_back(node);
      stack.pop_back();
    }
  }
  std::reverse(order.begin(), order.end());
  return order;
}

// Fills seq's states (in topological `order`) with their antichains, the
// nodes they cover and the sums over those nodes.
void FillStates(const ProfileGraph& g, const Closure& closure,
                const AntichainDag& dag, const std::vector<int>& order,
                StateSequence* seq) {
  const int num_states = static_cast<int>(dag.augmented.size());
  seq->num_nodes = g.size();
  seq->states.resize(num_states);
  const size_t words = (g.size() + 63) / 64;
  seq->covered.assign(num_states, Bits(words, 0));
  for (int s = 0; s < num_states; ++s) {
    AntichainState& state = seq->states[s];
    state.antichain = dag.augmented[order[s]];
    Bits& cover = seq->covered[s];
    for (int x : state.antichain) {
      for (size_t w = 0; w < words; ++w) cover[w] |= closure.pred[x][w];
      Set(cover, x);
      state.output_activation_bytes += g.nodes()[x].activation_bytes;
    }
    for (int i = 0; i < g.size(); ++i) {
      if (!Test(cover, i)) continue;
      const ProfileNode& node = g.nodes()[i];
      state.compute_s +=
          (node.forward_ms + node.backward_ms + node.optimizer_ms) / 1000.0;
      state.backward_s += node.backward_ms / 1000.0;
      state.activation_bytes += node.MemoryBytes();
      state.parameter_bytes += node.parameter_bytes;
    }
  }
}

// Whether the DAG is the path 0 -> 1 -> ... in topological order (state s
// is node order[s]; index_of inverts order).
bool IsChain(const AntichainDag& dag, const std::vector<int>& order,
             const std::vector<int>& index_of) {
  const int num_states = static_cast<int>(dag.augmented.size());
  bool chain = true;
  for (int s = 0; s < num_states && chain; ++s) {
    std::set<int> outs;
    for (int t : dag.edges[order[s]]) outs.insert(index_of[t]);
    if (s + 1 < num_states) {
      chain = outs.size() == 1 && *outs.begin() == s + 1;
    } else {
      chain = outs.empty();
    }
  }
  return chain;
}

// Sets each state's transitive predecessors in the antichain DAG, in
// topological order (ascending).
void FillPredecessors(const AntichainDag& dag, const std::vector<int>& order,
                      const std::vector<int>& index_of, StateSequence* seq) {
  const int num_states = static_cast<int>(dag.augmented.size());
  const size_t state_words = (num_states + 63) / 64;
  std::vector<Bits> preds(num_states, Bits(state_words, 0));
  for (int s = 0; s < num_states; ++s) {
    for (int t : dag.edges[order[s]]) {
      const int ti = index_of[t];
      for (size_t w = 0; w < state_words; ++w) preds[ti][w] |= preds[s][w];
      Set(preds[ti], s);
    }
  }
  for (int s = 0; s < num_states; ++s) {
    for (int p = 0; p < num_states; ++p) {
      if (Test(preds[s], p)) seq->states[s].predecessors.push_back(p);
    }
  }
}

}  // namespace

std::vector<int> StateSequence::NodesOfRange(int start, int end) const {
  std::vector<int> nodes;
  if (end <= start) return nodes;
  const Bits& last = covered[end - 1];
  for (int i = 0; i < num_nodes; ++i) {
    if (Test(last, i) && (start == 0 || !Test(covered[start - 1], i))) {
      nodes.push_back(i);
    }
  }
  return nodes;
}

std::vector<int> StateSequence::PredecessorsOf(int j) const {
  if (!is_chain) return states[j].predecessors;
  std::vector<int> p(j);
  for (int i = 0; i < j; ++i) p[i] = i;
  return p;
}

absl::StatusOr<StateSequence> BuildAntichainStates(const ProfileGraph& g) {
  if (g.size() == 0) {
    return absl::InvalidArgumentError("the profile has no nodes to plan");
  }
  const Closure closure = ComputeClosure(g);
  AntichainExplorer explorer(g, closure);
  const int first_source = FirstSource(g);
  if (first_source < 0) {
    return absl::InvalidArgumentError("the profile graph has no source");
  }
  const AntichainDag dag = ExploreAntichains(&explorer, first_source);
  ASSIGN_OR_RETURN(const std::vector<int> order, TopologicalOrder(dag));
  const int num_states = static_cast<int>(dag.augmented.size());
  std::vector<int> index_of(num_states);
  for (int i = 0; i < num_states; ++i) index_of[order[i]] = i;

  StateSequence seq;
  FillStates(g, closure, dag, order, &seq);
  seq.is_chain = IsChain(dag, order, index_of);
  if (!seq.is_chain) FillPredecessors(dag, order, index_of, &seq);
  return seq;
}

}  // namespace aqueduct
