// The worker agent against a fake coordinator and a fake clock: the test
// drives the agent's loop step by step with RunOnce(), so backoff and
// heartbeat schedules are checked exactly and nothing waits in real time
// (except the one test of the agent's own thread).
#include "worker/agent.h"

#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/fake_coordinator_client.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

using Rpc = FakeCoordinatorClient::Rpc;

// A stage runtime that hands out the progress the test queues and records
// the stops it is asked for.
class FakeRuntime final : public AgentRuntime {
 public:
  void AddProgress(const std::string& job, int64_t done) {
    absl::MutexLock lock(&mu_);
    StageProgress p;
    p.set_job_id(job);
    p.set_minibatches_done(done);
    queued_.push_back(p);
  }
  void AddFinished(const std::string& job, int64_t done) {
    absl::MutexLock lock(&mu_);
    StageProgress p;
    p.set_job_id(job);
    p.set_minibatches_done(done);
    p.set_committed_version(done);
    p.set_finished(true);
    p.set_test_accuracy(0.5);
    p.add_losses()->set_loss(1);
    queued_.push_back(p);
  }
  void set_job(const std::string& job) {
    absl::MutexLock lock(&mu_);
    job_ = job;
  }
  std::vector<std::string> stopped() const {
    absl::MutexLock lock(&mu_);
    return stopped_;
  }
  void set_claim(std::optional<v1::StageClaim> claim) {
    absl::MutexLock lock(&mu_);
    claim_ = std::move(claim);
  }
  std::optional<v1::StageClaim> Claim() const override {
    absl::MutexLock lock(&mu_);
    return claim_;
  }

  std::vector<StageProgress> TakeProgress() override {
    absl::MutexLock lock(&mu_);
    return std::move(queued_);
  }
  std::string current_job() const override {
    absl::MutexLock lock(&mu_);
    return job_;
  }
  absl::Status Stop(const std::string& job_id, const std::string&) override {
    absl::MutexLock lock(&mu_);
    stopped_.push_back(job_id);
    if (job_ == job_id) job_.clear();
    return absl::OkStatus();
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<StageProgress> queued_ ABSL_GUARDED_BY(mu_);
  std::string job_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> stopped_ ABSL_GUARDED_BY(mu_);
  std::optional<v1::StageClaim> claim_ ABSL_GUARDED_BY(mu_);
};

// minibatches_done of each report the coordinator accepted, in order.
std::vector<int64_t> Delivered(const FakeCoordinatorClient& client) {
  std::vector<int64_t> out;
  for (const StageProgress& p : client.progress()) {
    out.push_back(p.minibatches_done());
  }
  return out;
}

class AgentTest : public ::testing::Test {
 protected:
  AgentTest() {
    options_.info.set_worker_id("w");
    options_.info.set_address("127.0.0.1:1");
    options_.initial_backoff = absl::Milliseconds(100);
    options_.max_backoff = absl::Milliseconds(1000);
    options_.progress_interval = absl::Milliseconds(250);
    options_.seed = 42;
    client_.set_heartbeat_interval(absl::Seconds(1));
  }

  WorkerAgent& agent() {
    if (agent_ == nullptr) {
      agent_ =
          std::make_unique<WorkerAgent>(options_, &runtime_, &client_, &clock_);
    }
    return *agent_;
  }

  // Moves the clock to `t` (if it is ahead) and runs one step.
  absl::Time StepAt(absl::Time t) {
    if (t > clock_.Now()) clock_.Advance(t - clock_.Now());
    return agent().RunOnce();
  }

  // Registers (the fake accepts) and returns the next step's time.
  absl::Time Register() {
    const absl::Time next = agent().RunOnce();
    EXPECT_TRUE(agent().registered());
    return next;
  }

