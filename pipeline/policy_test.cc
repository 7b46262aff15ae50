#include "pipeline/policy.h"

#include <cstdint>
#include <limits>

#include "gtest/gtest.h"

namespace aqueduct {
namespace {

TEST(PolicyTest, SpellingsRoundTrip) {
  for (const char* name :
       {"1f1b_stashed", "1f1b_vertical_sync", "1f1b_flush", "gpipe"}) {
    auto s = ParseSchedule(name);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_STREQ(ScheduleName(*s), name);
  }
  EXPECT_EQ(*ParseSchedule(""), v1::SCHEDULE_1F1B_STASHED);
  EXPECT_EQ(*ParseTransport(""), v1::TRANSPORT_GLOO);
  EXPECT_EQ(*ParseTransport("nccl"), v1::TRANSPORT_NCCL);
  EXPECT_STREQ(TransportName(v1::TRANSPORT_NCCL), "nccl");
  EXPECT_EQ(*ParseCostModel(""), v1::COST_MODEL_PIPEDREAM);
  EXPECT_EQ(*ParseCostModel("aqueduct"), v1::COST_MODEL_AQUEDUCT);
  EXPECT_STREQ(CostModelName(v1::COST_MODEL_AQUEDUCT), "aqueduct");
  EXPECT_EQ(*ParseTopology(""), v1::TOPOLOGY_FLAT);
  EXPECT_EQ(*ParseTopology("measured"), v1::TOPOLOGY_MEASURED);
  EXPECT_STREQ(TopologyName(v1::TOPOLOGY_MEASURED), "measured");
  EXPECT_STREQ(TopologyName(v1::TOPOLOGY_UNSPECIFIED), "flat");
}

TEST(PolicyTest, UnknownSpellingsNameTheFieldAndTheChoices) {
  auto s = ParseSchedule("zigzag");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().message(),
            "pipeline.schedule='zigzag' is not one of: 1f1b_stashed, "
            "1f1b_vertical_sync, 1f1b_flush, gpipe, zb_h1, zb_h2, 2bw, "
            "interleaved_1f1b, zb_v, auto, custom");
  EXPECT_NE(
      ParseTransport("mpi").status().message().find("pipeline.transport='mpi'"),
      absl::string_view::npos);
  EXPECT_NE(ParseCostModel("x").status().message().find("pipeline.cost_model"),
            absl::string_view::npos);
  EXPECT_EQ(ParseTopology("mesh").status().message(),
            "pipeline.topology='mesh' is not one of: flat, measured");
}

TEST(PolicyTest, ResolveAppliesDefaults) {
  JobSpec spec;
  spec.set_batch_size(64);
  auto p = ResolvePipeline(spec);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->schedule, v1::SCHEDULE_1F1B_STASHED);
  EXPECT_EQ(p->transport, v1::TRANSPORT_GLOO);
  EXPECT_EQ(p->cost_model, v1::COST_MODEL_PIPEDREAM);
  EXPECT_EQ(p->topology, v1::TOPOLOGY_FLAT);
  EXPECT_EQ(p->workers, 1);
  EXPECT_EQ(p->bandwidth_bytes_per_s, 1e9);
  EXPECT_TRUE(StashesWeights(p->schedule));
  EXPECT_FALSE(SplitsMinibatches(p->schedule));
}

TEST(PolicyTest, ResolveRejectsBadFields) {
  auto bad = [](auto mutate, const char* field) {
    JobSpec spec;
    spec.set_batch_size(64);
    mutate(spec.mutable_pipeline());
    auto p = ResolvePipeline(spec);
    ASSERT_FALSE(p.ok()) << field;
    EXPECT_NE(p.status().message().find(field), absl::string_view::npos)
        << p.status();
  };
  bad([](v1::PipelineSpec* p) { p->set_workers(-1); }, "pipeline.workers");
  bad([](v1::PipelineSpec* p) { p->set_workers(kMaxJobWorkers + 1); },
      "pipeline.workers");
  bad([](v1::PipelineSpec* p) { p->set_microbatches(-1); },
      "pipeline.microbatches");
  bad([](v1::PipelineSpec* p) { p->set_wait_for_workers_ms(-5); },
      "pipeline.wait_for_workers_ms");
  bad(
      [](v1::PipelineSpec* p) {
        p->set_bandwidth_bytes_per_s(std::numeric_limits<double>::quiet_NaN());
      },
      "pipeline.bandwidth_bytes_per_s");
  bad(
      [](v1::PipelineSpec* p) {
        p->set_schedule("gpipe");
        p->set_microbatches(5);
      },
      "does not divide batch_size=64");
}

