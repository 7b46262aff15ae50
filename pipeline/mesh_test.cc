#include "pipeline/mesh.h"

#include <algorithm>
#include <set>

#include "gtest/gtest.h"

namespace aqueduct {
namespace {

RankMesh Mesh(int p, int d, int t) {
  auto mesh = RankMesh::Make({p, d, t});
  EXPECT_TRUE(mesh.ok()) << mesh.status();
  return *mesh;
}

// Megatron's "tp-dp-pp" order: tensor fastest, then data, then pipeline.
TEST(RankMeshTest, TensorIsInnermostThenDataThenPipeline) {
  const RankMesh mesh = Mesh(2, 2, 2);
  EXPECT_EQ(mesh.size(), 8);
  EXPECT_EQ(mesh.RankOf({0, 0, 1}), 1);
  EXPECT_EQ(mesh.RankOf({0, 1, 0}), 2);
  EXPECT_EQ(mesh.RankOf({1, 0, 0}), 4);
  EXPECT_EQ(mesh.RankOf({1, 1, 1}), 7);
  for (int rank = 0; rank < mesh.size(); ++rank) {
    EXPECT_EQ(mesh.RankOf(mesh.CoordinatesOf(rank)), rank);
  }
  EXPECT_EQ(mesh.GroupOf(5, MeshAxis::kTensor), (std::vector<int>{4, 5}));
  EXPECT_EQ(mesh.GroupOf(5, MeshAxis::kData), (std::vector<int>{5, 7}));
  EXPECT_EQ(mesh.GroupOf(5, MeshAxis::kPipeline), (std::vector<int>{1, 5}));
  EXPECT_EQ(mesh.PreviousInPipeline(5), 1);
  EXPECT_EQ(mesh.NextInPipeline(5), -1);
  EXPECT_EQ(mesh.NextInPipeline(2), 6);
  EXPECT_EQ(mesh.PreviousInPipeline(2), -1);
}

// Along every axis the groups partition the ranks, each rank's index in its
// group is its coordinate on the axis, and two ranks share a group exactly
// when their other coordinates agree.
TEST(RankMeshTest, GroupsPartitionTheRanksAlongEveryAxis) {
  for (const MeshShape& shape :
       {MeshShape{1, 1, 1}, MeshShape{4, 1, 1}, MeshShape{1, 3, 1},
        MeshShape{1, 1, 4}, MeshShape{2, 3, 4}, MeshShape{3, 1, 2}}) {
    const RankMesh mesh = *RankMesh::Make(shape);
    for (MeshAxis axis :
         {MeshAxis::kPipeline, MeshAxis::kData, MeshAxis::kTensor}) {
      std::multiset<int> covered;
      for (const std::vector<int>& group : mesh.Groups(axis)) {
        covered.insert(group.begin(), group.end());
        for (size_t i = 0; i < group.size(); ++i) {
          const MeshCoordinates c = mesh.CoordinatesOf(group[i]);
          const MeshCoordinates first = mesh.CoordinatesOf(group[0]);
          const int along = axis == MeshAxis::kPipeline ? c.pipeline
                            : axis == MeshAxis::kData   ? c.data
                                                        : c.tensor;
          EXPECT_EQ(along, static_cast<int>(i)) << MeshAxisName(axis);
          if (axis != MeshAxis::kPipeline) {
            EXPECT_EQ(c.pipeline, first.pipeline);
          }
          if (axis != MeshAxis::kData) {
            EXPECT_EQ(c.data, first.data);
          }
          if (axis != MeshAxis::kTensor) {
            EXPECT_EQ(c.tensor, first.tensor);
          }
        }
      }
      EXPECT_EQ(static_cast<int>(covered.size()), mesh.size());
      for (int rank = 0; rank < mesh.size(); ++rank) {
        EXPECT_EQ(covered.count(rank), 1u) << MeshAxisName(axis);
      }
    }
  }
}

TEST(RankMeshTest, BadShapesAreRefusedNamingTheDegree) {
  auto zero = RankMesh::Make({2, 0, 1});
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("data degree is 0"), std::string::npos)
      << zero.status();
  auto huge = RankMesh::Make({1000, 1000, 1000});
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("larger than"), std::string::npos);
}

// A tensor group of 2 fits hosts of 4 workers; a tensor group of 4 does
// not fit hosts of 2, and the error names the group.
TEST(RankMeshTest, TensorGroupsStayInsideHosts) {
  EXPECT_TRUE(CheckTensorGroupsWithin(Mesh(2, 2, 2), {4, 4}).ok());
  EXPECT_TRUE(CheckTensorGroupsWithin(Mesh(2, 2, 2), {2, 2, 2, 2}).ok());
  const absl::Status split = CheckTensorGroupsWithin(Mesh(2, 1, 4), {2, 2, 4});
  ASSERT_FALSE(split.ok());
  EXPECT_NE(split.message().find("ranks 0-3 spans groups 0 and 1"),
            std::string::npos)
      << split;
  EXPECT_FALSE(CheckTensorGroupsWithin(Mesh(2, 2, 2), {4}).ok());
  EXPECT_FALSE(CheckTensorGroupsWithin(Mesh(1, 1, 2), {2, 0}).ok());
}

}  // namespace
}  // namespace aqueduct
