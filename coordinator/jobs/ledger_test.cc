#include "coordinator/jobs/ledger.h"

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);

v1::StageProgress Report(int stage, int replica, int64_t done) {
  v1::StageProgress p;
  p.set_stage(stage);
  p.set_replica(replica);
  p.set_minibatches_done(done);
  p.set_committed_version(done);
  return p;
}

v1::WorkerState Healthy(const std::string&) { return v1::WORKER_HEALTHY; }

TEST(JobLedgerTest, StatusAggregatesReplicasAndRates) {
  JobLedger ledger(64);
  v1::StageProgress a = Report(0, 0, 10);
  a.add_step_ms(5);
  a.add_step_ms(7);
  a.set_bytes_sent(100);
  ledger.Apply("w0", a, kT0);
  ledger.Apply("w0", Report(0, 0, 20), kT0 + absl::Seconds(2));
  v1::StageProgress b = Report(1, 0, 18);
  b.set_peak_rss_bytes(1000);
  b.set_utilization(0.5);
  ledger.Apply("w1", b, kT0);
  ledger.Apply("w1", Report(1, 0, 19), kT0 + absl::Seconds(1));
  v1::JobStatus s;
  ledger.FillStatus({{"w0"}, {"w1"}}, Healthy, &s);
  ASSERT_EQ(s.stages_size(), 2);
  EXPECT_EQ(s.stages(0).committed_version(), 20);
  EXPECT_EQ(s.stages(0).bytes_sent(), 100);
  EXPECT_EQ(s.stages(0).step_ms_p50(), 5);
  EXPECT_EQ(s.stages(0).step_ms_p99(), 7);
  EXPECT_DOUBLE_EQ(s.stages(0).samples_per_second(), 10 * 64 / 2.0);
  EXPECT_EQ(s.stages(1).peak_rss_bytes(), 1000);
  EXPECT_EQ(s.stages(1).worker_states(0), v1::WORKER_HEALTHY);
  // The job's step and rate are the output stage's.
  EXPECT_EQ(s.step(), 19);
  EXPECT_DOUBLE_EQ(s.samples_per_second(), 64.0);
}

// Data parallelism: the stage shows the most optimizer state a replica
// keeps and its replicas' staleness histograms summed (each report carries
// its shards' counts so far: the latest counts, not the sum of reports).
TEST(JobLedgerTest, OptimizerStateAndStalenessOfTheReplicas) {
  JobLedger ledger(64);
  auto report = [](int replica, int64_t bytes, std::vector<int64_t> counts) {
    v1::StageProgress p = Report(0, replica, 5);
    p.set_peak_rss_bytes(1);
    p.set_optimizer_state_bytes(bytes);
    for (int64_t c : counts) p.add_staleness_histogram(c);
    return p;
  };
  ledger.Apply("w0", report(0, 400, {1, 1}), kT0);
  ledger.Apply("w0", report(0, 400, {3, 2}), kT0);
  ledger.Apply("w1", report(1, 500, {4, 0, 1}), kT0);
  v1::JobStatus s;
  ledger.FillStatus({{"w0", "w1"}}, Healthy, &s);
  ASSERT_EQ(s.stages_size(), 1);
  EXPECT_EQ(s.stages(0).optimizer_state_bytes(), 500);
  EXPECT_EQ(std::vector<int64_t>(s.stages(0).staleness_histogram().begin(),
                                 s.stages(0).staleness_histogram().end()),
            (std::vector<int64_t>{7, 2, 1}));
}

// A report carries its run's bytes so far, and later reports repeat them
// (the output stage's last, after its evaluation, did): the stage's bytes
// are the count, not the sum of the reports; a restart's run adds its own.
TEST(JobLedgerTest, BytesAreTheRunsCountNotTheSumOfItsReports) {
  JobLedger ledger(64);
  for (int64_t sent : {1000, 5000, 5000, 5000}) {
    v1::StageProgress p = Report(3, 0, sent / 1000);
    p.set_bytes_sent(sent);
    p.set_bytes_received(2 * sent);
    ledger.Apply("w3", p, kT0);
  }
  v1::JobStatus s;
  ledger.FillStatus({{"w0"}, {"w1"}, {"w2"}, {"w3"}}, Healthy, &s);
  ASSERT_EQ(s.stages_size(), 4);
  EXPECT_EQ(s.stages(3).bytes_sent(), 5000);
  EXPECT_EQ(s.stages(3).bytes_received(), 10000);
  ledger.Rollback(2);
  v1::StageProgress again = Report(3, 0, 3);
  again.set_bytes_sent(700);
  ledger.Apply("w3", again, kT0 + absl::Seconds(1));
  s.Clear();
  ledger.FillStatus({{"w0"}, {"w1"}, {"w2"}, {"w3"}}, Healthy, &s);
  EXPECT_EQ(s.stages(3).bytes_sent(), 5700);
  EXPECT_EQ(s.stages(3).bytes_received(), 10000);
}

