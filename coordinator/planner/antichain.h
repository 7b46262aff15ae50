// PipeDream's reduction of a model DAG to a chain of antichain states.
//
// States are antichains of the profile graph (augmented as PipeDream
// augments them), explored breadth-first from the antichain of the first
// source; state-to-state edges form the antichain DAG, which is sorted
// topologically exactly as PipeDream sorts it (depth-first, in insertion
// order). For a chain of layers the states are the layers themselves. For
// state j: compute_s, activation_bytes and parameter_bytes are sums over
// all of its nodes and their predecessors (times in seconds:
// (forward + backward ms) / 1000); output_activation_bytes sums the
// activations of its own (augmented) antichain nodes.
//
// Pure code. Thread-compatible.
#ifndef AQUEDUCT_COORDINATOR_PLANNER_ANTICHAIN_H_
#define AQUEDUCT_COORDINATOR_PLANNER_ANTICHAIN_H_

#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/planner/profile_graph.h"

namespace aqueduct {

struct AntichainState {
  // Node indices of the (augmented) antichain, in PipeDream's order.
  std::vector<int> antichain;
  double compute_s = 0;
  // The backward part of compute_s.
  double backward_s = 0;
  double activation_bytes = 0;
  double parameter_bytes = 0;
  double output_activation_bytes = 0;
  // Every state from which this one is reachable in the antichain DAG
  // (transitively), ascending. Left empty when the sequence is_chain (the
  // predecessors of state j are then 0..j-1).
  std::vector<int> predecessors;
};

struct StateSequence {
  std::vector<AntichainState> states;
  // True when the antichain DAG is a simple path in topological order.
  bool is_chain = false;
  int num_nodes = 0;
  // covered[s] is a bitset over graph nodes: state s's antichain and all
  // their predecessors.
  std::vector<std::vector<uint64_t>> covered;

  // Graph nodes of a stage made of states [start, end): covered by end-1
  // but not by start-1. Ascending.
  std::vector<int> NodesOfRange(int start, int end) const;
  // The predecessors of state j (materialised for chains too).
  std::vector<int> PredecessorsOf(int j) const;
};

// Builds the states of `graph` (already preprocessed by
// WithoutInputsAndGetitemSinks, and valid). INVALID_ARGUMENT if the graph is
// empty.
absl::StatusOr<StateSequence> BuildAntichainStates(const ProfileGraph& graph);

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_PLANNER_ANTICHAIN_H_
