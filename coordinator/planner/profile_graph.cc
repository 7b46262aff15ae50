#include "coordinator/planner/profile_graph.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status.h"
#include "google/protobuf/util/json_util.h"
#include "pipeline/limits.h"

namespace aqueduct {

namespace {

// A profile's values are bounded as well as finite: sums over its nodes
// and products with worker counts stay finite in the planner's doubles,
// and a size past an exabyte or a time past 11 days per minibatch is
// not a measurement.
constexpr double kMaxProfileBytes = 1e18;
constexpr double kMaxProfileMs = 1e9;

absl::Status CheckValue(const std::string& id, const char* what, double v,
                        double max) {
  if (!std::isfinite(v) || v < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "node '", id, "': ", what, "=", v, " must be finite and >= 0"));
  }
  if (v > max) {
    return absl::InvalidArgumentError(absl::StrCat(
        "node '", id, "': ", what, "=", v, " must be at most ", max));
  }
  return absl::OkStatus();
}

// A node's layer or stage: -1 (not given) or an index below kMaxLayers
// (a model has no more layers, nor a plan more stages). A layer index of
// 2^31 - 1 from a JSON profile overflowed the planner's end_layer
// (tests/fuzz, profile target).
absl::Status CheckIndex(const std::string& id, const char* what, int v) {
  if (v >= -1 && v < kMaxLayers) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("node '", id, "': ", what, "=", v,
                   " must be -1 (not given) or in [0, ", kMaxLayers, ")"));
}

absl::StatusOr<double> ParseNumber(absl::string_view text,
                                   const std::string& where) {
  double v;
  if (!absl::SimpleAtod(absl::StripAsciiWhitespace(text), &v)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": '", text, "' is not a number"));
  }
  return v;
}

// "key=value" with the expected key.
absl::StatusOr<absl::string_view> ValueOf(absl::string_view field,
                                          absl::string_view key,
                                          const std::string& where) {
  field = absl::StripAsciiWhitespace(field);
  if (!absl::ConsumePrefix(&field, key) || !absl::ConsumePrefix(&field, "=")) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": expected '", key, "=...', found '", field, "'"));
  }
  return field;
}

std::string Number(double v) {
  // Exact round trip, and readable for integers.
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    return absl::StrFormat("%.1f", v);
  }
  return absl::StrFormat("%.17g", v);
}

}  // namespace

int ProfileGraph::IndexOf(const std::string& id) const {
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].id == id) return static_cast<int>(i);
  }
  return -1;
}

absl::Status ProfileGraph::AddNode(ProfileNode node) {
  if (node.id.empty()) {
    return absl::InvalidArgumentError("a node has an empty id");
  }
  if (IndexOf(node.id) >= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("node '", node.id, "' is defined twice"));
  }
  if (nodes_.size() >= static_cast<size_t>(kMaxLayers)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "node '", node.id, "': a profile has at most ", kMaxLayers, " nodes"));
  }
  RETURN_IF_ERROR(CheckIndex(node.id, "layer_index", node.layer_index));
  RETURN_IF_ERROR(CheckIndex(node.id, "stage_id", node.stage_id));
  RETURN_IF_ERROR(CheckValue(node.id, "forward_compute_time", node.forward_ms,
                             kMaxProfileMs));
  RETURN_IF_ERROR(CheckValue(node.id, "backward_compute_time", node.backward_ms,
                             kMaxProfileMs));
  RETURN_IF_ERROR(
      CheckValue(node.id, "optimizer_time", node.optimizer_ms, kMaxProfileMs));
  RETURN_IF_ERROR(CheckValue(node.id, "activation_size", node.activation_bytes,
                             kMaxProfileBytes));
  RETURN_IF_ERROR(CheckValue(node.id, "parameter_size", node.parameter_bytes,
                             kMaxProfileBytes));
  RETURN_IF_ERROR(
      CheckValue(node.id, "saved_bytes", node.saved_bytes, kMaxProfileBytes));
  nodes_.push_back(std::move(node));
  out_.emplace_back();
  in_.emplace_back();
  return absl::OkStatus();
}