TEST(JobLedgerTest, SharesOfAMinibatchLossAreMergedWhenAllAreIn) {
  JobLedger ledger(64);
  v1::StageProgress r0 = Report(1, 0, 1), r1 = Report(1, 1, 1);
  v1::LossPoint* p = r0.add_losses();
  p->set_minibatch(0);
  p->set_loss(1.0);
  p->set_samples(32);
  p = r1.add_losses();
  p->set_minibatch(0);
  p->set_loss(3.0);
  p->set_samples(32);
  ledger.Apply("a", r0, kT0);
  v1::JobStatus before;
  ledger.FillStatus({{"x"}, {"a", "b"}}, Healthy, &before);
  EXPECT_EQ(before.loss_curve_size(), 0);
  ledger.Apply("b", r1, kT0);
  v1::JobStatus after;
  ledger.FillStatus({{"x"}, {"a", "b"}}, Healthy, &after);
  ASSERT_EQ(after.loss_curve_size(), 1);
  EXPECT_DOUBLE_EQ(after.loss_curve(0).loss(), 2.0);
  EXPECT_EQ(after.loss_curve(0).samples(), 64);
  EXPECT_DOUBLE_EQ(ledger.loss(), 2.0);
}

TEST(JobLedgerTest, LossCurveHalvesItsResolutionPastTheLimit) {
  JobLedger ledger(8);
  v1::StageProgress r = Report(0, 0, 0);
  const int n = static_cast<int>(JobLedger::kMaxLossPoints) * 3;
  for (int m = 0; m < n; ++m) {
    v1::LossPoint* p = r.add_losses();
    p->set_minibatch(m);
    p->set_loss(m);
  }
  ledger.Apply("w", r, kT0);
  v1::JobStatus s;
  ledger.FillStatus({{"w"}}, Healthy, &s);
  EXPECT_LE(s.loss_curve_size(), static_cast<int>(JobLedger::kMaxLossPoints));
  EXPECT_GT(s.loss_curve_size(),
            static_cast<int>(JobLedger::kMaxLossPoints / 2));
  EXPECT_EQ(s.loss_curve(0).minibatch(), 0);
  EXPECT_EQ(s.loss(), n - 1);
}

// The output stage's throughput over the job: a point a second or more
// apart (by the worker's clock), the rate between neighbours, the
// resolution halved past the bound so the whole job stays covered.
TEST(JobLedgerTest, ThroughputHistoryCoversTheJob) {
  JobLedger ledger(8);
  auto output = [](int64_t done, int64_t ms) {
    v1::StageProgress p = Report(1, 0, done);
    p.set_reported_ms(ms);
    v1::LossPoint* loss = p.add_losses();
    loss->set_minibatch(done - 1);
    loss->set_loss(1);
    return p;
  };
  ledger.Apply("w1", output(10, 1000), kT0);
  ledger.Apply("w1", output(12, 1500), kT0);  // Too soon: not a point.
  ledger.Apply("w1", output(30, 3000), kT0);
  ledger.Apply("w0", Report(0, 0, 40), kT0);  // No losses: not the output.
  v1::JobStatus s;
  ledger.FillStatus({{"w0"}, {"w1"}}, Healthy, &s);
  ASSERT_EQ(s.throughput_size(), 2);
  EXPECT_EQ(s.throughput(0).samples_per_second(), 0);
  EXPECT_EQ(s.throughput(1).step(), 30);
  EXPECT_DOUBLE_EQ(s.throughput(1).samples_per_second(), 20 * 8 / 2.0);
  for (int i = 2; i <= 700; ++i) {
    ledger.Apply("w1", output(30 + 10 * i, 1000 + 1000 * i), kT0);
  }
  v1::JobStatus all;
  ledger.FillStatus({{"w0"}, {"w1"}}, Healthy, &all);
  EXPECT_LE(all.throughput_size(), 600);
  EXPECT_GT(all.throughput_size(), 300);
  EXPECT_EQ(all.throughput(0).time_ms(), 1000);
  EXPECT_GE(all.throughput(all.throughput_size() - 1).time_ms(), 690000);
  EXPECT_DOUBLE_EQ(all.throughput(5).samples_per_second(), 80);
}

