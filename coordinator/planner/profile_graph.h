// Profile graphs: per-node (layer or operator) forward/backward times,
// activation and parameter sizes, and the edges between nodes. Read and
// written in PipeDream's text format and in Aqueduct's JSON format (the
// ModelProfile message of proto/plan.proto in protobuf's JSON mapping).
//
// PipeDream's text format: one node per line
//   nodeK -- <description> -- forward_compute_time=<ms>,
//       backward_compute_time=<ms>, activation_size=<bytes>,
//       parameter_size=<bytes>[ -- stage_id=K]
// (on one line; activation_size may be a list "[a; b]", which is summed),
// then one edge per line: a TAB, "nodeA -- nodeB".
//
// Pure code, no I/O besides the file helpers. Thread-compatible.
#ifndef AQUEDUCT_COORDINATOR_PLANNER_PROFILE_GRAPH_H_
#define AQUEDUCT_COORDINATOR_PLANNER_PROFILE_GRAPH_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/types.h"

namespace aqueduct {

struct ProfileNode {
  std::string id;
  std::string description;
  double forward_ms = 0;
  double backward_ms = 0;
  double activation_bytes = 0;
  double parameter_bytes = 0;
  int stage_id = -1;
  int layer_index = -1;
  double optimizer_ms = 0;  // The weight update; counted as compute.
  // Kept for backward (memory); 0: activation_bytes stands in.
  double saved_bytes = 0;
  double MemoryBytes() const {
    return saved_bytes > 0 ? saved_bytes : activation_bytes;
  }
};

class ProfileGraph {
 public:
  // Nodes in file order.
  const std::vector<ProfileNode>& nodes() const { return nodes_; }
  // Out- and in-neighbours of node i, in the order the edges were given.
  const std::vector<int>& out(int i) const { return out_[i]; }
  const std::vector<int>& in(int i) const { return in_[i]; }
  int size() const { return static_cast<int>(nodes_.size()); }
  int64_t batch_size() const { return batch_size_; }

  // Builders. AddNode fails on a duplicate id or a negative or non-finite
  // value; AddEdge on an unknown id or a self-loop.
  absl::Status AddNode(ProfileNode node);
  absl::Status AddEdge(const std::string& from, const std::string& to);
  void set_batch_size(int64_t b) { batch_size_ = b; }

  // INVALID_ARGUMENT if the graph is empty or has a cycle (naming a node on
  // it).
  absl::Status Validate() const;

  // PipeDream's planner preprocessing: sources whose description starts with
  // "Input" are removed (the input always goes with the first stage), then
  // sinks whose description starts with "__getitem__".
  ProfileGraph WithoutInputsAndGetitemSinks() const;

  // A chain graph of the given nodes, in order.
  static absl::StatusOr<ProfileGraph> Chain(std::vector<ProfileNode> nodes);

  // PipeDream's text format. Errors name the line.
  static absl::StatusOr<ProfileGraph> FromPipeDreamText(
      const std::string& text);
  std::string ToPipeDreamText() const;

  static absl::StatusOr<ProfileGraph> FromProto(const ModelProfile& profile);
  ModelProfile ToProto() const;

 private:
  int IndexOf(const std::string& id) const;

  std::vector<ProfileNode> nodes_;
  std::vector<std::vector<int>> out_;
  std::vector<std::vector<int>> in_;
  int64_t batch_size_ = 0;
};

// Parses a profile: PipeDream's text format, or JSON (a ModelProfile) when
// `text` starts with '{' (or `format` says "json"; "pipedream" forces the
// text format; "" picks by content). INVALID_ARGUMENT naming the line, the
// node or the JSON error.
absl::StatusOr<ProfileGraph> ParseProfile(const std::string& text,
                                          const std::string& format);
// ParseProfile over a file's content. Errors carry the path.
absl::StatusOr<ProfileGraph> ReadProfileFile(const std::string& path,
                                             const std::string& format);
// Writes `graph` as "json" or "pipedream".
absl::Status WriteProfileFile(const std::string& path,
                              const ProfileGraph& graph,
                              const std::string& format);

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_PLANNER_PROFILE_GRAPH_H_
