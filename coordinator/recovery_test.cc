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
            "lost j1 w2 worker w2 (stage 1, replica 0) is DEAD: it does not "
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

// A running job of attempt 0: one stage of replicas w1..w4 (tensor degree
// `tensor`), in data_parallel `mode` with `consistency` and `shards`.
Job PlannedJob(const std::string& mode, const std::string& consistency,
               int shards, int stages = 1, int tensor = 1) {
  Job job;
  job.id = "j1";
  job.state = v1::JOB_RUNNING;
  job.spec.set_batch_size(32);
  job.ledger = JobLedger(32);
  v1::DataParallelSpec* d = job.spec.mutable_data_parallel();
  d->set_mode(mode);
  d->set_consistency(consistency);
  d->set_shards(shards);
  job.has_plan = true;
  for (int s = 0; s < stages; ++s) {
    v1::PlanStage* stage = job.plan.add_stages();
    stage->set_replicas(s == 0 ? 4 / tensor : 1);
    stage->set_tensor_parallel(tensor);
  }
  job.stage_workers = {{"w1", "w2", "w3", "w4"}};
  for (int s = 1; s < stages; ++s) job.stage_workers.push_back({"w5"});
  return job;
}

TEST(ToleratesLossTest, OnlyAnAsyncSingleStageReplicaThatHostsNoShard) {
  const Job async2 = PlannedJob("parameter_server", "async", 2);
  // Replicas 2 and 3 host no shard; 0 and 1 do.
  EXPECT_TRUE(ToleratesLoss(async2, "w3").tolerated);
  const LossTolerance four = ToleratesLoss(async2, "w4");
  EXPECT_TRUE(four.tolerated);
  EXPECT_EQ(four.stage, 0);
  EXPECT_EQ(four.replica, 3);
  EXPECT_EQ(ToleratesLoss(async2, "w1").why_not,
            "replica 0 hosts parameter shard 0 of 2");
  EXPECT_EQ(ToleratesLoss(async2, "w2").why_not,
            "replica 1 hosts parameter shard 1 of 2");
  EXPECT_EQ(ToleratesLoss(async2, "w9").why_not,
            "the worker runs no replica of the job");
  // Shards 0: one per replica, so every replica hosts one.
  EXPECT_FALSE(ToleratesLoss(PlannedJob("parameter_server", "async", 0), "w4")
                   .tolerated);
  // Every other mode and consistency restarts.
  for (const auto& [mode, consistency] :
       std::vector<std::pair<std::string, std::string>>{
           {"parameter_server", "sync"},
           {"parameter_server", "bounded"},
           {"parameter_server", ""},
           {"allreduce", "async"},
           {"", ""}}) {
    EXPECT_EQ(ToleratesLoss(PlannedJob(mode, consistency, 2), "w4").why_not,
              "the job is not under the \"async\" parameter server")
        << mode << " " << consistency;
  }
  // A pipeline: the next stage waits on every replica.
  EXPECT_EQ(ToleratesLoss(PlannedJob("parameter_server", "async", 2, 2), "w4")
                .why_not,
            "the job is not one stage (other stages wait on a replica)");
  EXPECT_EQ(
      ToleratesLoss(PlannedJob("parameter_server", "async", 1, 1, 2), "w4")
          .why_not,
      "the stage is tensor-parallel");
  Job pending = async2;
  pending.state = v1::JOB_PENDING;
  EXPECT_EQ(ToleratesLoss(pending, "w4").why_not, "the job is not RUNNING");
  Job lost = async2;
  lost.tolerated_losses.emplace_back().set_worker_id("w4");
  EXPECT_EQ(ToleratesLoss(lost, "w4").why_not, "the worker is lost already");
}

class ToleratedLossTest : public RecoveryTest {
 protected:
  // PlannedJob("parameter_server", "async", 2) on registered w1..w4.
  Job& AddAsync() {
    for (const std::string id : {"w1", "w2", "w3", "w4"}) {
      WorkerInfo info;
      info.set_worker_id(id);
      info.set_incarnation("i-" + id);
      info.set_address(id + ":1");
      std::vector<WorkerTransition> changes;
      EXPECT_TRUE(registry_.Register(info, &changes).ok());
    }
    Job job = PlannedJob("parameter_server", "async", 2);
    job.reserved = {"w1", "w2", "w3", "w4"};
    for (int r = 0; r < 4; ++r) {
      registry_.Assign(job.stage_workers[0][r], "j1", 0, r);
    }
    return jobs_.Add(std::move(job));
  }
};

