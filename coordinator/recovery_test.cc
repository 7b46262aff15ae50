#include "coordinator/recovery.h"

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "coordinator/fake_job_events.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

// What the fake workers were asked, and which of them do not answer.
struct Asked {
  absl::Mutex mu;
  std::vector<std::string> stops ABSL_GUARDED_BY(mu);
  std::set<std::string> gone ABSL_GUARDED_BY(mu);
};

class FakeWorker : public WorkerClient {
 public:
  FakeWorker(std::string address, Asked* asked)
      : address_(std::move(address)), asked_(asked) {}
  absl::Status AssignStage(const StageAssignment&, absl::Duration) override {
    return absl::OkStatus();
  }
  absl::Status StartJob(const std::string&, absl::Duration) override {
    return absl::OkStatus();
  }
  absl::Status StopJob(const std::string& job_id, const std::string&,
                       absl::Duration, std::optional<int> attempt) override {
    absl::MutexLock lock(&asked_->mu);
    asked_->stops.push_back(
        absl::StrCat("stop ", job_id, " on ", address_, " attempt ",
                     attempt.has_value() ? absl::StrCat(*attempt) : "all"));
    return absl::OkStatus();
  }
  absl::StatusOr<WorkerRuntimeStatus> GetStatus(absl::Duration) override {
    absl::MutexLock lock(&asked_->mu);
    if (asked_->gone.count(address_) > 0) {
      return absl::UnavailableError("failed to connect: Connection refused");
    }
    return WorkerRuntimeStatus();
  }
  absl::StatusOr<ModelProfile> Profile(const JobSpec&,
                                       absl::Duration) override {
    return absl::UnimplementedError("no profiles here");
  }

 private:
  std::string address_;
  Asked* asked_;
};

class RecoveryTest : public ::testing::Test {
 protected:
  RecoveryTest()
      : registry_(options_.registry, &clock_),
        jobs_("tag", 1),
        workers_(options_, registry_, jobs_, events_),
        clients_([this](const std::string& address) {
          return std::make_unique<FakeWorker>(address, &asked_);
        }),
        executor_(std::make_unique<BoundedExecutor>("recovery_test", 1, 100)),
        recovery_(options_, &clock_, mu_, registry_, jobs_, store_, workers_,
                  events_, clients_, *executor_) {}
  ~RecoveryTest() override { executor_.reset(); }

  // A running job of attempt 0 on w1 (stage 0) and w2 (stage 1).
  Job& AddRunning(int max_restarts) {
    for (const std::string id : {"w1", "w2"}) {
      WorkerInfo info;
      info.set_worker_id(id);
      info.set_incarnation("i-" + id);
      info.set_address(id + ":1");
      std::vector<WorkerTransition> changes;
      EXPECT_TRUE(registry_.Register(info, &changes).ok());
    }
    Job job;
    job.id = "j1";
    job.state = v1::JOB_RUNNING;
    job.max_restarts = max_restarts;
    job.reserved = {"w1", "w2"};
    job.stage_workers = {{"w1"}, {"w2"}};
    registry_.Assign("w1", "j1", 0, 0);
    registry_.Assign("w2", "j1", 1, 0);
    return jobs_.Add(std::move(job));
  }
  // Runs what the executor holds, and joins it.
  std::vector<std::string> Stops() {
    executor_.reset();
    absl::MutexLock lock(&asked_.mu);
    return asked_.stops;
  }

  CoordinatorOptions options_;
  FakeClock clock_;
  absl::Mutex mu_;
  Registry registry_;
  JobTable jobs_;
  KvStore store_;
  FakeJobEvents events_;
  WorkerLifecycle workers_;
  Asked asked_;
  WorkerClientFactory clients_;
  std::unique_ptr<BoundedExecutor> executor_;
  Recovery recovery_;
};

TEST_F(RecoveryTest, ARestartStopsAndFreesTheAttemptsWorkers) {
  Job& job = AddRunning(1);
  ASSERT_TRUE(store_.Set("jobs/j1/a0/addr", "x").ok());
  {
    absl::MutexLock lock(&mu_);
    recovery_.RestartOrFailLocked(job, "boom");
  }
  EXPECT_EQ(job.state, v1::JOB_PENDING);
  EXPECT_EQ(job.attempt, 1);
  ASSERT_EQ(job.restarts.size(), 1u);
  EXPECT_EQ(job.restarts[0].reason(), "boom");
  EXPECT_TRUE(job.reserved.empty());
  EXPECT_EQ(registry_.Get("w1")->job_id(), "");
  EXPECT_EQ(registry_.IdleHealthyWorkers().size(), 2u);
  EXPECT_EQ(events_.calls, (std::vector<std::string>{
                               "transition j1 PENDING boom", "schedule"}));
  EXPECT_FALSE(store_.Get("jobs/j1/a0/addr", clock_.Now()).ok());
  EXPECT_EQ(Stops(), (std::vector<std::string>{"stop j1 on w1:1 attempt 0",
                                               "stop j1 on w2:1 attempt 0"}));
}

TEST_F(RecoveryTest, AJobWithNoRestartsLeftFails) {
  Job& job = AddRunning(0);
  {
    absl::MutexLock lock(&mu_);
    recovery_.RestartOrFailLocked(job, "boom");
  }
  EXPECT_EQ(job.state, v1::JOB_FAILED);
  EXPECT_EQ(events_.calls,
            (std::vector<std::string>{"transition j1 FAILED boom"}));
}

TEST_F(RecoveryTest, AProbeDeclaresTheWorkerThatDoesNotAnswerDead) {
  Job& job = AddRunning(1);
  {
    absl::MutexLock lock(&asked_.mu);
    asked_.gone.insert("w2:1");
  }
  {
    absl::MutexLock lock(&mu_);
    recovery_.ProbeLocked(job, "stage 0 lost its peer");
    recovery_.ProbeLocked(job, "again");  // Once per attempt.
  }
  Stops();  // The probe has run.
  EXPECT_EQ(registry_.Get("w2")->state(), v1::WORKER_DEAD);
  ASSERT_FALSE(events_.calls.empty());
  EXPECT_EQ(events_.calls[0],
            "restart j1 worker w2 (stage 1, replica 0) is DEAD: it does not "
            "answer (connection refused)");
}

TEST_F(RecoveryTest, AnEndedJobsWorkersAreFreedAndStopped) {
  Job& job = AddRunning(1);
  job.state = v1::JOB_CANCELLED;
  {
    absl::MutexLock lock(&mu_);
    recovery_.ReleaseWorkersLocked(job, /*stop=*/true, "cancelled");
  }
  EXPECT_EQ(registry_.IdleHealthyWorkers().size(), 2u);
  EXPECT_EQ(Stops(), (std::vector<std::string>{"stop j1 on w1:1 attempt all",
                                               "stop j1 on w2:1 attempt all"}));
}

}  // namespace
}  // namespace aqueduct
