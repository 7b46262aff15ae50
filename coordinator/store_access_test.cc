#include "coordinator/store_access.h"

#include <string>
#include <vector>

#include "common/clock.h"
#include "coordinator/options.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

class StoreAccessTest : public ::testing::Test {
 protected:
  StoreAccessTest()
      : registry_(options_.registry, &clock_),
        jobs_("tag", 1),
        access_(registry_, jobs_, store_) {}

  // Job `id` in `state` at attempt 1.
  Job& AddJob(const std::string& id, JobState state) {
    Job job;
    job.id = id;
    job.state = state;
    job.attempt = 1;
    return jobs_.Add(std::move(job));
  }
  // A healthy worker `id`, assigned to `job_id` unless it is empty.
  void AddWorker(const std::string& id, const std::string& job_id) {
    WorkerInfo info;
    info.set_worker_id(id);
    info.set_incarnation("i-" + id);
    info.set_address(id + ":1");
    std::vector<WorkerTransition> changes;
    ASSERT_TRUE(registry_.Register(info, &changes).ok());
    if (!job_id.empty()) registry_.Assign(id, job_id, 0, 0);
  }

  CoordinatorOptions options_;
  FakeClock clock_;
  Registry registry_;
  JobTable jobs_;
  KvStore store_;
  StoreAccess access_;
};

TEST_F(StoreAccessTest, TheRunningAttemptWrites) {
  AddJob("j1", v1::JOB_RUNNING);
  ASSERT_TRUE(access_.Set("jobs/j1/a1/addr", "x").ok());
  EXPECT_EQ(*access_.Add("jobs/j1/a1/count", 2), 2);
  EXPECT_EQ(*access_.Add("jobs/j1/a1/count", 3), 5);
  EXPECT_EQ(store_.keys_of_job("j1"), 2u);
}

TEST_F(StoreAccessTest, AnUnknownJobIsNotFound) {
  absl::Status s = access_.Set("jobs/j9/a1/addr", "x");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_EQ(access_.Add("jobs/j9/a1/n", 1).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_.keys(), 0u);
}

TEST_F(StoreAccessTest, AnotherAttemptMayNotWrite) {
  AddJob("j1", v1::JOB_RUNNING);
  absl::Status s = access_.Set("jobs/j1/a0/addr", "x");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("attempt 0 of job j1"), std::string::npos) << s;
  EXPECT_EQ(store_.keys(), 0u);
}

TEST_F(StoreAccessTest, AFinishedJobMayNotWrite) {
  AddJob("j1", v1::JOB_SUCCEEDED);
  EXPECT_EQ(access_.Add("jobs/j1/a1/n", 1).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_.keys(), 0u);
}

TEST_F(StoreAccessTest, AKeyOfAnotherShapeIsInvalid) {
  AddJob("j1", v1::JOB_RUNNING);
  EXPECT_EQ(access_.Set("other/j1", "x").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(access_.CheckWorker("w1", "other/j1").code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(StoreAccessTest, OnlyTheJobsLiveWorkersMayUseItsKeys) {
  AddWorker("w1", "j1");
  AddWorker("w2", "j2");
  AddWorker("w3", "");
  EXPECT_TRUE(access_.CheckWorker("w1", "jobs/j1/a1/addr").ok());
  for (const std::string worker : {"w2", "w3", "w9"}) {
    absl::Status s = access_.CheckWorker(worker, "jobs/j1/a1/addr");
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << worker;
    EXPECT_NE(s.message().find("job j1"), std::string::npos) << s;
  }
}

TEST_F(StoreAccessTest, ADeadWorkerMayNotUseItsJobsKeys) {
  AddWorker("w1", "j1");
  registry_.MarkDead("w1", "gone");
  EXPECT_EQ(access_.CheckWorker("w1", "jobs/j1/a1/addr").code(),
            absl::StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace aqueduct
