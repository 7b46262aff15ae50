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
  Job& AddJob(const std::string& id, int workers, int64_t wait_ms = 0,
              int priority = 0) {
    Job job;
    job.id = id;
    job.seq = ++seq_;
    job.workers_needed = workers;
    job.pending_since = clock_.Now();
    job.spec.mutable_pipeline()->set_wait_for_workers_ms(wait_ms);
    job.spec.set_priority(priority);
    return jobs_.Add(std::move(job));
  }
  int64_t seq_ = 0;

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

// No deadline by default: a job waits for busy workers however long.
TEST_F(SchedulerTest, AJobWaitsForBusyWorkersWithoutADeadline) {
  AddWorker("w1");
  Job& first = AddJob("j1", 1);
  scheduler_.Schedule();
  ASSERT_EQ(first.state, v1::JOB_PLANNING);
  Job& second = AddJob("j2", 1);
  clock_.Advance(absl::Hours(30));
  scheduler_.ExpirePending(clock_.Now());
  scheduler_.Schedule();
  EXPECT_EQ(second.state, v1::JOB_PENDING);
  const auto order = scheduler_.QueueOrder();
  const Scheduler::Standing s = scheduler_.StandingOf(second, order);
  EXPECT_EQ(s.position, 1);
  EXPECT_EQ(s.waiting_for, "needs 1 worker, 0 idle");
}

// Higher priority first, first come first served within one; a waiting
// job of higher priority holds its workers from lower ones at once.
TEST_F(SchedulerTest, PrioritiesOrderTheQueue) {
  AddWorker("w1");
  AddWorker("w2");
  Job& low = AddJob("low", 1, 0, -5);
  Job& big = AddJob("big", 2, 0, 10);
  Job& mid = AddJob("mid", 1, 0, 0);
  Job& mid2 = AddJob("mid2", 1, 0, 0);
  const auto order = scheduler_.QueueOrder();
  ASSERT_EQ(order.size(), 4u);
  EXPECT_EQ(order[0]->id, "big");
  EXPECT_EQ(order[1]->id, "mid");
  EXPECT_EQ(order[2]->id, "mid2");
  EXPECT_EQ(order[3]->id, "low");
  EXPECT_EQ(scheduler_.StandingOf(low, order).waiting_for,
            "needs 1 worker, 2 idle; 3 jobs ahead");
  scheduler_.Schedule();
  EXPECT_EQ(big.state, v1::JOB_PLANNING);
  EXPECT_EQ(mid.state, v1::JOB_PENDING);
  EXPECT_EQ(mid2.state, v1::JOB_PENDING);
  EXPECT_EQ(low.state, v1::JOB_PENDING);
}

TEST_F(SchedulerTest, AHigherPriorityJobHoldsItsWorkersFromLowerOnes) {
  AddWorker("w1");
  AddWorker("w2");
  AddWorker("w3");
  Job& busy = AddJob("busy", 2);
  scheduler_.Schedule();
  ASSERT_EQ(busy.state, v1::JOB_PLANNING);
  // 1 idle: the 2-worker job of priority 5 waits and holds it from the
  // 1-worker job of priority 0 (which would start under mere backfill).
  Job& urgent = AddJob("urgent", 2, 0, 5);
  Job& small = AddJob("small", 1);
  scheduler_.Schedule();
  EXPECT_EQ(urgent.state, v1::JOB_PENDING);
  EXPECT_EQ(small.state, v1::JOB_PENDING);
}

// A new job that needs more workers than are registered fails once the
// registry has had time to fill (the cluster shrank below it); one that
// asked to wait for workers waits; before then nothing fails.
TEST_F(SchedulerTest, AJobTheRegisteredWorkersCannotRunFails) {
  AddWorker("w1");
  Job& two = AddJob("two", 2);
  Job& patient = AddJob("patient", 2, /*wait_ms=*/3600000);
  scheduler_.ExpirePending(clock_.Now());
  EXPECT_EQ(two.state, v1::JOB_PENDING);
  EXPECT_FALSE(scheduler_.Settled(clock_.Now()));
  clock_.Advance(options_.registry.dead_after + options_.adoption_grace);
  EXPECT_TRUE(scheduler_.Settled(clock_.Now()));
  scheduler_.ExpirePending(clock_.Now());
  EXPECT_EQ(two.state, v1::JOB_FAILED);
  EXPECT_EQ(two.reason,
            "the registered workers shrank below the job: it needs 2 and 1 "
            "is registered");
  EXPECT_EQ(patient.state, v1::JOB_PENDING);
  EXPECT_EQ(scheduler_.StandingOf(patient, scheduler_.QueueOrder()).waiting_for,
            "needs 2 workers, 1 idle, 1 registered; fails in 3585 s");
}

TEST_F(SchedulerTest, TheWaitIsCappedByTheOptions) {
  options_.max_wait_for_workers = absl::Seconds(5);
  Job& job = AddJob("j1", 1, /*wait_ms=*/60000);
  EXPECT_EQ(scheduler_.WaitForWorkers(job), absl::Seconds(5));
  options_.default_wait_for_workers = absl::Seconds(3);
  job.spec.mutable_pipeline()->set_wait_for_workers_ms(0);
  EXPECT_EQ(scheduler_.WaitForWorkers(job), absl::Seconds(3));
  options_.default_wait_for_workers = absl::InfiniteDuration();
  EXPECT_EQ(scheduler_.WaitForWorkers(job), absl::InfiniteDuration());
}

}  // namespace
}  // namespace aqueduct
