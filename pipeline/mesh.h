// A job's workers as a mesh of coordinates (pipeline, data, tensor), as
// Megatron-LM's RankGenerator lays them out with the order "tp-dp-pp":
// tensor innermost, so the ranks of a tensor-parallel group are
// consecutive (and a planner that numbers the workers of one host or fast
// group consecutively keeps each tensor group on it), then data, then
// pipeline:
//
//   rank = tensor + T * (data + D * pipeline)
//
// Each rank belongs to one group per axis: its tensor group (same pipeline
// and data coordinates), its data-parallel group (same pipeline and tensor)
// and its pipeline (same data and tensor), each listed in the order of the
// axis, so a rank's index in a group is its coordinate on that axis.
//
// Issue 24's first piece: pure, and not yet wired into plans, the data
// plane or layers.
//
// Thread-safety: a value; const methods.
#ifndef AQUEDUCT_PIPELINE_MESH_H_
#define AQUEDUCT_PIPELINE_MESH_H_

#include <vector>

#include "absl/status/statusor.h"

namespace aqueduct {

enum class MeshAxis { kPipeline, kData, kTensor };
const char* MeshAxisName(MeshAxis axis);

struct MeshShape {
  int pipeline = 1;
  int data = 1;
  int tensor = 1;
};

struct MeshCoordinates {
  int pipeline = 0;
  int data = 0;
  int tensor = 0;
  bool operator==(const MeshCoordinates& o) const {
    return pipeline == o.pipeline && data == o.data && tensor == o.tensor;
  }
};

// The most ranks a mesh may have (pipeline/policy.h kMaxJobWorkers).
inline constexpr int kMaxMeshRanks = 100000;

class RankMesh {
 public:
  // INVALID_ARGUMENT naming the degree when one is below 1 or the product
  // is above kMaxMeshRanks.
  static absl::StatusOr<RankMesh> Make(const MeshShape& shape);

  const MeshShape& shape() const { return shape_; }
  int size() const { return shape_.pipeline * shape_.data * shape_.tensor; }

  // Both require coordinates / a rank inside the mesh.
  int RankOf(const MeshCoordinates& c) const;
  MeshCoordinates CoordinatesOf(int rank) const;

  // Rank `rank`'s group along `axis`, in the axis' order.
  std::vector<int> GroupOf(int rank, MeshAxis axis) const;
  // Every group along `axis` (a partition of the ranks), in order of their
  // first rank.
  std::vector<std::vector<int>> Groups(MeshAxis axis) const;
  // The rank before and after `rank` in its pipeline; -1 at either end.
  int PreviousInPipeline(int rank) const;
  int NextInPipeline(int rank) const;

 private:
  explicit RankMesh(const MeshShape& shape) : shape_(shape) {}
  int Degree(MeshAxis axis) const;
  MeshShape shape_;
};

// Whether every tensor group lies inside one of the consecutive rank
// ranges `group_sizes` describe (the workers of one host, or of a fast
// group of the measured topology, numbered consecutively: sizes that sum
// to the mesh's). INVALID_ARGUMENT naming the tensor group that straddles
// two, or sizes that do not cover the mesh.
absl::Status CheckTensorGroupsWithin(const RankMesh& mesh,
                                     const std::vector<int>& group_sizes);

// Bytes one member of a tensor group of `degree` sends in a tensor-parallel
// transformer layer's sums over `rows` positions of width `dim` (Megatron's
// conjugate operators over ring all-reduces, common/comm/process_group.h):
//   a block:            2 all-reduces forward + 2 backward
//   an attention layer: 1 + 1
// each of rows * dim floats, of which a ring member sends 2 (t - 1) / t
// (exactly, when t divides rows * dim). `forward_only`: the forward's
// sums alone (evaluation). `sequence` (sequence parallelism, blocks only):
// each all-reduce becomes a reduce-scatter and an all-gather (the same
// bytes), and backward gathers ln_1(x) and ln_2(x2) again for the weight
// gradients: 2 all-gathers more, of which a member sends (t - 1) / t.
double TensorGroupBytesPerLayer(int64_t rows, int64_t dim, int degree,
                                bool block, bool forward_only,
                                bool sequence = false);

}  // namespace aqueduct

#endif  // AQUEDUCT_PIPELINE_MESH_H_
