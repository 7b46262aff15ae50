#include "coordinator/scheduler.h"

#include <string>
#include <vector>

#include "coordinator/fake_job_events.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

class SchedulerTest : public ::testing::Test {
 protected:
  SchedulerTest()
      : registry_(options_.registry, &clock_),
        jobs_("tag", 1),
        scheduler_(options_, &clock_, registry_, jobs_, events_) {}

  void AddWorker(const std::string& id) {
    WorkerInfo info;
    info.set_worker_id(id);
    info.set_incarnation("i1");
    info.set_address("127.0.0.1:1");
    std::vector<WorkerTransition> changes;
    ASSERT_TRUE(registry_.Register(info, &changes).ok());
  }
  Job& AddJob(const std::string& id, int workers, int64_t wait_ms = 0) {
    Job job;
    job.id = id;
    job.workers_needed = workers;
    job.pending_since = clock_.Now();
    job.spec.mutable_pipeline()->set_wait_for_workers_ms(wait_ms);
    return jobs_.Add(std::move(job));
  }

  CoordinatorOptions options_;
  FakeClock clock_;
  Registry registry_;
  JobTable jobs_;
  FakeJobEvents events_;
  Scheduler scheduler_;
};

TEST_F(SchedulerTest, StartsAJobWhenItsWorkersAreIdle) {
  AddWorker("w1");
  AddWorker("w2");
  Job& job = AddJob("j1", 2);
  scheduler_.Schedule();
  EXPECT_EQ(job.state, v1::JOB_PLANNING);
  EXPECT_EQ(job.reserved.size(), 2u);
  EXPECT_EQ(events_.calls,
            (std::vector<std::string>{"transition j1 PLANNING", "drive j1"}));
  EXPECT_EQ(registry_.Get("w1")->job_id(), "j1");
  EXPECT_TRUE(registry_.IdleHealthyWorkers().empty());
}

TEST_F(SchedulerTest, ANewJobWaitsForAllItsWorkers) {
  AddWorker("w1");
  Job& job = AddJob("j1", 2);
  scheduler_.Schedule();
  EXPECT_EQ(job.state, v1::JOB_PENDING);
  EXPECT_TRUE(events_.calls.empty());
}

TEST_F(SchedulerTest, ARestartedJobGoesOnWithFewer) {
  AddWorker("w1");
  Job& job = AddJob("j1", 2);
  job.attempt = 1;
  scheduler_.Schedule();
  EXPECT_EQ(job.state, v1::JOB_PLANNING);
  EXPECT_EQ(job.reserved, (std::vector<std::string>{"w1"}));
}

TEST_F(SchedulerTest, SparesComeBeforeUnreachablePeers) {
  AddWorker("w1");
  AddWorker("w2");
  Job& job = AddJob("j1", 1);
  job.unreachable_peers.insert(registry_.IdleHealthyWorkers()[0]);
  const std::string spare = registry_.IdleHealthyWorkers()[1];
  scheduler_.Schedule();
  EXPECT_EQ(job.reserved, (std::vector<std::string>{spare}));
}

TEST_F(SchedulerTest, AJobTheDriverCannotTakeFails) {
  AddWorker("w1");
  Job& job = AddJob("j1", 1);
  events_.drive_status = absl::ResourceExhaustedError("the queue is full");
  scheduler_.Schedule();
  EXPECT_EQ(job.state, v1::JOB_FAILED);
  EXPECT_EQ(events_.calls.back(), "transition j1 FAILED the queue is full");
}

TEST_F(SchedulerTest, NothingStartsWhileShuttingDown) {
  AddWorker("w1");
  Job& job = AddJob("j1", 1);
  events_.shutting_down = true;
  scheduler_.Schedule();
  EXPECT_EQ(job.state, v1::JOB_PENDING);
  EXPECT_TRUE(events_.calls.empty());
}

TEST_F(SchedulerTest, PendingJobsFailWhenTheirWaitIsOver) {
  Job& job = AddJob("j1", 1, /*wait_ms=*/2000);
  clock_.Advance(absl::Milliseconds(1999));
  scheduler_.ExpirePending(clock_.Now());
  EXPECT_EQ(job.state, v1::JOB_PENDING);
  clock_.Advance(absl::Milliseconds(1));
  scheduler_.ExpirePending(clock_.Now());
  EXPECT_EQ(job.state, v1::JOB_FAILED);
  EXPECT_EQ(job.reason,
            "timed out after 2.0 s waiting for 1 healthy idle worker(s) (0 "
            "available)");
}

TEST_F(SchedulerTest, TheWaitIsCappedByTheOptions) {
  options_.max_wait_for_workers = absl::Seconds(5);
  Job& job = AddJob("j1", 1, /*wait_ms=*/60000);
  EXPECT_EQ(scheduler_.WaitForWorkers(job), absl::Seconds(5));
  options_.default_wait_for_workers = absl::Seconds(3);
  job.spec.mutable_pipeline()->set_wait_for_workers_ms(0);
  EXPECT_EQ(scheduler_.WaitForWorkers(job), absl::Seconds(3));
}

}  // namespace
}  // namespace aqueduct