absl::Status ProfileGraph::AddEdge(const std::string& from,
                                   const std::string& to) {
  const int a = IndexOf(from), b = IndexOf(to);
  if (a < 0 || b < 0) {
    return absl::InvalidArgumentError(absl::StrCat("edge ", from, " -- ", to,
                                                   " names an unknown node '",
                                                   a < 0 ? from : to, "'"));
  }
  if (a == b) {
    return absl::InvalidArgumentError(
        absl::StrCat("edge ", from, " -- ", to, " is a self-loop"));
  }
  out_[a].push_back(b);
  in_[b].push_back(a);
  return absl::OkStatus();
}

absl::Status ProfileGraph::Validate() const {
  if (nodes_.empty()) {
    return absl::InvalidArgumentError("the profile has no nodes");
  }
  // Kahn's algorithm; whatever is left is on or behind a cycle.
  std::vector<int> indegree(nodes_.size());
  std::vector<int> ready;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    indegree[i] = static_cast<int>(in_[i].size());
    if (indegree[i] == 0) ready.push_back(static_cast<int>(i));
  }
  size_t seen = 0;
  while (!ready.empty()) {
    const int n = ready.back();
    ready.pop_back();
    ++seen;
    for (int m : out_[n]) {
      if (--indegree[m] == 0) ready.push_back(m);
    }
  }
  if (seen != nodes_.size()) {
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (indegree[i] > 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the profile graph has a cycle through node '", nodes_[i].id, "'"));
      }
    }
  }
  return absl::OkStatus();
}

ProfileGraph ProfileGraph::WithoutInputsAndGetitemSinks() const {
  std::vector<bool> keep(nodes_.size(), true);
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (in_[i].empty() && absl::StartsWith(nodes_[i].description, "Input")) {
      keep[i] = false;
    }
  }
  // Sinks of the graph without the inputs.
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (!keep[i]) continue;
    bool sink = true;
    for (int o : out_[i]) sink = sink && !keep[o];
    if (sink && absl::StartsWith(nodes_[i].description, "__getitem__")) {
      keep[i] = false;
    }
  }
  ProfileGraph g;
  g.batch_size_ = batch_size_;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (keep[i]) (void)g.AddNode(nodes_[i]);
  }
  for (size_t i = 0; i < nodes_.size(); ++i) {
    for (int o : out_[i]) {
      if (keep[i] && keep[o]) (void)g.AddEdge(nodes_[i].id, nodes_[o].id);
    }
  }
  return g;
}

absl::StatusOr<ProfileGraph> ProfileGraph::Chain(
    std::vector<ProfileNode> nodes) {
  ProfileGraph g;
  for (ProfileNode& n : nodes) RETURN_IF_ERROR(g.AddNode(std::move(n)));
  for (int i = 0; i + 1 < g.size(); ++i) {
    RETURN_IF_ERROR(g.AddEdge(g.nodes_[i].id, g.nodes_[i + 1].id));
  }
  return g;
}

