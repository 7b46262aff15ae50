#include "coordinator/progress_intake.h"

#include <string>
#include <vector>

#include "coordinator/fake_job_events.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

class ProgressIntakeTest : public ::testing::Test {
 protected:
  ProgressIntakeTest()
      : registry_(options_.registry, &clock_),
        jobs_("tag", 1),
        executor_("the committer", 1, 10),
        committer_(
            options_, &clock_, mu_, jobs_, logs_, [] { return nullptr; },
            executor_),
        intake_(options_, &clock_, registry_, jobs_, logs_, committer_,
                events_) {
    WorkerInfo info;
    info.set_worker_id("w1");
    info.set_incarnation("i1");
    info.set_address("10.0.0.1:7000");
    std::vector<WorkerTransition> changes;
    EXPECT_TRUE(registry_.Register(info, &changes).ok());
    registry_.Assign("w1", "j1", 0, 0);
    Job job;
    job.id = "j1";
    job.state = v1::JOB_RUNNING;
    job.spec.set_batch_size(8);
    job.ledger = JobLedger(8);
    job.total_steps = 100;
    job.has_plan = true;
    job.plan.add_stages();
    job.stage_workers = {{"w1"}};
    job.reserved = {"w1"};
    jobs_.Add(std::move(job));
  }

  static StageProgress Report() {
    StageProgress p;
    p.set_job_id("j1");
    p.set_stage(0);
    p.set_replica(0);
    p.set_committed_version(3);
    return p;
  }
  absl::Status Send(const std::vector<StageProgress>& stages,
                    const std::string& incarnation = "i1") {
    absl::MutexLock lock(&mu_);
    return intake_.Report("w1", incarnation, stages, &records_);
  }
  Job& TheJob() { return jobs_.At("j1"); }

  CoordinatorOptions options_;
  FakeClock clock_;
  absl::Mutex mu_;
  Registry registry_;
  JobTable jobs_;
  JobLogStore logs_;
  FakeJobEvents events_;
  BoundedExecutor executor_;
  CheckpointCommitter committer_;
  ProgressIntake intake_;
  std::vector<ProgressIntake::Records> records_;
};

TEST_F(ProgressIntakeTest, AppliesAReportToTheLedger) {
  ASSERT_TRUE(Send({Report()}).ok());
  EXPECT_EQ(TheJob().version, 1);
  EXPECT_EQ(events_.StatusOf(TheJob()).stages(0).committed_version(), 3);
  EXPECT_TRUE(events_.calls.empty());
}

TEST_F(ProgressIntakeTest, RefusesAnotherIncarnation) {
  const absl::Status s = Send({Report()}, "i2");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(TheJob().version, 0);
}

TEST_F(ProgressIntakeTest, RefusesAnotherStage) {
  StageProgress p = Report();
  p.set_stage(1);
  const absl::Status s = Send({p});
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("it runs stage 0 replica 0"), std::string::npos);
}

TEST_F(ProgressIntakeTest, ABatchWithOneBadReportChangesNothing) {
  StageProgress unknown = Report();
  unknown.set_job_id("nope");
  const absl::Status s = Send({Report(), unknown});
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "job 'nope' does not exist");
  EXPECT_EQ(TheJob().version, 0);
}