TEST(JobLedgerTest, FinishedReplicasAndTestMetrics) {
  JobLedger ledger(8);
  v1::StageProgress last = Report(1, 0, 5);
  last.set_test_accuracy(0.9);
  last.set_test_loss(0.3);
  EXPECT_EQ(ledger.MarkFinished(Report(0, 0, 5), false), 1u);
  EXPECT_EQ(ledger.MarkFinished(last, true), 2u);
  EXPECT_EQ(ledger.MarkFinished(last, true), 2u);  // Counted once.
  v1::JobStatus s;
  ledger.FillStatus({{"a"}, {"b"}}, Healthy, &s);
  EXPECT_DOUBLE_EQ(s.test_accuracy(), 0.9);
  EXPECT_DOUBLE_EQ(s.test_loss(), 0.3);
}

TEST(JobLedgerTest, TraceKeepsEventsPerReplica) {
  JobLedger ledger(8);
  v1::StageProgress r = Report(0, 0, 1);
  r.add_events()->set_name("F mb=0 v=0");
  r.add_events()->set_name("B mb=0 v=0");
  ledger.Apply("w0", r, kT0);
  v1::GetTraceResponse t = ledger.Trace();
  ASSERT_EQ(t.stages_size(), 1);
  EXPECT_EQ(t.stages(0).worker_id(), "w0");
  EXPECT_EQ(t.stages(0).events_size(), 2);
  EXPECT_EQ(t.dropped(), 0);
}

// Memory is bounded (issue 22, item 7): past kMaxTraceEvents the oldest
// events go, the newest stay, and the count of dropped ones is reported.
TEST(JobLedgerTest, TraceEventsInMemoryAreBoundedKeepingTheNewest) {
  JobLedger ledger(8);
  const int64_t total = JobLedger::kMaxTraceEvents + 50000;
  int64_t sent = 0;
  while (sent < total) {
    v1::StageProgress r = Report(0, 0, 1);
    for (int i = 0; i < 10000 && sent < total; ++i, ++sent) {
      r.add_events()->set_start_us(sent);
    }
    ledger.Apply("w0", r, kT0);
  }
  const v1::GetTraceResponse t = ledger.Trace();
  ASSERT_EQ(t.stages_size(), 1);
  const int64_t kept = t.stages(0).events_size();
  EXPECT_LE(kept, JobLedger::kMaxTraceEvents);
  EXPECT_GE(kept, JobLedger::kMaxTraceEvents / 2);
  EXPECT_EQ(kept + t.dropped(), total);
  // The newest are kept, in order.
  EXPECT_EQ(t.stages(0).events(kept - 1).start_us(), total - 1);
  EXPECT_EQ(t.stages(0).events(0).start_us(), total - kept);
}

// The live view's tail: only the events of the last window (relative to
// the latest event's end), per stage replica.
TEST(JobLedgerTest, TraceTailKeepsTheLastWindow) {
  JobLedger ledger(8);
  for (int stage = 0; stage < 2; ++stage) {
    v1::StageProgress r = Report(stage, 0, 1);
    for (int i = 0; i < 5000; ++i) {  // An event every ms, 0.5 ms long.
      v1::TraceEvent* e = r.add_events();
      e->set_name("F");
      e->set_start_us(i * 1000 + stage * 100);
      e->set_duration_us(500);
    }
    ledger.Apply(absl::StrCat("w", stage), r, kT0);
  }
  const v1::GetTraceResponse tail = ledger.TraceTail(10000);  // 10 ms.
  ASSERT_EQ(tail.stages_size(), 2);
  // The latest end: 4999 ms + 100 us + 500 us; events ending after
  // 4989.6 ms: starts from 4989 ms (stage 0: ends 4989.5 < .6, so 4990).
  EXPECT_EQ(tail.stages(0).worker_id(), "w0");
  EXPECT_EQ(tail.stages(0).events_size(), 10);
  EXPECT_EQ(tail.stages(0).events(0).start_us(), 4990000);
  EXPECT_EQ(tail.stages(1).events_size(), 11);
  EXPECT_EQ(tail.stages(1).events(0).start_us(), 4989100);
  EXPECT_EQ(ledger.TraceTail(int64_t{1} << 40).stages(0).events_size(), 5000);
}

}  // namespace
}  // namespace aqueduct
