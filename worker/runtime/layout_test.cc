// The job layout from an assignment: pure, checked directly.
#include "worker/runtime/layout.h"

#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

// Two stages over three workers: layers [0, 3) on ranks 0 and 1, [3, 5) on
// rank 2.
StageAssignment Assignment(int stage, int replica, int rank) {
  StageAssignment a;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"pb(
        job_id: "j"
        spec {
          batch_size: 16
          max_steps: 7
          pipeline { workers: 3 schedule: "1f1b_flush" microbatches: 4 }
        }
        plan {
          stages {
            first_layer: 0
            end_layer: 3
            replicas: 2
            worker_ranks: [ 0, 1 ]
            warmup_depth: 1
          }
          stages {
            first_layer: 3
            end_layer: 5
            replicas: 1
            worker_ranks: [ 2 ]
            warmup_depth: 1
          }
        }
        peers { worker_ids: [ "a", "b" ] }
        peers { worker_ids: [ "c" ] }
        rendezvous_key: "job/j/"
        world_size: 3
      )pb",
      &a));
  a.set_stage(stage);
  a.set_replica(replica);
  a.set_rank(rank);
  return a;
}

TEST(LayoutTest, FromAssignment) {
  auto layout = LayoutFromAssignment(Assignment(0, 1, 1), 5, 1000);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->policy.schedule, v1::SCHEDULE_1F1B_FLUSH);
  EXPECT_EQ(layout->pipeline.policy, v1::SCHEDULE_1F1B_FLUSH);
  EXPECT_EQ(layout->pipeline.layer_begin, (std::vector<int>{0, 3, 5}));
  EXPECT_EQ(layout->pipeline.ranks,
            (std::vector<std::vector<int>>{{0, 1}, {2}}));
  EXPECT_EQ(layout->pipeline.warmup_depth, (std::vector<int>{1, 1}));
  EXPECT_EQ(layout->pipeline.microbatches, 4);
  EXPECT_EQ(layout->pipeline.num_minibatches, 7);
  EXPECT_EQ(layout->total_steps, 7);
  EXPECT_EQ(layout->stage, 0);
  EXPECT_EQ(layout->replica, 1);
  EXPECT_EQ(layout->rank, 1);
  EXPECT_EQ(layout->world_size, 3);
  EXPECT_EQ(layout->layer_begin, 0);
  EXPECT_EQ(layout->layer_end, 3);
  EXPECT_TRUE(layout->input_stage());
  EXPECT_FALSE(layout->output_stage());
  EXPECT_EQ(layout->evaluator_rank(), 2);
}

TEST(LayoutTest, MicrobatchesDefaultToADivisorFromTheJobsWorkers) {
  StageAssignment a = Assignment(1, 0, 2);
  a.mutable_spec()->mutable_pipeline()->clear_microbatches();
  a.mutable_spec()->set_batch_size(12);
  auto layout = LayoutFromAssignment(a, 5, 1000);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->pipeline.microbatches, 3);
  EXPECT_EQ(layout->loss_samples_per_minibatch(), 12);
  // Not divisible into 3: the smallest divisor above, 4 (a job re-planned
  // onto 3 workers keeps training; pipeline/policy.h).
  a.mutable_spec()->set_batch_size(16);
  layout = LayoutFromAssignment(a, 5, 1000);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->pipeline.microbatches, 4);
  // Set by the user and not dividing: refused.
  a.mutable_spec()->mutable_pipeline()->set_microbatches(3);
  EXPECT_EQ(LayoutFromAssignment(a, 5, 1000).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(LayoutTest, StashingSchedulesRunWholeMinibatches) {
  StageAssignment a = Assignment(1, 0, 2);
  a.mutable_spec()->mutable_pipeline()->set_schedule("1f1b_stashed");
  a.mutable_spec()->mutable_pipeline()->clear_microbatches();
  auto layout = LayoutFromAssignment(a, 5, 1000);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->pipeline.microbatches, 1);
  EXPECT_EQ(layout->loss_samples_per_minibatch(), 16);
}

TEST(LayoutTest, TotalStepsFromEpochs) {
  StageAssignment a = Assignment(1, 0, 2);
  a.mutable_spec()->clear_max_steps();
  a.mutable_spec()->set_epochs(2);
  auto layout = LayoutFromAssignment(a, 5, 100);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->total_steps, 2 * (100 / 16));
  EXPECT_EQ(layout->pipeline.num_minibatches, 12);
}

TEST(LayoutTest, LossSamplesAreTheReplicasShareOfMicrobatches) {
  JobLayout layout;
  layout.batch_size = 16;
  layout.pipeline.microbatches = 4;
  layout.pipeline.ranks = {{0}, {1, 2, 3}};
  layout.stage = 1;
  // Microbatches 0 and 3 go to replica 0, 1 to replica 1, 2 to replica 2.
  layout.replica = 0;
  EXPECT_EQ(layout.loss_samples_per_minibatch(), 8);
  layout.replica = 1;
  EXPECT_EQ(layout.loss_samples_per_minibatch(), 4);
  layout.replica = 2;
  EXPECT_EQ(layout.loss_samples_per_minibatch(), 4);
}

TEST(LayoutTest, PlanThatDoesNotCoverTheModelIsRefused) {
  auto layout = LayoutFromAssignment(Assignment(0, 0, 0), 6, 1000);
  EXPECT_EQ(layout.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(layout.status().message().find("covers 5 of the model's 6"),
            std::string::npos)
      << layout.status();
  StageAssignment gap = Assignment(0, 0, 0);
  gap.mutable_plan()->mutable_stages(1)->set_first_layer(4);
  layout = LayoutFromAssignment(gap, 5, 1000);
  EXPECT_NE(layout.status().message().find("plan stage 1 covers layers [4, "
                                           "5); expected it to start at "
                                           "layer 3"),
            std::string::npos)
      << layout.status();
}

TEST(LayoutTest, AssignmentOutsideItsPlanIsRefused) {
  EXPECT_EQ(CheckAssignment(Assignment(2, 0, 0)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckAssignment(Assignment(1, 1, 0)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(CheckAssignment(Assignment(0, 1, 1)).ok());
  StageAssignment no_ranks = Assignment(1, 0, 2);
  no_ranks.mutable_plan()->mutable_stages(1)->clear_worker_ranks();
  EXPECT_EQ(LayoutFromAssignment(no_ranks, 5, 1000).status().code(),
            absl::StatusCode::kInvalidArgument);
  StageAssignment bad_batch = Assignment(0, 0, 0);
  bad_batch.mutable_spec()->set_batch_size(15);
  EXPECT_EQ(LayoutFromAssignment(bad_batch, 5, 1000).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(LayoutTest, RunsLocallyOnlyForOneStageOneReplica) {
  StageAssignment a = Assignment(0, 0, 0);
  EXPECT_FALSE(RunsLocally(a.plan()));
  a.mutable_plan()->mutable_stages()->RemoveLast();
  EXPECT_FALSE(RunsLocally(a.plan()));  // Two replicas.
  a.mutable_plan()->mutable_stages(0)->set_replicas(1);
  EXPECT_TRUE(RunsLocally(a.plan()));
}

TEST(LayoutTest, DescribeRanksNamesEveryWorker) {
  EXPECT_EQ(DescribeRanks(Assignment(0, 0, 0)),
            "0=a (stage 0), 1=b (stage 0), 2=c (stage 1)");
}

}  // namespace
}  // namespace aqueduct