TEST(PolicyTest, MicrobatchesPerSchedule) {
  PipelinePolicy p;
  EXPECT_EQ(*MicrobatchesFor(p, 64, 4), 1);
  p.schedule = v1::SCHEDULE_GPIPE;
  EXPECT_EQ(*MicrobatchesFor(p, 64, 4), 4);
  p.microbatches = 8;
  EXPECT_EQ(*MicrobatchesFor(p, 64, 4), 8);
  EXPECT_FALSE(MicrobatchesFor(p, 60, 4).ok());
  p.microbatches = 0;
  // Unset: the smallest divisor of the batch that is at least the workers
  // (a restart onto 3 of 4 workers must not fail on a number nobody set).
  EXPECT_EQ(*MicrobatchesFor(p, 64, 3), 4);
  EXPECT_EQ(*MicrobatchesFor(p, 8, 3), 4);
  EXPECT_EQ(*MicrobatchesFor(p, 6, 4), 6);
  EXPECT_EQ(*MicrobatchesFor(p, 2, 4), 2);
  EXPECT_EQ(*MicrobatchesFor(p, 9, 1), 1);
  // Set: it must divide the batch.
  p.microbatches = 3;
  EXPECT_FALSE(MicrobatchesFor(p, 8, 3).ok());
}

TEST(PolicyTest, InterleavedTakesMicrobatchesARoundOfWorkersAtATime) {
  PipelinePolicy p;
  p.schedule = v1::SCHEDULE_INTERLEAVED_1F1B;
  EXPECT_EQ(*MicrobatchesFor(p, 16, 4), 4);
  EXPECT_EQ(*MicrobatchesFor(p, 24, 3), 3);
  EXPECT_EQ(*MicrobatchesFor(p, 8, 8), 8);
  auto none = MicrobatchesFor(p, 10, 4);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("multiple of the 4 workers"),
            absl::string_view::npos)
      << none.status();
  p.microbatches = 6;
  auto set = MicrobatchesFor(p, 24, 4);
  ASSERT_FALSE(set.ok());
  EXPECT_NE(set.status().message().find("pipeline.microbatches=6"),
            absl::string_view::npos);
  EXPECT_NE(set.status().message().find("Megatron-LM's rule"),
            absl::string_view::npos);
  p.microbatches = 8;
  EXPECT_EQ(*MicrobatchesFor(p, 24, 4), 8);
}

// A schedule program sets the workers, chunks and microbatches; the spec's
// must agree; a broken one is refused naming the rank and the action.
TEST(PolicyTest, ASchedulePrograms) {
  JobSpec spec;
  spec.set_batch_size(8);
  v1::PipelineSpec* p = spec.mutable_pipeline();
  p->set_schedule_program(
      "# aqueduct schedule: ranks=2 stages_per_rank=2 placement=v "
      "microbatches=2\n"
      "0: 0F0 0F1 3F0 3B0 3F1 3B1 0B0 0B1\n"
      "1: 1F0 2F0 1F1 2F1 2B0 1B0 2B1 1B1\n");
  auto policy = ResolvePipeline(spec);
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_EQ(policy->schedule, v1::SCHEDULE_CUSTOM);
  EXPECT_EQ(policy->workers, 2);
  EXPECT_EQ(policy->chunks, 2);
  EXPECT_EQ(policy->microbatches, 2);
  EXPECT_TRUE(policy->v_placement);
  p->set_workers(3);
  EXPECT_NE(ResolvePipeline(spec).status().message().find(
                "pipeline.workers=3: the schedule program has 2 ranks"),
            absl::string_view::npos);
  p->set_workers(0);
  p->set_schedule("zb_h1");
  EXPECT_NE(
      ResolvePipeline(spec).status().message().find("with a schedule program"),
      absl::string_view::npos);
  p->set_schedule("custom");
  p->set_schedule_program(
      "# aqueduct schedule: ranks=2 stages_per_rank=1 placement=loop "
      "microbatches=1\n0: 0F0 0W0 0I0\n1: 1F0 1I0 1W0\n");
  const std::string broken(ResolvePipeline(spec).status().message());
  EXPECT_NE(broken.find("pipeline.schedule_program: rank 0"), std::string::npos)
      << broken;
  EXPECT_NE(broken.find("W before its I"), std::string::npos) << broken;
  p->clear_schedule_program();
  EXPECT_NE(ResolvePipeline(spec).status().message().find(
                "needs pipeline.schedule_file"),
            absl::string_view::npos);
  p->set_schedule_file("mine.schedule");
  EXPECT_NE(ResolvePipeline(spec).status().message().find("read by aq submit"),
            absl::string_view::npos);
}

TEST(PolicyTest, CheckpointDueEveryStepsOrAtTheAskedVersionNeverAtTheEnd) {
  EXPECT_TRUE(CheckpointDue(10, 100, 5, nullptr));
  EXPECT_FALSE(CheckpointDue(11, 100, 5, nullptr));
  EXPECT_FALSE(CheckpointDue(10, 100, 0, nullptr));
  EXPECT_FALSE(CheckpointDue(100, 100, 5, nullptr));  // The last step.
  std::atomic<int64_t> at{37};
  EXPECT_TRUE(CheckpointDue(37, 100, 0, &at));
  EXPECT_FALSE(CheckpointDue(38, 100, 0, &at));
  at = 100;
  EXPECT_FALSE(CheckpointDue(100, 100, 0, &at));
}

