#include "coordinator/worker_lifecycle.h"

#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "coordinator/fake_job_events.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

class WorkerLifecycleTest : public ::testing::Test {
 protected:
  WorkerLifecycleTest()
      : registry_(options_.registry, &clock_),
        jobs_("tag", 1),
        workers_(options_, registry_, jobs_, events_) {}

  WorkerInfo Info(const std::string& id) {
    WorkerInfo info;
    info.set_worker_id(id);
    info.set_incarnation("i-" + id);
    info.set_address(id + ":1");
    return info;
  }
  // A running job of attempt 0 with one stage on `worker`.
  Job& AddRunning(const std::string& id, const std::string& worker) {
    Job job;
    job.id = id;
    job.state = v1::JOB_RUNNING;
    job.reserved = {worker};
    job.stage_workers = {{worker}};
    return jobs_.Add(std::move(job));
  }
  // The same, taken back after a restart and awaiting `worker`.
  Job& AddAwaiting(const std::string& id, const std::string& worker) {
    Job& job = AddRunning(id, worker);
    job.awaiting = {worker};
    job.adopted_at = clock_.Now();
    return job;
  }

  CoordinatorOptions options_;
  FakeClock clock_;
  Registry registry_;
  JobTable jobs_;
  FakeJobEvents events_;
  WorkerLifecycle workers_;
};

TEST_F(WorkerLifecycleTest, ARegisteredWorkerIsScheduled) {
  ASSERT_TRUE(workers_.Register(Info("w1"), nullptr).ok());
  EXPECT_EQ(events_.calls, (std::vector<std::string>{"schedule"}));
  EXPECT_EQ(registry_.IdleHealthyWorkers().size(), 1u);
}

// The job learns it lost the worker (recovery.h decides whether it goes
// on without it or restarts).
TEST_F(WorkerLifecycleTest, AWorkerThatLeavesIsLostToItsJob) {
  ASSERT_TRUE(workers_.Register(Info("w1"), nullptr).ok());
  AddRunning("j1", "w1");
  registry_.Assign("w1", "j1", 0, 0);
  events_.calls.clear();
  ASSERT_TRUE(workers_.Deregister("w1", "i-w1").ok());
  ASSERT_EQ(events_.calls.size(), 1u);
  EXPECT_EQ(events_.calls[0].rfind("lost j1 w1 worker w1 (stage 0, replica "
                                   "0) is LEFT",
                                   0),
            0u)
      << events_.calls[0];
}

TEST_F(WorkerLifecycleTest, HeartbeatsSayWhichJobsToStop) {
  ASSERT_TRUE(workers_.Register(Info("w1"), nullptr).ok());
  Job& job = AddRunning("j1", "w1");
  job.checkpoint_at = 40;
  registry_.Assign("w1", "j1", 0, 0);
  auto reply = workers_.Heartbeat("w1", "i-w1", "j1", 0);
  ASSERT_TRUE(reply.ok());
  EXPECT_TRUE(reply->stop_jobs.empty());
  EXPECT_EQ(reply->checkpoint_at, 40);
  // An attempt this coordinator never started; a job it does not know.
  EXPECT_EQ(workers_.Heartbeat("w1", "i-w1", "j1", 1)->stop_jobs,
            (std::vector<std::string>{"j1"}));
  EXPECT_EQ(workers_.Heartbeat("w1", "i-w1", "j9", 0)->stop_jobs,
            (std::vector<std::string>{"j9"}));
  job.state = v1::JOB_CANCELLED;
  EXPECT_EQ(workers_.Heartbeat("w1", "i-w1", "j1", 0)->stop_jobs,
            (std::vector<std::string>{"j1"}));
  EXPECT_FALSE(workers_.Heartbeat("w1", "other", "", 0).ok());
}

TEST_F(WorkerLifecycleTest, AWorkerBackWithItsStageIsAdopted) {
  Job& job = AddAwaiting("j1", "w1");
  v1::StageClaim claim;
  claim.set_job_id("j1");
  claim.set_attempt(0);
  ASSERT_TRUE(workers_.Register(Info("w1"), &claim).ok());
  EXPECT_TRUE(job.awaiting.empty());
  EXPECT_EQ(registry_.Get("w1")->job_id(), "j1");
  EXPECT_EQ(events_.calls, (std::vector<std::string>{"schedule"}));
}

TEST_F(WorkerLifecycleTest, AWorkerBackWithoutItsStageRestartsTheJob) {
  AddAwaiting("j1", "w1");
  v1::StageClaim claim;  // Of an attempt the job is not at.
  claim.set_job_id("j1");
  claim.set_attempt(3);
  ASSERT_TRUE(workers_.Register(Info("w1"), &claim).ok());
  EXPECT_EQ(registry_.Get("w1")->job_id(), "");
  EXPECT_EQ(events_.calls,
            (std::vector<std::string>{
                "restart j1 worker w1 (stage 0, replica 0) came back without "
                "its stage: its process was restarted while the coordinator "
                "was down",
                "schedule"}));
}

TEST_F(WorkerLifecycleTest, JobsWhoseWorkersDoNotComeBackRestartAfterTheGrace) {
  AddAwaiting("j1", "w1");
  AddAwaiting("j2", "w2");
  const absl::Duration limit =
      options_.adoption_grace + options_.registry.dead_after;
  clock_.Advance(limit - absl::Milliseconds(1));
  workers_.Tick(clock_.Now());
  EXPECT_TRUE(events_.calls.empty());
  clock_.Advance(absl::Milliseconds(1));
  workers_.Tick(clock_.Now());
  const std::string why = absl::StrFormat(
      " did not register again within %.1f s of the coordinator's restart",
      absl::ToDoubleSeconds(limit));
  EXPECT_EQ(events_.calls,
            (std::vector<std::string>{"restart j1 worker(s) w1" + why,
                                      "restart j2 worker(s) w2" + why}));
}

}  // namespace
}  // namespace aqueduct