absl::StatusOr<ProfileGraph> ProfileGraph::FromPipeDreamText(
    const std::string& text) {
  ProfileGraph g;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    const std::string where = absl::StrCat("line ", line_number);
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    if (line[0] == '\t') {
      std::vector<std::string> ends =
          absl::StrSplit(absl::StripAsciiWhitespace(line), " -- ");
      if (ends.size() != 2) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": an edge line must be '<TAB>nodeA -- nodeB'"));
      }
      RETURN_IF_ERROR(Annotate(g.AddEdge(ends[0], ends[1]), where));
      continue;
    }
    std::vector<std::string> tokens =
        absl::StrSplit(absl::StripAsciiWhitespace(line), " -- ");
    if (tokens.size() < 3 || tokens.size() > 4) {
      return absl::InvalidArgumentError(absl::StrCat(
          where,
          ": a node line must be 'id -- description -- "
          "forward_compute_time=..., backward_compute_time=..., "
          "activation_size=..., parameter_size=...[ -- stage_id=K]'"));
    }
    ProfileNode node;
    node.id = tokens[0];
    node.description = tokens[1];
    std::vector<absl::string_view> fields = absl::StrSplit(tokens[2], ", ");
    if (fields.size() != 4) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": expected 4 comma-separated metadata fields, found ",
          fields.size()));
    }
    ASSIGN_OR_RETURN(absl::string_view fwd,
                     ValueOf(fields[0], "forward_compute_time", where));
    ASSIGN_OR_RETURN(node.forward_ms, ParseNumber(fwd, where));
    ASSIGN_OR_RETURN(absl::string_view bwd,
                     ValueOf(fields[1], "backward_compute_time", where));
    ASSIGN_OR_RETURN(node.backward_ms, ParseNumber(bwd, where));
    ASSIGN_OR_RETURN(absl::string_view act,
                     ValueOf(fields[2], "activation_size", where));
    if (absl::ConsumePrefix(&act, "[")) {
      if (!absl::ConsumeSuffix(&act, "]")) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": activation_size list lacks its ']'"));
      }
      node.activation_bytes = 0;
      for (absl::string_view part : absl::StrSplit(act, "; ")) {
        ASSIGN_OR_RETURN(double v, ParseNumber(part, where));
        node.activation_bytes += v;
      }
    } else {
      ASSIGN_OR_RETURN(node.activation_bytes, ParseNumber(act, where));
    }
    ASSIGN_OR_RETURN(absl::string_view params,
                     ValueOf(fields[3], "parameter_size", where));
    ASSIGN_OR_RETURN(node.parameter_bytes, ParseNumber(params, where));
    if (tokens.size() == 4) {
      ASSIGN_OR_RETURN(absl::string_view stage,
                       ValueOf(tokens[3], "stage_id", where));
      if (!absl::SimpleAtoi(stage, &node.stage_id) || node.stage_id < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": stage_id '", stage, "' is not an index"));
      }
    }
    RETURN_IF_ERROR(Annotate(g.AddNode(std::move(node)), where));
  }
  RETURN_IF_ERROR(g.Validate());
  return g;
}

std::string ProfileGraph::ToPipeDreamText() const {
  std::string out;
  for (const ProfileNode& n : nodes_) {
    absl::StrAppend(&out, n.id, " -- ", n.description,
                    " -- forward_compute_time=", Number(n.forward_ms),
                    ", backward_compute_time=", Number(n.backward_ms),
                    ", activation_size=", Number(n.activation_bytes),
                    ", parameter_size=", Number(n.parameter_bytes));
    if (n.stage_id >= 0) absl::StrAppend(&out, " -- stage_id=", n.stage_id);
    out += "\n";
  }
  for (size_t i = 0; i < nodes_.size(); ++i) {
    for (int from : in_[i]) {
      absl::StrAppend(&out, "\t", nodes_[from].id, " -- ", nodes_[i].id, "\n");
    }
  }
  return out;
}