TEST(PolicyTest, ChunksPerSchedule) {
  JobSpec spec;
  spec.set_batch_size(8);
  EXPECT_EQ(ResolvePipeline(spec)->chunks, 1);
  spec.mutable_pipeline()->set_schedule("interleaved_1f1b");
  EXPECT_EQ(ResolvePipeline(spec)->chunks, 2);
  spec.mutable_pipeline()->set_chunks(3);
  EXPECT_EQ(ResolvePipeline(spec)->chunks, 3);
  spec.mutable_pipeline()->set_chunks(kMaxChunks + 1);
  EXPECT_NE(ResolvePipeline(spec).status().message().find("pipeline.chunks"),
            absl::string_view::npos);
  spec.mutable_pipeline()->set_schedule("zb_v");
  spec.mutable_pipeline()->set_chunks(0);
  EXPECT_EQ(ResolvePipeline(spec)->chunks, 2);
  spec.mutable_pipeline()->set_chunks(3);
  EXPECT_NE(ResolvePipeline(spec).status().message().find(
                "zb_v holds 2 chunks per worker"),
            absl::string_view::npos);
  spec.mutable_pipeline()->set_schedule("1f1b_flush");
  spec.mutable_pipeline()->set_chunks(2);
  EXPECT_NE(ResolvePipeline(spec).status().message().find(
                "1f1b_flush holds one chunk per worker"),
            absl::string_view::npos);
  EXPECT_TRUE(HoldsChunks(v1::SCHEDULE_ZB_V));
  EXPECT_TRUE(Flushes(v1::SCHEDULE_INTERLEAVED_1F1B));
  EXPECT_TRUE(SplitsBackward(v1::SCHEDULE_ZB_V));
  EXPECT_FALSE(HoldsChunks(v1::SCHEDULE_ZB_H1));
}

TEST(PolicyTest, TotalStepsIsEpochsTimesFullBatchesCappedByMaxSteps) {
  JobSpec spec;
  spec.set_batch_size(64);
  spec.set_epochs(2);
  EXPECT_EQ(*TotalSteps(spec, 60000), 2 * 937);
  spec.set_max_steps(100);
  EXPECT_EQ(*TotalSteps(spec, 60000), 100);
  spec.set_epochs(0);
  EXPECT_EQ(*TotalSteps(spec, 10), 100);  // max_steps alone.
  spec.set_epochs(1);
  auto small = TotalSteps(spec, 10);
  ASSERT_FALSE(small.ok());
  EXPECT_EQ(small.status().message(),
            "batch_size=64 is larger than the training set (10 samples)");
  spec.set_max_steps(0);
  spec.set_epochs(std::numeric_limits<int64_t>::max() / 2);
  EXPECT_EQ(*TotalSteps(spec, 6400), std::numeric_limits<int64_t>::max());
}

TEST(PolicyTest, PipeMareScaleAndItsChecks) {
  // delay^-(1 - k/K): the full correction at step 0, none from K on.
  EXPECT_DOUBLE_EQ(StalenessLrScale(4, 0, 100), 0.25);
  EXPECT_DOUBLE_EQ(StalenessLrScale(4, 50, 100), 0.5);
  EXPECT_DOUBLE_EQ(StalenessLrScale(4, 100, 100), 1.0);
  EXPECT_DOUBLE_EQ(StalenessLrScale(1, 0, 100), 1.0);
  EXPECT_DOUBLE_EQ(StalenessLrScale(0, 0, 100), 1.0);
  EXPECT_DOUBLE_EQ(StalenessLrScale(4, 0, 0), 1.0);
  JobSpec spec;
  spec.set_batch_size(8);
  spec.mutable_pipeline()->set_staleness_correction("pipemare_lr");
  EXPECT_EQ(ResolvePipeline(spec)->pipemare_warmup_steps, 1000);  // Default.
  spec.mutable_pipeline()->set_staleness_warmup_steps(300);
  EXPECT_EQ(ResolvePipeline(spec)->pipemare_warmup_steps, 300);
  spec.mutable_pipeline()->set_schedule("1f1b_flush");
  EXPECT_NE(ResolvePipeline(spec).status().message().find(
                "applies to the schedules with stale weights"),
            absl::string_view::npos);
  spec.mutable_pipeline()->set_schedule("2bw");
  spec.mutable_pipeline()->set_staleness_correction("magic");
  EXPECT_NE(ResolvePipeline(spec).status().message().find(
                "pipeline.staleness_correction='magic'"),
            absl::string_view::npos);
  spec.mutable_pipeline()->clear_staleness_correction();
  EXPECT_FALSE(ResolvePipeline(spec).ok());  // A warm-up without it.
}

}  // namespace
}  // namespace aqueduct