TEST_F(ProgressIntakeTest, RefusesValuesOutOfRange) {
  StageProgress p = Report();
  p.set_committed_version(1000);  // Beyond the job's 100 steps.
  EXPECT_EQ(Send({p}).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ProgressIntakeTest, ReportsOfAnEarlierAttemptAreIgnored) {
  TheJob().attempt = 1;
  StageProgress p = Report();
  p.set_attempt(0);
  ASSERT_TRUE(Send({p}).ok());
  EXPECT_EQ(TheJob().version, 0);
  p.set_attempt(2);
  EXPECT_EQ(Send({p}).code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(ProgressIntakeTest, TheLastReplicaFinishingEndsTheJob) {
  StageProgress p = Report();
  p.set_committed_version(100);
  p.set_finished(true);
  ASSERT_TRUE(Send({p}).ok());
  EXPECT_EQ(events_.calls,
            (std::vector<std::string>{"transition j1 SUCCEEDED"}));
}

TEST_F(ProgressIntakeTest, AStagesErrorIsProbed) {
  StageProgress p = Report();
  p.set_error("connection reset");
  p.set_error_code(static_cast<int>(absl::StatusCode::kUnavailable));
  ASSERT_TRUE(Send({p}).ok());
  EXPECT_EQ(events_.calls,
            (std::vector<std::string>{
                "probe j1 stage 0 replica 0 on worker w1 failed: "
                "connection reset"}));
}

TEST_F(ProgressIntakeTest, AnErrorNoRestartMendsFailsTheJob) {
  StageProgress p = Report();
  p.set_error("no such file");
  p.set_error_code(static_cast<int>(absl::StatusCode::kNotFound));
  ASSERT_TRUE(Send({p}).ok());
  EXPECT_EQ(TheJob().state, v1::JOB_FAILED);
}

TEST_F(ProgressIntakeTest, AnUnreachablePeerIsNamedWithTheReportersHost) {
  StageProgress p = Report();
  p.set_error("could not reach stage 1 on worker w2 (10.0.0.2): timeout");
  p.set_error_code(static_cast<int>(absl::StatusCode::kUnavailable));
  p.mutable_failure()->set_cause(v1::FAILURE_PEER_UNREACHABLE);
  p.mutable_failure()->set_peer_worker_id("w1");
  ASSERT_TRUE(Send({p}).ok());
  ASSERT_EQ(events_.calls.size(), 1u);
  EXPECT_EQ(events_.calls[0],
            "probe j1 stage 0 on worker w1 (10.0.0.1) could not reach stage "
            "1 on worker w2 (10.0.0.2): timeout");
  EXPECT_EQ(TheJob().unreachable_peers.count("w1"), 1u);
}

TEST_F(ProgressIntakeTest, LongErrorsAreCut) {
  StageProgress p = Report();
  p.set_error(std::string(5000, 'x'));
  p.set_error_code(static_cast<int>(absl::StatusCode::kNotFound));
  ASSERT_TRUE(Send({p}).ok());
  EXPECT_NE(TheJob().reason.find("... (5000 bytes)"), std::string::npos);
  EXPECT_LT(TheJob().reason.size(), 4200u);
}

TEST_F(ProgressIntakeTest, LogLinesAreTheCallersAndTracesKeptForLater) {
  StageProgress p = Report();
  v1::LogLine* line = p.add_log_lines();
  line->set_level("info");
  line->set_text("hello");
  line->set_worker("forged");
  p.add_events()->set_name("forward");
  ASSERT_TRUE(Send({p}).ok());
  const std::vector<v1::LogLine> lines = logs_.Read("j1", 0, std::nullopt, 10);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].worker(), "w1");
  EXPECT_EQ(lines[0].text(), "hello");
  ASSERT_EQ(records_.size(), 1u);
  EXPECT_EQ(records_[0].trace.worker_id(), "w1");
  EXPECT_EQ(records_[0].trace.events_size(), 1);
}

// The training signal: a loss line every LogEvery steps (100 steps: every
// 10) and at the last step, and a line per evaluation, once each.
TEST_F(ProgressIntakeTest, TheLogHoldsTheLossAndEachEvaluation) {
  EXPECT_EQ(LogEvery(TheJob()), 10);
  auto report = [](int64_t from, int64_t to) {
    StageProgress p = Report();
    for (int64_t m = from; m < to; ++m) {
      v1::LossPoint* l = p.add_losses();
      l->set_minibatch(m);
      l->set_loss(2.0 - 0.01 * m);
      l->set_samples(8);
    }
    return p;
  };
  ASSERT_TRUE(Send({report(0, 9)}).ok());  // Steps 1-9: no line yet.
  StageProgress p = report(9, 25);
  v1::EvalPoint* e = p.add_evals();
  e->set_step(20);
  e->set_loss(1.5);
  e->set_accuracy(0.75);
  ASSERT_TRUE(Send({p}).ok());
  ASSERT_TRUE(Send({report(25, 26)}).ok());  // No new line.
  ASSERT_TRUE(Send({report(26, 100)}).ok());
  std::vector<std::string> texts;
  for (const v1::LogLine& l : logs_.Read("j1", 0, std::nullopt, 100)) {
    EXPECT_EQ(l.worker(), "coordinator");
    texts.push_back(l.text());
  }
  EXPECT_EQ(texts, (std::vector<std::string>{
                       "step 25/100 loss 1.7600",
                       "evaluation at step 20: test loss 1.5000 accuracy "
                       "0.7500",
                       "step 100/100 loss 1.0100"}));
}

TEST_F(ProgressIntakeTest, CheckBatchNeedsNoState) {
  EXPECT_TRUE(ProgressIntake::CheckBatch("w1", "i1", {}).ok());
  EXPECT_EQ(ProgressIntake::CheckBatch("", "i1", {}).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace aqueduct