TEST_F(ToleratedLossTest, TheJobGoesOnWithoutAReplicaThatHostsNoShard) {
  Job& job = AddAsync();
  // Replica 3's share (8 samples) of minibatch 5 never comes.
  v1::StageProgress p;
  p.set_stage(0);
  for (int r = 0; r < 3; ++r) {
    p.set_replica(r);
    p.clear_losses();
    v1::LossPoint* point = p.add_losses();
    point->set_minibatch(5);
    point->set_loss(1.0 + r);
    point->set_samples(8);
    job.ledger.Apply(job.stage_workers[0][r], p, clock_.Now());
  }
  EXPECT_EQ(job.ledger.latest_loss().minibatch(), -1);
  {
    absl::MutexLock lock(&mu_);
    registry_.MarkDead("w4", "gone");
    EXPECT_TRUE(recovery_.TolerateLossLocked(job, "w4", "w4 is DEAD"));
    EXPECT_FALSE(recovery_.TolerateLossLocked(job, "w4", "again"));
    EXPECT_FALSE(recovery_.TolerateLossLocked(job, "w1", "a shard host"));
  }
  EXPECT_EQ(job.state, v1::JOB_RUNNING);
  EXPECT_EQ(job.attempt, 0);
  EXPECT_TRUE(job.restarts.empty());
  ASSERT_EQ(job.tolerated_losses.size(), 1u);
  EXPECT_EQ(job.tolerated_losses[0].worker_id(), "w4");
  EXPECT_EQ(job.tolerated_losses[0].replica(), 3);
  EXPECT_EQ(job.tolerated_losses[0].reason(), "w4 is DEAD");
  EXPECT_EQ(job.reserved, (std::vector<std::string>{"w1", "w2", "w3"}));
  EXPECT_EQ(registry_.Get("w4")->job_id(), "");
  EXPECT_EQ(registry_.Get("w1")->job_id(), "j1");
  // The minibatch is whole without the lost share: the mean of 3 shares.
  EXPECT_EQ(job.ledger.latest_loss().minibatch(), 5);
  EXPECT_DOUBLE_EQ(job.ledger.latest_loss().loss(), 2.0);
  EXPECT_EQ(job.ledger.latest_loss().samples(), 24);
  EXPECT_TRUE(events_.calls.empty());
  // A dead worker is not asked to stop; the status shows the loss.
  EXPECT_TRUE(Stops().empty());
  const JobStatus status = events_.StatusOf(job);
  ASSERT_EQ(status.tolerated_losses_size(), 1);
  EXPECT_EQ(status.tolerated_losses(0).worker_id(), "w4");
}

TEST_F(ToleratedLossTest, AReplicaWhoseStageFailedIsStoppedAndTheJobEnds) {
  Job& job = AddAsync();
  // The three others have finished.
  for (int r = 0; r < 3; ++r) {
    v1::StageProgress p;
    p.set_stage(0);
    p.set_replica(r);
    p.set_finished(true);
    job.ledger.MarkFinished(p, true);
  }
  {
    absl::MutexLock lock(&mu_);
    EXPECT_TRUE(recovery_.TolerateLossLocked(job, "w3", "stage failed"));
  }
  EXPECT_EQ(job.state, v1::JOB_SUCCEEDED);
  EXPECT_EQ(events_.calls,
            (std::vector<std::string>{"transition j1 SUCCEEDED"}));
  EXPECT_EQ(Stops(), (std::vector<std::string>{"stop j1 on w3:1 attempt 0"}));
}

// A shard host's loss is not tolerated: the caller restarts as before.
TEST_F(ToleratedLossTest, AShardHostsLossRestartsTheJob) {
  Job& job = AddAsync();
  {
    absl::MutexLock lock(&mu_);
    EXPECT_FALSE(recovery_.TolerateLossLocked(job, "w2", "w2 is DEAD"));
  }
  EXPECT_TRUE(job.tolerated_losses.empty());
  EXPECT_EQ(registry_.Get("w2")->job_id(), "j1");
  EXPECT_EQ(job.reserved.size(), 4u);
}

}  // namespace
}  // namespace aqueduct