  AgentOptions options_;
  FakeClock clock_;
  FakeCoordinatorClient client_;
  FakeRuntime runtime_;
  std::unique_ptr<WorkerAgent> agent_;
};

TEST_F(AgentTest, RegistersAfterUnavailableWithGrowingJitteredBackoff) {
  client_.FailNext(Rpc::kRegisterWorker,
                   absl::UnavailableError("connection refused"), 5);
  absl::Duration step = options_.initial_backoff;
  for (int attempt = 1; attempt <= 5; ++attempt) {
    const absl::Time next = agent().RunOnce();
    EXPECT_EQ(client_.calls(Rpc::kRegisterWorker), attempt);
    EXPECT_FALSE(agent().registered());
    const absl::Duration wait = next - clock_.Now();
    EXPECT_GE(wait, step / 2) << "attempt " << attempt;
    EXPECT_LE(wait, step) << "attempt " << attempt;
    // Not before the backoff has passed.
    clock_.Advance(wait / 2);
    EXPECT_EQ(agent().RunOnce(), next);
    EXPECT_EQ(client_.calls(Rpc::kRegisterWorker), attempt);
    clock_.Advance(next - clock_.Now());
    step = std::min(step * 2, options_.max_backoff);
  }
  agent().RunOnce();
  EXPECT_TRUE(agent().registered());
  ASSERT_EQ(client_.registrations().size(), 1u);
  EXPECT_EQ(client_.registrations()[0].incarnation(),
            agent().info().incarnation());
  EXPECT_EQ(client_.last_timeout(), options_.rpc_timeout);
}

TEST_F(AgentTest, BackoffIsCappedAndResetAfterRegistering) {
  client_.FailNext(Rpc::kRegisterWorker, absl::UnavailableError("down"), 10);
  absl::Time next = agent().RunOnce();
  for (int attempt = 2; attempt <= 10; ++attempt) {
    const absl::Time before = clock_.Now();
    next = StepAt(next);
    EXPECT_LE(next - clock_.Now(), options_.max_backoff);
    EXPECT_GT(clock_.Now(), before);
  }
  next = StepAt(next);
  ASSERT_TRUE(agent().registered());
  // The coordinator restarts and is down: the backoff starts small again.
  client_.Forget();
  client_.FailNext(Rpc::kRegisterWorker, absl::UnavailableError("down"), 1);
  next = StepAt(clock_.Now() + absl::Seconds(1));  // NOT_FOUND heartbeat.
  EXPECT_FALSE(agent().registered());
  next = StepAt(next);  // Refused registration.
  EXPECT_LE(next - clock_.Now(), options_.initial_backoff);
  StepAt(next);
  EXPECT_TRUE(agent().registered());
}

TEST_F(AgentTest, HeartbeatsOnTheCoordinatorsInterval) {
  client_.set_heartbeat_interval(absl::Milliseconds(400));
  const absl::Time start = clock_.Now();
  absl::Time next = Register();
  // Registered (and reported) at 0; then progress every 250 ms and
  // heartbeats at 400 and 800.
  std::vector<absl::Duration> steps;
  while (next <= start + absl::Milliseconds(800)) {
    steps.push_back(next - start);
    next = StepAt(next);
  }
  EXPECT_EQ(steps, (std::vector<absl::Duration>{
                       absl::Milliseconds(250), absl::Milliseconds(400),
                       absl::Milliseconds(500), absl::Milliseconds(750),
                       absl::Milliseconds(800)}));
  EXPECT_EQ(client_.calls(Rpc::kHeartbeat), 2);
}

TEST_F(AgentTest, TooShortHeartbeatIntervalIsRaised) {
  client_.set_heartbeat_interval(absl::Milliseconds(1));
  options_.progress_interval = absl::Seconds(10);
  const absl::Time next = Register();
  EXPECT_EQ(next - clock_.Now(), options_.min_heartbeat_interval);
}

TEST_F(AgentTest, FencedHeartbeatStopsTheJobAndRegistersANewIncarnation) {
  absl::Time next = Register();
  const std::string first = agent().info().incarnation();
  runtime_.set_job("job-1");
  client_.Fence("w");  // A newer incarnation, or the lease expired.
  next = StepAt(clock_.Now() + absl::Seconds(1));
  EXPECT_EQ(client_.calls(Rpc::kHeartbeat), 1);
  EXPECT_FALSE(agent().registered());
  EXPECT_EQ(runtime_.stopped(), std::vector<std::string>{"job-1"});
  EXPECT_NE(agent().info().incarnation(), first);
  // It registers again at once, under the new incarnation.
  EXPECT_EQ(next, clock_.Now());
  StepAt(next);
  EXPECT_TRUE(agent().registered());
  ASSERT_EQ(client_.registrations().size(), 2u);
  EXPECT_EQ(client_.registrations()[1].incarnation(),
            agent().info().incarnation());
  EXPECT_EQ(client_.incarnation("w"), agent().info().incarnation());
}

TEST_F(AgentTest, FinalIncarnationRefusedOnRegistrationTakesANewOne) {
  client_.FailNext(Rpc::kRegisterWorker,
                   absl::FailedPreconditionError("incarnation is DEAD"));
  runtime_.set_job("job-1");
  const std::string first = agent().info().incarnation();
  const absl::Time next = agent().RunOnce();
  EXPECT_FALSE(agent().registered());
  EXPECT_NE(agent().info().incarnation(), first);
  EXPECT_EQ(runtime_.stopped(), std::vector<std::string>{"job-1"});
  StepAt(next);
  EXPECT_TRUE(agent().registered());
}

TEST_F(AgentTest, CoordinatorRestartReRegistersTheSameIncarnation) {
  Register();
  const std::string incarnation = agent().info().incarnation();
  runtime_.set_job("job-1");
  client_.Forget();
  const absl::Time next = StepAt(clock_.Now() + absl::Seconds(1));
  EXPECT_FALSE(agent().registered());
  StepAt(next);
  EXPECT_TRUE(agent().registered());
  ASSERT_EQ(client_.registrations().size(), 2u);
  EXPECT_EQ(client_.registrations()[1].incarnation(), incarnation);
  // The coordinator, not the agent, decides what happens to the job.
  EXPECT_TRUE(runtime_.stopped().empty());
}

TEST_F(AgentTest, StopsTheJobsTheHeartbeatNames) {
  Register();
  runtime_.set_job("job-7");
  client_.StopJobsOnNextHeartbeat({"job-7"});
  StepAt(clock_.Now() + absl::Seconds(1));
  EXPECT_EQ(runtime_.stopped(), std::vector<std::string>{"job-7"});
  EXPECT_TRUE(agent().registered());
}

TEST_F(AgentTest, UnreachableCoordinatorKeepsRegistrationAndHeartbeats) {
  absl::Time next = Register();
  client_.set_unavailable(true);
  for (int i = 0; i < 20; ++i) next = StepAt(next);  // 5 s of outage.
  EXPECT_TRUE(agent().registered());
  EXPECT_GE(client_.calls(Rpc::kHeartbeat), 4);
  client_.set_unavailable(false);
  const int before = client_.calls(Rpc::kHeartbeat);
  StepAt(clock_.Now() + absl::Seconds(1));
  EXPECT_EQ(client_.calls(Rpc::kHeartbeat), before + 1);
  EXPECT_EQ(client_.registrations().size(), 1u);
}

TEST_F(AgentTest, ProgressKeptWhileCoordinatorIsDownThenDeliveredInOrder) {
  absl::Time next = Register();
  runtime_.AddProgress("job-1", 1);
  next = StepAt(next);
  EXPECT_EQ(Delivered(client_), std::vector<int64_t>{1});
  client_.set_unavailable(true);
  for (int64_t done = 2; done <= 4; ++done) {
    runtime_.AddProgress("job-1", done);
    next = StepAt(next);
  }
  EXPECT_EQ(Delivered(client_), std::vector<int64_t>{1});
  client_.set_unavailable(false);
  runtime_.AddProgress("job-1", 5);
  const int requests = client_.progress_requests();
  StepAt(clock_.Now() + options_.progress_interval);
  EXPECT_EQ(Delivered(client_), (std::vector<int64_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(client_.progress_requests(), requests + 1);  // One batch.
}

TEST_F(AgentTest, DeadlineExceededProgressIsKeptToo) {
  absl::Time next = Register();
  client_.FailNext(Rpc::kReportProgress,
                   absl::DeadlineExceededError("slow coordinator"));
  runtime_.AddProgress("job-1", 1);
  next = StepAt(next);
  EXPECT_TRUE(Delivered(client_).empty());
  runtime_.AddProgress("job-1", 2);
  StepAt(clock_.Now() + options_.progress_interval);
  EXPECT_EQ(Delivered(client_), (std::vector<int64_t>{1, 2}));
}

TEST_F(AgentTest, BatchesAreSplitAtMaxReportBytes) {
  options_.max_report_bytes = 1;  // One report per call.
  absl::Time next = Register();
  client_.set_unavailable(true);
  for (int64_t done = 1; done <= 3; ++done) {
    runtime_.AddProgress("job-1", done);
    next = StepAt(next);
  }
  client_.set_unavailable(false);
  StepAt(clock_.Now() + options_.progress_interval);
  EXPECT_EQ(Delivered(client_), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(client_.progress_requests(), 3);
}

TEST_F(AgentTest, UnsentProgressIsBoundedDroppingTheOldest) {
  StageProgress sample;
  sample.set_job_id("job-1");
  sample.set_minibatches_done(10);
  // Room for two reports, not three.
  options_.max_unsent_progress_bytes =
      2 * static_cast<int64_t>(sample.ByteSizeLong()) + 1;
  absl::Time next = Register();
  client_.set_unavailable(true);
  for (int64_t done = 10; done <= 13; ++done) {
    runtime_.AddProgress("job-1", done);
    next = StepAt(next);
  }
  client_.set_unavailable(false);
  StepAt(clock_.Now() + options_.progress_interval);
  EXPECT_EQ(Delivered(client_), (std::vector<int64_t>{12, 13}));
}

TEST_F(AgentTest, RefusedProgressIsDropped) {
  absl::Time next = Register();
  client_.FailNext(Rpc::kReportProgress,
                   absl::FailedPreconditionError("not its assignment"));
  runtime_.AddProgress("job-1", 1);
  next = StepAt(next);
  runtime_.AddProgress("job-1", 2);
  StepAt(next);
  EXPECT_EQ(Delivered(client_), std::vector<int64_t>{2});
  EXPECT_TRUE(agent().registered());
}

TEST_F(AgentTest, KeptProgressIsDroppedWhenRegisteringAgain) {
  absl::Time next = Register();
  client_.FailNext(Rpc::kReportProgress, absl::UnavailableError("blip"));
  runtime_.AddProgress("job-1", 1);
  next = StepAt(next);
  client_.Forget();  // Restarted: job-1 was failed.
  next = StepAt(clock_.Now() + absl::Seconds(1));
  StepAt(next);
  ASSERT_TRUE(agent().registered());
  StepAt(clock_.Now() + options_.progress_interval);
  EXPECT_TRUE(Delivered(client_).empty());
}

// The worker kept training while the coordinator restarted: the reports of
// its claimed job are kept through the re-registration and delivered.
TEST_F(AgentTest, KeptProgressOfAClaimedJobSurvivesACoordinatorRestart) {
  absl::Time next = Register();
  v1::StageClaim claim;
  claim.set_job_id("job-1");
  runtime_.set_claim(claim);
  client_.set_unavailable(true);
  runtime_.AddProgress("job-1", 1);
  next = StepAt(next);
  client_.set_unavailable(false);
  client_.Forget();  // Restarted; it takes job-1 back from the claim.
  runtime_.AddProgress("job-1", 2);
  for (int i = 0; i < 8 && Delivered(client_).size() < 2; ++i) {
    next = StepAt(next);
  }
  EXPECT_EQ(client_.registrations().size(), 2u);
  EXPECT_EQ(Delivered(client_), (std::vector<int64_t>{1, 2}));
  EXPECT_TRUE(runtime_.stopped().empty());
}

// Issue 22, item 2: the coordinator took the finished report, then died
// before the job ended. The worker, registering again with its claim,
// says once more that its stage finished (in summary), so the restarted
// coordinator can end the job instead of waiting for it forever.
TEST_F(AgentTest, AFinishedStageIsReportedAgainAfterACoordinatorRestart) {
  absl::Time next = Register();
  v1::StageClaim claim;
  claim.set_job_id("job-1");
  runtime_.set_claim(claim);
  runtime_.AddFinished("job-1", 300);
  next = StepAt(next);
  ASSERT_EQ(Delivered(client_), (std::vector<int64_t>{300}));
  client_.Forget();  // Restarted: the report is lost with it.
  for (int i = 0; i < 8 && Delivered(client_).size() < 2; ++i) {
    next = StepAt(next);
  }
  EXPECT_EQ(client_.registrations().size(), 2u);
  ASSERT_EQ(Delivered(client_), (std::vector<int64_t>{300, 300}));
  const StageProgress again = client_.progress()[1];  // A copy.
  EXPECT_TRUE(again.finished());
  EXPECT_EQ(again.committed_version(), 300);
  EXPECT_EQ(again.test_accuracy(), 0.5);
  EXPECT_EQ(again.losses_size(), 0);  // A summary: nothing counted twice.
  // Registering without the claim (another job, or none) sends nothing.
  runtime_.set_claim(std::nullopt);
  client_.Forget();
  for (int i = 0; i < 8 && client_.registrations().size() < 3; ++i) {
    next = StepAt(next);
  }
  next = StepAt(next + absl::Seconds(1));
  EXPECT_EQ(Delivered(client_).size(), 2u);
}

TEST_F(AgentTest, StopReportsTheLastProgressAndDeregisters) {
  Register();
  runtime_.AddProgress("job-1", 9);
  agent().Stop();
  EXPECT_EQ(Delivered(client_), std::vector<int64_t>{9});
  EXPECT_EQ(client_.deregistered(), std::vector<std::string>{"w"});
  agent().Stop();  // Idempotent.
  EXPECT_EQ(client_.calls(Rpc::kDeregisterWorker), 1);
}

TEST_F(AgentTest, StopWithoutRegistrationCallsNothing) {
  client_.set_unavailable(true);
  agent().RunOnce();
  agent().Stop();
  EXPECT_EQ(client_.calls(Rpc::kDeregisterWorker), 0);
  EXPECT_EQ(client_.calls(Rpc::kReportProgress), 0);
}

// The agent's own thread on the real clock: it registers through failures
// and Stop() interrupts its sleep instead of waiting out the interval.
TEST(AgentThreadTest, RegistersThenStopsPromptly) {
  AgentOptions options;
  options.info.set_worker_id("w");
  options.initial_backoff = absl::Milliseconds(1);
  options.progress_interval = absl::Seconds(30);
  FakeCoordinatorClient client;
  client.set_heartbeat_interval(absl::Seconds(30));
  client.FailNext(Rpc::kRegisterWorker, absl::UnavailableError("down"), 3);
  FakeRuntime runtime;
  WorkerAgent agent(options, &runtime, &client, RealClock::Get());
  agent.Start();
  ASSERT_TRUE(agent.WaitRegistered(absl::Seconds(10)));
  EXPECT_EQ(client.calls(Rpc::kRegisterWorker), 4);
  const absl::Time start = absl::Now();
  agent.Stop();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(client.deregistered(), std::vector<std::string>{"w"});
}

}  // namespace
}  // namespace aqueduct
