#include "coordinator/job_lifecycle.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/fake_job_events.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

// A worker that records the stops it is asked for (in `stops`).
class FakeWorker : public WorkerClient {
 public:
  FakeWorker(std::string address, absl::Mutex* mu,
             std::vector<std::string>* stops)
      : address_(std::move(address)), mu_(mu), stops_(stops) {}
  absl::Status AssignStage(const StageAssignment&, absl::Duration) override {
    return absl::OkStatus();
  }
  absl::Status StartJob(const std::string&, absl::Duration) override {
    return absl::OkStatus();
  }
  absl::Status StopJob(const std::string& job_id, const std::string&,
                       absl::Duration, std::optional<int>) override {
    absl::MutexLock lock(mu_);
    stops_->push_back(absl::StrCat("stop ", job_id, " on ", address_));
    return absl::OkStatus();
  }
  absl::StatusOr<WorkerRuntimeStatus> GetStatus(absl::Duration) override {
    return WorkerRuntimeStatus();
  }
  absl::StatusOr<ModelProfile> Profile(const JobSpec&,
                                       absl::Duration) override {
    return absl::UnimplementedError("no profiles here");
  }

 private:
  std::string address_;
  absl::Mutex* mu_;
  std::vector<std::string>* stops_;
};

class JobLifecycleTest : public ::testing::Test {
 protected:
  JobLifecycleTest()
      : registry_(options_.registry, &clock_),
        jobs_("tag", 1),
        journal_(&clock_, mu_, jobs_, events_),
        executor_(std::make_unique<BoundedExecutor>("lifecycle_test", 1, 100)),
        checkpoints_(
            options_, &clock_, mu_, jobs_, logs_, [] { return nullptr; },
            *executor_),
        workers_(options_, registry_, jobs_, events_),
        clients_([this](const std::string& address) {
          return std::make_unique<FakeWorker>(address, &stops_mu_, &stops_);
        }),
        recovery_(options_, &clock_, mu_, registry_, jobs_, store_, workers_,
                  events_, clients_, *executor_),
        lifecycle_(options_, &clock_, mu_, jobs_,
                   {store_, logs_, traces_, journal_, checkpoints_, recovery_,
                    *executor_},
                   events_) {}
  ~JobLifecycleTest() override { executor_.reset(); }

  // Job `id` in `state` at attempt 0, on worker `worker` (registered and
  // assigned to it) unless that is empty.
  Job& AddJob(const std::string& id, JobState state,
              const std::string& worker = "") {
    Job job;
    job.id = id;
    job.state = state;
    if (!worker.empty()) {
      WorkerInfo info;
      info.set_worker_id(worker);
      info.set_incarnation("i-" + worker);
      info.set_address(worker + ":1");
      std::vector<WorkerTransition> changes;
      EXPECT_TRUE(registry_.Register(info, &changes).ok());
      registry_.Assign(worker, id, 0, 0);
      job.reserved = {worker};
      job.stage_workers = {{worker}};
    }
    return jobs_.Add(std::move(job));
  }
  // The job's log, as "level text" lines.
  std::vector<std::string> Log(const std::string& id) {
    std::vector<std::string> out;
    for (const v1::LogLine& line : logs_.Read(id, 0, std::nullopt, 100)) {
      out.push_back(absl::StrCat(line.level(), " ", line.text()));
    }
    return out;
  }
  std::vector<std::string> Stops() {
    executor_.reset();  // Runs the stops queued.
    absl::MutexLock lock(&stops_mu_);
    return stops_;
  }

  CoordinatorOptions options_;
  FakeClock clock_;
  absl::Mutex mu_;
  Registry registry_;
  JobTable jobs_;
  KvStore store_;
  JobLogStore logs_;
  TraceStore traces_;
  FakeJobEvents events_;
  JournalKeeper journal_;
  std::unique_ptr<BoundedExecutor> executor_;
  CheckpointCommitter checkpoints_;
  WorkerLifecycle workers_;
  absl::Mutex stops_mu_;
  std::vector<std::string> stops_;
  WorkerClientFactory clients_;
  Recovery recovery_;
  JobLifecycle lifecycle_;
};

