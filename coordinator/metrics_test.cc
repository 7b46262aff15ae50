// CoordinatorMetrics over a real CoordinatorCore (no job runs: workers are
// registered directly, reports and calls are observed by hand).
#include "coordinator/metrics.h"

#include <memory>
#include <string>

#include "common/clock.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

class CoordinatorMetricsTest : public ::testing::Test {
 protected:
  CoordinatorMetricsTest() {
    CoordinatorOptions o;
    o.registry.version = "0.1.0";
    core_ = std::make_unique<CoordinatorCore>(
        o, &clock_, [](const std::string&) -> std::unique_ptr<WorkerClient> {
          return nullptr;  // Never called: no job is started here.
        });
  }

  // A stage report of job "j1" with one compute and one comm event.
  static v1::ReportProgressRequest Report(int attempt, int64_t sent,
                                          int64_t start_us) {
    v1::ReportProgressRequest request;
    request.set_worker_id("w0");
    v1::StageProgress* p = request.add_stages();
    p->set_job_id("j1");
    p->set_stage(0);
    p->set_attempt(attempt);
    p->set_bytes_sent(sent);
    p->set_bytes_received(sent / 2);
    p->set_peak_rss_bytes(1 << 20);
    v1::TraceEvent* e = p->add_events();
    e->set_track("comm");
    e->set_start_us(start_us);
    e->set_duration_us(100000);
    e = p->add_events();
    e->set_track("compute");
    e->set_start_us(start_us + 200000);
    e->set_duration_us(300000);
    return request;
  }

  FakeClock clock_;
  std::unique_ptr<CoordinatorCore> core_;
  CoordinatorMetrics metrics_;
};

TEST_F(CoordinatorMetricsTest, RendersWorkersCallsAndProcess) {
  WorkerInfo info;
  info.set_worker_id("w0");
  info.set_incarnation("inc");
  info.set_version("0.1.0");
  info.set_address("127.0.0.1:1");
  info.set_host("host\"a");
  info.mutable_device()->set_memory_bytes(1 << 30);
  ASSERT_TRUE(core_->RegisterWorker(info, nullptr).ok());
  metrics_.ObserveHeartbeat("w0");
  metrics_.ObserveHeartbeat("w0");
  metrics_.ObserveCall("Heartbeat", 0, absl::Milliseconds(3));
  metrics_.ObserveCall("Heartbeat", 14, absl::Seconds(2));
  clock_.Advance(absl::Milliseconds(500));
  const std::string out = metrics_.Render(*core_, clock_.Now());
  for (const char* line : {
           "aqueduct_worker_up{worker=\"w0\",host=\"host\\\"a\"} 1\n",
           "aqueduct_worker_heartbeats_total{worker=\"w0\",host=\"host\\\"a\"} "
           "2\n",
           "aqueduct_worker_last_heartbeat_age_seconds{worker=\"w0\",host="
           "\"host\\\"a\"} 0.5\n",
           "aqueduct_worker_device_memory_bytes{worker=\"w0\",host="
           "\"host\\\"a\"}"
           " 1073741824\n",
           "aqueduct_coordinator_rpc_duration_seconds_bucket{method="
           "\"Heartbeat\",code=\"OK\",le=\"0.005\"} 1\n",
           "aqueduct_coordinator_rpcs_total{method=\"Heartbeat\",code="
           "\"UNAVAILABLE\"} 1\n",
           "aqueduct_coordinator_workers{state=\"HEALTHY\"} 1\n",
           "aqueduct_coordinator_jobs{state=\"RUNNING\"} 0\n",
           "# TYPE process_cpu_seconds_total counter\n",
       }) {
    EXPECT_NE(out.find(line), std::string::npos) << line << "\n" << out;
  }
}

TEST_F(CoordinatorMetricsTest, SummarizesReportsIntoMonotonicTotals) {
  const v1::ReportProgressRequest first = Report(0, 1000, 1000000);
  std::vector<CoordinatorMetrics::ReportSummary> s =
      CoordinatorMetrics::Summarize(first);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].time.compute_us, 300000);
  EXPECT_EQ(s[0].time.comm_us, 100000);
  metrics_.ObserveReports("w0", s);
  metrics_.ObserveReports(
      "w0", CoordinatorMetrics::Summarize(Report(0, 1500, 2000000)));
  // A restart: the communicator's count starts again.
  metrics_.ObserveReports(
      "w0", CoordinatorMetrics::Summarize(Report(1, 200, 3000000)));
  // Job j1 is not in the core: its series are forgotten at render.
  std::string out = metrics_.Render(*core_, clock_.Now());
  EXPECT_EQ(out.find("job=\"j1\""), std::string::npos) << out;
  EXPECT_NE(out.find("# TYPE aqueduct_stage_sent_bytes_total counter"),
            std::string::npos);
}

}  // namespace
}  // namespace aqueduct
