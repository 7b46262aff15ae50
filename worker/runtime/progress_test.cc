// The progress accumulator on a fake clock.
#include "worker/runtime/progress.h"

#include "common/clock.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

class ProgressTest : public ::testing::Test {
 protected:
  ProgressTest() : progress_(Options()) {
    progress_.Reset("job", 1, 0);
    progress_.Begin();
  }

  ProgressOptions Options() {
    ProgressOptions options;
    options.clock = &clock_;
    options.peak_rss_bytes = [] { return int64_t{1} << 20; };
    options.max_pending_events = 100;
    return options;
  }

  // An op that took `wall` of which `compute` computing, ending now.
  StageEvent Event(OpKind kind, int64_t minibatch, int64_t version,
                   absl::Duration wall, absl::Duration compute) {
    StageEvent e;
    e.kind = kind;
    e.minibatch = minibatch;
    e.version = version;
    e.end = clock_.Now();
    e.start = e.end - wall;
    e.compute = compute;
    return e;
  }

  FakeClock clock_;
  ProgressAccumulator progress_;
};

TEST_F(ProgressTest, NothingToReportAtFirst) {
  EXPECT_FALSE(progress_.Take().has_value());
  EXPECT_EQ(progress_.minibatches_done(), 0);
}

// Bytes are live: each report reads the communicator's counts while the
// stage runs (metrics and the dashboard see them during the job); the
// final SetBytes and Reset stop reading.
TEST_F(ProgressTest, ReportsReadTheByteCounterWhileItIsSet) {
  int64_t sent = 100, received = 7;
  progress_.SetByteCounter([&] { return std::make_pair(sent, received); });
  progress_.SetTotalSteps(10);  // Something to report.
  std::optional<StageProgress> report = progress_.Take();
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->bytes_sent(), 100);
  EXPECT_EQ(report->bytes_received(), 7);
  sent = 250;
  progress_.SetTotalSteps(11);
  EXPECT_EQ(progress_.Take()->bytes_sent(), 250);
  progress_.SetBytes(300, 9);
  sent = 999;  // No longer read.
  report = progress_.Take();
  EXPECT_EQ(report->bytes_sent(), 300);
  EXPECT_EQ(report->bytes_received(), 9);
  progress_.SetByteCounter([&] { return std::make_pair(sent, received); });
  progress_.Reset("job", 1, 0, 1);
  progress_.SetTotalSteps(10);
  EXPECT_EQ(progress_.Take()->bytes_sent(), 0);
}

