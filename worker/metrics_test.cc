// WorkerMetrics through its observing client over the fake coordinator.
#include "worker/metrics.h"

#include <memory>
#include <string>

#include "common/fake_coordinator_client.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

bool Has(const std::string& text, const std::string& line) {
  return text.find(line) != std::string::npos;
}

v1::ReportProgressRequest Report(int attempt, int64_t sent, bool loss) {
  v1::ReportProgressRequest request;
  request.set_worker_id("w0");
  request.set_incarnation("i0");
  v1::StageProgress* p = request.add_stages();
  p->set_job_id("j1");
  p->set_stage(1);
  p->set_attempt(attempt);
  p->set_bytes_sent(sent);
  p->set_minibatches_done(7);
  v1::TraceEvent* e = p->add_events();
  e->set_track("compute");
  e->set_start_us(1000000);
  e->set_duration_us(250000);
  if (loss) p->add_losses()->set_loss(2.5);
  return request;
}

TEST(WorkerMetricsTest, CountsTheAgentsCallsAndStageReports) {
  FakeCoordinatorClient fake;
  WorkerMetrics metrics;
  std::unique_ptr<CoordinatorClient> client =
      WorkerMetrics::Observe(&fake, &metrics);
  v1::RegisterWorkerRequest reg;
  reg.mutable_info()->set_worker_id("w0");
  reg.mutable_info()->set_incarnation("i0");
  reg.mutable_info()->set_version("0.1.0");
  ASSERT_TRUE(client->RegisterWorker(reg, absl::Seconds(1)).ok());
  v1::HeartbeatRequest hb;
  hb.set_worker_id("w0");
  hb.set_incarnation("i0");
  ASSERT_TRUE(client->Heartbeat(hb, absl::Seconds(1)).ok());
  ASSERT_TRUE(
      client->ReportProgress(Report(0, 1000, false), absl::Seconds(1)).ok());
  ASSERT_TRUE(
      client->ReportProgress(Report(0, 1500, true), absl::Seconds(1)).ok());
  std::string out = metrics.Render("w0");
  const std::string l = "{job=\"j1\",stage=\"1\",replica=\"0\"}";
  EXPECT_TRUE(
      Has(out, "aqueduct_worker_heartbeats_sent_total{worker=\"w0\"} 1\n"))
      << out;
  EXPECT_TRUE(
      Has(out, "aqueduct_worker_coordinator_reachable{worker=\"w0\"} 1\n"));
  EXPECT_TRUE(
      Has(out, "aqueduct_worker_stage_sent_bytes_total" + l + " 1500\n"))
      << out;
  EXPECT_TRUE(
      Has(out, "aqueduct_worker_stage_compute_seconds_total" + l + " 0.5\n"));
  EXPECT_TRUE(Has(out, "aqueduct_worker_stage_loss" + l + " 2.5\n"));
  EXPECT_TRUE(Has(out, "aqueduct_worker_stage_minibatches" + l + " 7\n"));

  // The coordinator goes away: heartbeats fail, reports are not counted.
  fake.set_unavailable(true);
  EXPECT_FALSE(client->Heartbeat(hb, absl::Seconds(1)).ok());
  EXPECT_FALSE(
      client->ReportProgress(Report(0, 9999, false), absl::Seconds(1)).ok());
  out = metrics.Render("w0");
  EXPECT_TRUE(
      Has(out, "aqueduct_worker_heartbeats_failed_total{worker=\"w0\"} 1\n"));
  EXPECT_TRUE(
      Has(out, "aqueduct_worker_coordinator_reachable{worker=\"w0\"} 0\n"));
  EXPECT_TRUE(
      Has(out, "aqueduct_worker_stage_sent_bytes_total" + l + " 1500\n"));

  // A new attempt restarts the communicator's count; the total goes on.
  fake.set_unavailable(false);
  ASSERT_TRUE(
      client->ReportProgress(Report(1, 100, false), absl::Seconds(1)).ok());
  out = metrics.Render("w0");
  EXPECT_TRUE(
      Has(out, "aqueduct_worker_stage_sent_bytes_total" + l + " 1600\n"))
      << out;
  EXPECT_TRUE(Has(out, "# TYPE process_resident_memory_bytes gauge\n"));
}

}  // namespace
}  // namespace aqueduct