absl::StatusOr<ProfileGraph> ProfileGraph::FromProto(
    const ModelProfile& profile) {
  ProfileGraph g;
  if (profile.batch_size() < 0 || profile.batch_size() > kMaxBatchSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_size=", profile.batch_size(), " must be in [0, ",
                     kMaxBatchSize, "]"));
  }
  if (!std::isfinite(profile.gemm_gflops()) || profile.gemm_gflops() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gemm_gflops=", profile.gemm_gflops(), " must be finite and >= 0"));
  }
  g.batch_size_ = profile.batch_size();
  for (int i = 0; i < profile.nodes_size(); ++i) {
    const LayerProfile& p = profile.nodes(i);
    ProfileNode n;
    n.id = p.id();
    n.description = p.description();
    n.forward_ms = p.forward_ms();
    n.backward_ms = p.backward_ms();
    n.optimizer_ms = p.optimizer_ms();
    n.activation_bytes = p.activation_bytes();
    n.parameter_bytes = p.parameter_bytes();
    n.saved_bytes = p.saved_bytes();
    n.stage_id = p.has_stage_id() ? p.stage_id() : -1;
    n.layer_index = p.has_layer_index() ? p.layer_index() : -1;
    RETURN_IF_ERROR(
        Annotate(g.AddNode(std::move(n)), absl::StrCat("nodes[", i, "]")));
  }
  for (int i = 0; i < profile.edges_size(); ++i) {
    RETURN_IF_ERROR(
        Annotate(g.AddEdge(profile.edges(i).from(), profile.edges(i).to()),
                 absl::StrCat("edges[", i, "]")));
  }
  RETURN_IF_ERROR(g.Validate());
  return g;
}

ModelProfile ProfileGraph::ToProto() const {
  ModelProfile p;
  p.set_batch_size(batch_size_);
  for (const ProfileNode& n : nodes_) {
    LayerProfile* l = p.add_nodes();
    l->set_id(n.id);
    l->set_description(n.description);
    l->set_forward_ms(n.forward_ms);
    l->set_backward_ms(n.backward_ms);
    if (n.optimizer_ms != 0) l->set_optimizer_ms(n.optimizer_ms);
    l->set_activation_bytes(n.activation_bytes);
    l->set_parameter_bytes(n.parameter_bytes);
    if (n.saved_bytes != 0) l->set_saved_bytes(n.saved_bytes);
    if (n.stage_id >= 0) l->set_stage_id(n.stage_id);
    if (n.layer_index >= 0) l->set_layer_index(n.layer_index);
  }
  for (size_t i = 0; i < nodes_.size(); ++i) {
    for (int o : out_[i]) {
      ProfileEdge* e = p.add_edges();
      e->set_from(nodes_[i].id);
      e->set_to(nodes_[o].id);
    }
  }
  return p;
}

absl::StatusOr<ProfileGraph> ParseProfile(const std::string& text,
                                          const std::string& format) {
  if (!format.empty() && format != "json" && format != "pipedream") {
    return absl::InvalidArgumentError(absl::StrCat(
        "profile format '", format, "' is not one of: pipedream, json"));
  }
  const size_t first = text.find_first_not_of(" \t\r\n");
  bool json = format == "json";
  if (format.empty()) json = first != std::string::npos && text[first] == '{';
  if (!json) return ProfileGraph::FromPipeDreamText(text);
  ModelProfile proto;
  const auto s = google::protobuf::util::JsonStringToMessage(text, &proto);
  if (!s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a JSON ModelProfile: ", s.message().as_string()));
  }
  return ProfileGraph::FromProto(proto);
}

absl::StatusOr<ProfileGraph> ReadProfileFile(const std::string& path,
                                             const std::string& format) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  absl::StatusOr<ProfileGraph> graph = ParseProfile(buffer.str(), format);
  if (!graph.ok()) return Annotate(graph.status(), path);
  return graph;
}

absl::Status WriteProfileFile(const std::string& path,
                              const ProfileGraph& graph,
                              const std::string& format) {
  std::string text;
  if (format == "json") {
    google::protobuf::util::JsonPrintOptions options;
    options.add_whitespace = true;
    options.always_print_primitive_fields = true;
    const auto s = google::protobuf::util::MessageToJsonString(graph.ToProto(),
                                                               &text, options);
    if (!s.ok()) return absl::InternalError(s.message().as_string());
  } else if (format == "pipedream") {
    text = graph.ToPipeDreamText();
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "profile format '", format, "' is not one of: pipedream, json"));
  }
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.flush();
  if (!out) {
    return absl::UnavailableError(absl::StrCat(path, ": write failed"));
  }
  return absl::OkStatus();
}

}  // namespace aqueduct
