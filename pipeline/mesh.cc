#include "pipeline/mesh.h"

#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"

namespace aqueduct {

const char* MeshAxisName(MeshAxis axis) {
  switch (axis) {
    case MeshAxis::kPipeline:
      return "pipeline";
    case MeshAxis::kData:
      return "data";
    case MeshAxis::kTensor:
      return "tensor";
  }
  return "?";
}

absl::StatusOr<RankMesh> RankMesh::Make(const MeshShape& shape) {
  const std::pair<const char*, int> degrees[] = {{"pipeline", shape.pipeline},
                                                 {"data", shape.data},
                                                 {"tensor", shape.tensor}};
  int64_t size = 1;
  for (const auto& [name, degree] : degrees) {
    if (degree < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the mesh's ", name, " degree is ", degree, "; it must be >= 1"));
    }
    size *= degree;
    if (size > kMaxMeshRanks) {
      return absl::InvalidArgumentError(
          absl::StrCat("a mesh of ", shape.pipeline, " x ", shape.data, " x ",
                       shape.tensor, " ranks is larger than ", kMaxMeshRanks));
    }
  }
  return RankMesh(shape);
}

int RankMesh::Degree(MeshAxis axis) const {
  switch (axis) {
    case MeshAxis::kPipeline:
      return shape_.pipeline;
    case MeshAxis::kData:
      return shape_.data;
    case MeshAxis::kTensor:
      return shape_.tensor;
  }
  return 1;
}

int RankMesh::RankOf(const MeshCoordinates& c) const {
  return c.tensor + shape_.tensor * (c.data + shape_.data * c.pipeline);
}

MeshCoordinates RankMesh::CoordinatesOf(int rank) const {
  MeshCoordinates c;
  c.tensor = rank % shape_.tensor;
  c.data = rank / shape_.tensor % shape_.data;
  c.pipeline = rank / (shape_.tensor * shape_.data);
  return c;
}

std::vector<int> RankMesh::GroupOf(int rank, MeshAxis axis) const {
  MeshCoordinates c = CoordinatesOf(rank);
  std::vector<int> group;
  group.reserve(static_cast<size_t>(Degree(axis)));
  for (int i = 0; i < Degree(axis); ++i) {
    if (axis == MeshAxis::kPipeline) c.pipeline = i;
    if (axis == MeshAxis::kData) c.data = i;
    if (axis == MeshAxis::kTensor) c.tensor = i;
    group.push_back(RankOf(c));
  }
  return group;
}

std::vector<std::vector<int>> RankMesh::Groups(MeshAxis axis) const {
  std::vector<std::vector<int>> groups;
  std::vector<bool> seen(static_cast<size_t>(size()), false);
  for (int rank = 0; rank < size(); ++rank) {
    if (seen[rank]) continue;
    groups.push_back(GroupOf(rank, axis));
    for (int member : groups.back()) seen[member] = true;
  }
  return groups;
}

int RankMesh::PreviousInPipeline(int rank) const {
  MeshCoordinates c = CoordinatesOf(rank);
  if (c.pipeline == 0) return -1;
  --c.pipeline;
  return RankOf(c);
}

int RankMesh::NextInPipeline(int rank) const {
  MeshCoordinates c = CoordinatesOf(rank);
  if (c.pipeline + 1 == shape_.pipeline) return -1;
  ++c.pipeline;
  return RankOf(c);
}

absl::Status CheckTensorGroupsWithin(const RankMesh& mesh,
                                     const std::vector<int>& group_sizes) {
  std::vector<int> host_of;
  for (size_t h = 0; h < group_sizes.size(); ++h) {
    if (group_sizes[h] < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("group ", h, " has ", group_sizes[h], " workers"));
    }
    host_of.insert(host_of.end(), static_cast<size_t>(group_sizes[h]),
                   static_cast<int>(h));
    if (static_cast<int64_t>(host_of.size()) > mesh.size()) break;
  }
  if (static_cast<int>(host_of.size()) != mesh.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the groups hold ", host_of.size(), " workers; the mesh ",
                     mesh.size()));
  }
  for (const std::vector<int>& group : mesh.Groups(MeshAxis::kTensor)) {
    if (host_of[group.front()] != host_of[group.back()]) {
      return absl::InvalidArgumentError(
          absl::StrCat("the tensor group of ranks ", group.front(), "-",
                       group.back(), " spans groups ", host_of[group.front()],
                       " and ", host_of[group.back()], ": a tensor degree of ",
                       mesh.shape().tensor, " does not fit these groups"));
    }
  }
  return absl::OkStatus();
}

double TensorGroupBytesPerLayer(int64_t rows, int64_t dim, int degree,
                                bool block, bool forward_only, bool sequence) {
  if (degree <= 1) return 0;
  // In halves of an all-reduce (a reduce-scatter or an all-gather).
  int halves = (block ? 2 : 1) * (forward_only ? 1 : 2) * 2;
  if (sequence && block && !forward_only) halves += 2;
  return halves * static_cast<double>(rows) * static_cast<double>(dim) * 4 *
         (degree - 1) / degree;
}

}  // namespace aqueduct
