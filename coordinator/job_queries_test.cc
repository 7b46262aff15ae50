#include "coordinator/job_queries.h"

#include <string>
#include <vector>

#include "common/clock.h"
#include "coordinator/options.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

class JobQueriesTest : public ::testing::Test {
 protected:
  JobQueriesTest() : registry_(options_.registry, &clock_), jobs_("tag", 1) {}

  // A healthy worker `id` with `memory` bytes.
  void AddWorker(const std::string& id, int64_t memory) {
    WorkerInfo info;
    info.set_worker_id(id);
    info.set_incarnation("i-" + id);
    info.set_address(id + ":1");
    info.mutable_device()->set_memory_bytes(memory);
    std::vector<WorkerTransition> changes;
    ASSERT_TRUE(registry_.Register(info, &changes).ok());
  }
  // Job "j1", RUNNING at attempt 1 with a plan of two stages: w0 runs
  // stage 0 and w1 stage 1 (the output stage), both replica 0.
  Job& AddRunning() {
    Job job;
    job.id = "j1";
    job.state = v1::JOB_RUNNING;
    job.attempt = 1;
    job.has_plan = true;
    job.plan.add_stages();
    job.plan.add_stages();
    for (int stage : {0, 1}) {
      const std::string w = "w" + std::to_string(stage);
      AddWorker(w, 1);
      registry_.Assign(w, "j1", stage, 0);
      job.stage_workers.push_back({w});
    }
    return jobs_.Add(std::move(job));
  }

  CoordinatorOptions options_;
  FakeClock clock_;
  Registry registry_;
  JobTable jobs_;
};

TEST_F(JobQueriesTest, LargestMemoryIsOfTheLiveWorkers) {
  EXPECT_EQ(LargestLiveWorkerMemory(registry_), 0);
  AddWorker("w1", 100);
  AddWorker("w2", 300);
  AddWorker("w3", 200);
  EXPECT_EQ(LargestLiveWorkerMemory(registry_), 300);
  (void)registry_.MarkDead("w2", "gone");
  EXPECT_EQ(LargestLiveWorkerMemory(registry_), 200);
}

TEST_F(JobQueriesTest, AJobWithoutAPlanSaysItsState) {
  Job job;
  job.id = "j1";
  job.state = v1::JOB_PENDING;
  absl::StatusOr<PartitionPlan> plan = PlanOf(job);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(plan.status().message().find("PENDING"), std::string::npos)
      << plan.status();
  job.has_plan = true;
  job.plan.add_stages();
  ASSERT_TRUE(PlanOf(job).ok());
  EXPECT_EQ(PlanOf(job)->stages_size(), 1);
}

TEST_F(JobQueriesTest, CheckpointsAreOldestFirst) {
  Job job;
  for (int64_t version : {30, 10, 20}) {
    job.checkpoints[version].set_version(version);
  }
  std::vector<int64_t> versions;
  for (const auto& m : CheckpointsOf(job)) versions.push_back(m.version());
  EXPECT_EQ(versions, (std::vector<int64_t>{10, 20, 30}));
}

TEST_F(JobQueriesTest, OnlyTheOutputStagesFirstReplicaUploads) {
  AddRunning();
  EXPECT_TRUE(CheckModelUploader(registry_, jobs_, "w1", "i-w1", "j1", 1).ok());
  // Not the output stage; another attempt; a stale incarnation; no job.
  EXPECT_EQ(CheckModelUploader(registry_, jobs_, "w0", "i-w0", "j1", 1).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CheckModelUploader(registry_, jobs_, "w1", "i-w1", "j1", 0).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(CheckModelUploader(registry_, jobs_, "w1", "old", "j1", 1).ok());
  EXPECT_EQ(CheckModelUploader(registry_, jobs_, "w1", "i-w1", "j9", 1).code(),
            absl::StatusCode::kNotFound);
}

// A worker with two chunks in a V (ZB-V) registers its first stage, 0,
// and holds the output stage too: it uploads the model.
TEST_F(JobQueriesTest, TheWorkerHoldingTheOutputChunkUploads) {
  Job& job = AddRunning();
  job.plan.add_stages();
  job.stage_workers = {{"w0"}, {"w1"}, {"w0"}};
  EXPECT_TRUE(CheckModelUploader(registry_, jobs_, "w0", "i-w0", "j1", 1).ok());
  EXPECT_EQ(CheckModelUploader(registry_, jobs_, "w1", "i-w1", "j1", 1).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(JobQueriesTest, AFinishedJobTakesNoModel) {
  Job& job = AddRunning();
  job.state = v1::JOB_CANCELLED;
  EXPECT_EQ(CheckModelUploader(registry_, jobs_, "w1", "i-w1", "j1", 1).code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace aqueduct