TEST_F(JobLifecycleTest, AnEventThatDoesNotApplyChangesNothing) {
  Job& job = AddJob("j1", v1::JOB_PENDING);
  absl::MutexLock lock(&mu_);
  EXPECT_FALSE(lifecycle_.TransitionLocked(job, JobEvent::kStarted, ""));
  EXPECT_EQ(job.state, v1::JOB_PENDING);
  EXPECT_EQ(job.version, 0);
  EXPECT_TRUE(Log("j1").empty());
  EXPECT_TRUE(events_.calls.empty());
}

TEST_F(JobLifecycleTest, RunningStartsTheJobsClocks) {
  Job& job = AddJob("j1", v1::JOB_PLANNING);
  clock_.Advance(absl::Seconds(30));
  absl::MutexLock lock(&mu_);
  ASSERT_TRUE(lifecycle_.TransitionLocked(job, JobEvent::kStarted, ""));
  EXPECT_EQ(job.state, v1::JOB_RUNNING);
  EXPECT_EQ(job.version, 1);
  EXPECT_EQ(job.started, clock_.WallNow());
  EXPECT_EQ(job.checkpoint_asked, clock_.Now());
  EXPECT_EQ(Log("j1"), std::vector<std::string>{"info job RUNNING"});
  EXPECT_TRUE(events_.calls.empty());  // Not an end: nothing scheduled.
}

TEST_F(JobLifecycleTest, AFailedJobEndsAndItsWorkersStop) {
  Job& job = AddJob("j1", v1::JOB_RUNNING, "w1");
  ASSERT_TRUE(store_.Set("jobs/j1/a0/addr", "x").ok());
  ASSERT_TRUE(store_.Set("jobs/j2/a0/addr", "y").ok());
  {
    absl::MutexLock lock(&mu_);
    ASSERT_TRUE(lifecycle_.TransitionLocked(job, JobEvent::kFailed, "boom"));
    EXPECT_EQ(job.state, v1::JOB_FAILED);
    EXPECT_EQ(job.reason, "boom");
    EXPECT_EQ(job.finished, clock_.WallNow());
    EXPECT_EQ(registry_.Get("w1")->job_id(), "");
    EXPECT_EQ(Log("j1"), std::vector<std::string>{"warn job FAILED: boom"});
  }
  EXPECT_EQ(store_.keys_of_job("j1"), 0u);
  EXPECT_EQ(store_.keys_of_job("j2"), 1u);
  EXPECT_EQ(events_.calls, std::vector<std::string>{"schedule"});
  EXPECT_EQ(Stops(), std::vector<std::string>{"stop j1 on w1:1"});
}

TEST_F(JobLifecycleTest, ASucceededJobFreesItsWorkersWithoutStops) {
  Job& job = AddJob("j1", v1::JOB_RUNNING, "w1");
  {
    absl::MutexLock lock(&mu_);
    ASSERT_TRUE(
        lifecycle_.TransitionLocked(job, JobEvent::kAllReplicasFinished, ""));
    EXPECT_EQ(job.state, v1::JOB_SUCCEEDED);
    EXPECT_EQ(registry_.Get("w1")->job_id(), "");
  }
  EXPECT_TRUE(Stops().empty());
}

TEST_F(JobLifecycleTest, FinishedJobsBeyondTheLimitAreTrimmedWithTheirLogs) {
  options_.max_finished_jobs = 1;
  AddJob("j1", v1::JOB_SUCCEEDED);
  logs_.AppendEvent("j1", 0, "info", "old");
  Job& j2 = AddJob("j2", v1::JOB_RUNNING);
  absl::MutexLock lock(&mu_);
  ASSERT_TRUE(lifecycle_.TransitionLocked(j2, JobEvent::kCancelled, "bye"));
  EXPECT_FALSE(jobs_.Contains("j1"));
  EXPECT_TRUE(jobs_.Contains("j2"));
  EXPECT_TRUE(Log("j1").empty());
}

}  // namespace
}  // namespace aqueduct
