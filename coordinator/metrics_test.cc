// CoordinatorMetrics over a real CoordinatorCore (no job runs: workers are
// registered directly, reports and calls are observed by hand).
#include "coordinator/metrics.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "google/protobuf/text_format.h"
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
    p->add_step_ms(40);  // Two steps a report, and one not a time.
    p->add_step_ms(700);
    p->add_step_ms(-1);
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
           "aqueduct_coordinator_worker_up{worker=\"w0\",host=\"host\\\"a\"} "
           "1\n",
           "aqueduct_coordinator_worker_heartbeats_total{worker=\"w0\",host="
           "\"host\\\"a\"} "
           "2\n",
           "aqueduct_coordinator_worker_last_heartbeat_timestamp_seconds{"
           "worker=\"w0\","
           "host=\"host\\\"a\"} ",
           "aqueduct_build_info{version=\"0.1.0\",protocol=\"aqueduct.v1/",
           "aqueduct_coordinator_worker_device_memory_bytes{worker=\"w0\",host="
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
  // A job the core holds (PENDING: no worker registers), whose stage 0
  // replica 0 on w0 reports three times.
  v1::JobSpec spec;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"pb(
        name: "metrics"
        model { layers { linear { in_features: 8 out_features: 2 } } }
        data {
          synthetic {
            sample_shape: [ 8 ]
            num_classes: 2
            train_samples: 64
            seed: 1
          }
        }
        optimizer { sgd { lr: 0.1 } }
        batch_size: 8
        epochs: 1
      )pb",
      &spec));
  absl::StatusOr<std::string> id = core_->SubmitJob(spec, nullptr);
  ASSERT_TRUE(id.ok()) << id.status();
  auto of_job = [](const std::string& job, v1::ReportProgressRequest r) {
    r.mutable_stages(0)->set_job_id(job);
    return CoordinatorMetrics::Summarize(r);
  };
  const std::vector<CoordinatorMetrics::ReportSummary> s =
      of_job(*id, Report(0, 1000, 1000000));
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].job_id, *id);
  EXPECT_EQ(s[0].time.compute_us, 300000);
  EXPECT_EQ(s[0].time.comm_us, 100000);
  EXPECT_EQ(s[0].bytes_sent, 1000);
  metrics_.ObserveReports("w0", s);
  // The communicator's cumulative count goes on: 500 more bytes.
  metrics_.ObserveReports("w0", of_job(*id, Report(0, 1500, 2000000)));
  // A restart: the communicator's count starts again, at 200.
  metrics_.ObserveReports("w0", of_job(*id, Report(1, 200, 3000000)));
  // Job j1 is not in the core: its series are forgotten at render.
  metrics_.ObserveReports("w0", of_job("j1", Report(0, 1000, 1000000)));

  const std::string l =
      "{job=\"" + *id + "\",stage=\"0\",replica=\"0\",worker=\"w0\"} ";
  // Twice: a scrape changes no total.
  for (int scrape = 0; scrape < 2; ++scrape) {
    const std::string out = metrics_.Render(*core_, clock_.Now());
    for (const std::string& line : {
             // 1000, then 1500 - 1000, then 200 of the new attempt.
             "aqueduct_stage_sent_bytes_total" + l + "1700\n",
             "aqueduct_stage_received_bytes_total" + l + "850\n",
             // 3 x 0.3 s of compute, 3 x 0.1 s of communication.
             "aqueduct_stage_compute_seconds_total" + l + "0.9\n",
             "aqueduct_stage_communication_seconds_total" + l + "0.3\n",
             // From the first event's start (1 s) to the last's end (3.5 s),
             // less the 1.2 s busy.
             "aqueduct_stage_idle_seconds_total" + l + "1.3\n",
             "aqueduct_stage_reports_total" + l + "3\n",
             "aqueduct_stage_checkpoint_files_total" + l + "0\n",
             // 3 reports of a 40 ms and a 700 ms step.
             "aqueduct_stage_step_duration_seconds_count" + l + "6\n",
             "aqueduct_stage_step_duration_seconds_sum" + l + "2.21999",
         }) {
      EXPECT_NE(out.find(line), std::string::npos)
          << "scrape " << scrape << ": " << line << "\n"
          << out;
    }
    EXPECT_EQ(out.find("job=\"j1\""), std::string::npos) << out;
    const std::string bucket = "aqueduct_stage_step_duration_seconds_bucket{";
    const std::string at = "stage=\"0\",replica=\"0\",worker=\"w0\",le=\"";
    EXPECT_NE(out.find(bucket + "job=\"" + *id + "\"," + at + "0.05\"} 3\n"),
              std::string::npos)
        << out;
    EXPECT_NE(out.find(bucket + "job=\"" + *id + "\"," + at + "1\"} 6\n"),
              std::string::npos);
    EXPECT_NE(out.find("# TYPE aqueduct_stage_step_duration_seconds histogram"),
              std::string::npos);
    EXPECT_NE(out.find("# TYPE aqueduct_stage_sent_bytes_total counter"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace aqueduct