TEST_F(ProgressTest, StepsReportTimesUtilisationAndPeaks) {
  StageStats stats;
  stats.peak_stashed_versions = 2;
  stats.peak_in_flight = 3;
  stats.stashed_weight_bytes_peak = 400;
  stats.stashed_activation_bytes_peak = 500;
  clock_.Advance(absl::Milliseconds(4));
  progress_.OnStageEvent(Event(OpKind::kForward, 0, 0, absl::Milliseconds(4),
                               absl::Milliseconds(2)),
                         1, stats);
  clock_.Advance(absl::Milliseconds(4));
  progress_.OnStageEvent(Event(OpKind::kBackward, 0, 0, absl::Milliseconds(4),
                               absl::Milliseconds(4)),
                         1, stats);
  clock_.Advance(absl::Milliseconds(2));
  progress_.OnStageEvent(Event(OpKind::kOptimizerStep, 0, 1,
                               absl::Milliseconds(2), absl::Milliseconds(2)),
                         1, stats);
  std::optional<StageProgress> p = progress_.Take();
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->job_id(), "job");
  EXPECT_EQ(p->stage(), 1);
  ASSERT_EQ(p->step_ms_size(), 1);
  EXPECT_DOUBLE_EQ(p->step_ms(0), 10);
  EXPECT_EQ(p->minibatches_done(), 1);
  EXPECT_EQ(p->committed_version(), 1);
  EXPECT_DOUBLE_EQ(p->utilization(), 0.8);  // 8 ms computing of 10.
  EXPECT_EQ(p->peak_rss_bytes(), 1 << 20);
  EXPECT_EQ(p->peak_stashed_versions(), 2);
  EXPECT_EQ(p->peak_in_flight(), 3);
  EXPECT_EQ(p->stashed_weight_bytes(), 400);
  EXPECT_EQ(p->stashed_activation_bytes(), 500);
  // The forward waited 2 ms on its peer (stage 1 receives activations);
  // a middle stage receives and sends both ways, each transfer with its
  // flow (a receive without a wait too).
  ASSERT_EQ(p->events_size(), 7);
  EXPECT_EQ(p->events(0).name(), "recv act mb=0");
  EXPECT_EQ(p->events(0).track(), "comm");
  EXPECT_EQ(p->events(0).duration_us(), 2000);
  EXPECT_EQ(p->events(0).flow(), "in");
  EXPECT_EQ(p->events(0).flow_id(), FlowId("job", 0, 0, 0, false, 0));
  EXPECT_EQ(p->events(1).name(), "F mb=0 v=0");
  EXPECT_EQ(p->events(1).track(), "compute");
  EXPECT_EQ(p->events(1).flow_id(), 0u);
  EXPECT_EQ(p->events(2).name(), "send act mb=0");
  EXPECT_EQ(p->events(2).flow(), "out");
  EXPECT_EQ(p->events(2).flow_id(), FlowId("job", 0, 0, 0, false, 1));
  EXPECT_EQ(p->events(3).name(), "recv grad mb=0");
  EXPECT_EQ(p->events(3).flow_id(), FlowId("job", 0, 0, 0, true, 1));
  EXPECT_EQ(p->events(4).name(), "B mb=0 v=0");
  EXPECT_EQ(p->events(5).name(), "send grad mb=0");
  EXPECT_EQ(p->events(5).flow_id(), FlowId("job", 0, 0, 0, true, 0));
  EXPECT_EQ(p->events(6).name(), "step v=1");
  EXPECT_EQ(progress_.minibatches_done(), 1);

  // The next report has only what happened since; cumulative fields stay.
  EXPECT_FALSE(progress_.Take().has_value());
  clock_.Advance(absl::Milliseconds(30));
  progress_.OnStageEvent(Event(OpKind::kOptimizerStep, 1, 2,
                               absl::Milliseconds(2), absl::Milliseconds(2)),
                         1, stats);
  p = progress_.Take();
  ASSERT_TRUE(p.has_value());
  ASSERT_EQ(p->step_ms_size(), 1);
  EXPECT_DOUBLE_EQ(p->step_ms(0), 30);
  EXPECT_EQ(p->committed_version(), 2);
  EXPECT_EQ(p->events_size(), 1);
  EXPECT_DOUBLE_EQ(p->utilization(), 10.0 / 40);
  EXPECT_EQ(p->job_id(), "job");
}

TEST_F(ProgressTest, LossesMergeAcrossMicrobatches) {
  progress_.Begin(16);
  progress_.OnLoss(0, 4.0, 8);
  EXPECT_FALSE(progress_.Take().has_value());
  progress_.OnLoss(1, 1.0, 8);
  progress_.OnLoss(0, 6.0, 8);
  std::optional<StageProgress> p = progress_.Take();
  ASSERT_TRUE(p.has_value());
  ASSERT_EQ(p->losses_size(), 1);
  EXPECT_EQ(p->losses(0).minibatch(), 0);
  EXPECT_DOUBLE_EQ(p->losses(0).loss(), 10.0 / 16);
  EXPECT_EQ(p->losses(0).samples(), 16);
  progress_.OnLoss(1, 3.0, 8);
  p = progress_.Take();
  ASSERT_TRUE(p.has_value());
  ASSERT_EQ(p->losses_size(), 1);
  EXPECT_EQ(p->losses(0).minibatch(), 1);
  EXPECT_DOUBLE_EQ(p->losses(0).loss(), 4.0 / 16);
}

TEST_F(ProgressTest, LocalStepsReportTheNextMinibatchInFlight) {
  progress_.SetTotalSteps(3);
  clock_.Advance(absl::Milliseconds(20));
  StepReport r;
  r.step = 1;
  r.total_steps = 3;
  r.loss = 0.5;
  r.step_ms = 5;
  progress_.OnLocalStep(r);
  std::optional<StageProgress> p = progress_.Take();
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->total_steps(), 3);
  EXPECT_EQ(p->minibatches_done(), 1);
  EXPECT_EQ(p->committed_version(), 1);
  ASSERT_EQ(p->in_flight_size(), 1);
  EXPECT_EQ(p->in_flight(0).minibatch(), 1);
  EXPECT_EQ(p->in_flight(0).version(), 1);
  ASSERT_EQ(p->losses_size(), 1);
  EXPECT_EQ(p->losses(0).minibatch(), 0);
  EXPECT_DOUBLE_EQ(p->losses(0).loss(), 0.5);
  EXPECT_DOUBLE_EQ(p->utilization(), 0.25);
  r.step = 3;
  progress_.OnLocalStep(r);
  p = progress_.Take();
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->in_flight_size(), 0);  // The last step.
}

TEST_F(ProgressTest, FinishAndErrorAreReportedOnce) {
  progress_.SetBytes(10, 20);
  progress_.SetTest(0.75, 0.5);
  progress_.Finish();
  std::optional<StageProgress> p = progress_.Take();
  ASSERT_TRUE(p.has_value());
  EXPECT_TRUE(p->finished());
  EXPECT_EQ(p->bytes_sent(), 10);
  EXPECT_EQ(p->bytes_received(), 20);
  EXPECT_DOUBLE_EQ(p->test_accuracy(), 0.75);
  EXPECT_DOUBLE_EQ(p->test_loss(), 0.5);
  progress_.Fail(absl::UnknownError("boom"));
  p = progress_.Take();
  ASSERT_TRUE(p.has_value());
  EXPECT_FALSE(p->finished());
  EXPECT_EQ(p->error(), "boom");
  progress_.SetTotalSteps(5);
  p = progress_.Take();
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->error(), "");
  EXPECT_EQ(p->bytes_sent(), 10);  // Cumulative.
}

TEST_F(ProgressTest, TraceEventsAreCappedBetweenReports) {
  ProgressOptions options = Options();
  options.max_pending_events = 3;
  ProgressAccumulator progress(options);
  progress.Reset("job", 0, 0);
  for (int m = 0; m < 5; ++m) {
    progress.OnStageEvent(Event(OpKind::kAllReduce, m, 0, absl::Milliseconds(1),
                                absl::ZeroDuration()),
                          0, StageStats());
  }
  std::optional<StageProgress> p = progress.Take();
  ASSERT_TRUE(p.has_value());
  ASSERT_EQ(p->events_size(), 3);
  EXPECT_EQ(p->events(2).name(), "all-reduce mb=2");
}

TEST_F(ProgressTest, ResetForgetsThePreviousJob) {
  progress_.SetTotalSteps(9);
  progress_.OnLoss(0, 1.0, 1);
  progress_.Reset("next", 2, 1);
  EXPECT_FALSE(progress_.Take().has_value());
  progress_.SetTotalSteps(4);
  std::optional<StageProgress> p = progress_.Take();
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->job_id(), "next");
  EXPECT_EQ(p->stage(), 2);
  EXPECT_EQ(p->replica(), 1);
  EXPECT_EQ(p->losses_size(), 0);
  EXPECT_EQ(p->total_steps(), 4);
}

}  // namespace
}  // namespace aqueduct

namespace aqueduct {
namespace {

TEST(ProgressLogsTest, ReportsCarryTheJobsCapturedLines) {
  FakeClock clock;
  JobLogBuffer logs;
  ProgressOptions options;
  options.clock = &clock;
  options.logs = &logs;
  ProgressAccumulator progress(options);
  progress.Reset("job-a", 2, 0);
  logs.Add("job-b", 0, "info", 1, "another job's line");
  EXPECT_FALSE(progress.Take().has_value());
  logs.Add("job-a", 2, "warn", 5, "peer slow");
  std::optional<StageProgress> p = progress.Take();
  ASSERT_TRUE(p.has_value());
  ASSERT_EQ(p->log_lines_size(), 1);
  EXPECT_EQ(p->log_lines(0).text(), "peer slow");
  EXPECT_EQ(p->log_lines(0).level(), "warn");
  EXPECT_FALSE(progress.Take().has_value());
}

TEST(FlowIdTest, DiffersByEveryFieldAndFitsJson) {
  const uint64_t base = FlowId("j", 0, 3, 1, false, 0);
  EXPECT_NE(base, 0u);
  EXPECT_LT(base, uint64_t{1} << 52);
  EXPECT_EQ(base, FlowId("j", 0, 3, 1, false, 0));
  EXPECT_NE(base, FlowId("k", 0, 3, 1, false, 0));
  EXPECT_NE(base, FlowId("j", 1, 3, 1, false, 0));
  EXPECT_NE(base, FlowId("j", 0, 4, 1, false, 0));
  EXPECT_NE(base, FlowId("j", 0, 3, 0, false, 0));
  EXPECT_NE(base, FlowId("j", 0, 3, 1, true, 0));
  EXPECT_NE(base, FlowId("j", 0, 3, 1, false, 1));
}

}  // namespace
}  // namespace aqueduct
