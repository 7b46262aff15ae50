#include "common/metrics.h"

#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace aqueduct {
namespace {

TEST(MetricsTextTest, WritesFamiliesOnceWithTheirSamplesTogether) {
  MetricsText text;
  text.Declare("aqueduct_a_total", MetricType::kCounter, "Things.\nMore.");
  text.Declare("aqueduct_b", MetricType::kGauge, "A level.");
  text.Add("aqueduct_a_total", {{"job", "j1"}}, 3);
  text.Add("aqueduct_b", {}, 0.5);
  text.Add("aqueduct_a_total", {{"job", "j2"}}, 4);
  // A second declaration is ignored.
  text.Declare("aqueduct_a_total", MetricType::kGauge, "other");
  EXPECT_EQ(text.Render(),
            "# HELP aqueduct_a_total Things.\\nMore.\n"
            "# TYPE aqueduct_a_total counter\n"
            "aqueduct_a_total{job=\"j1\"} 3\n"
            "aqueduct_a_total{job=\"j2\"} 4\n"
            "# HELP aqueduct_b A level.\n"
            "# TYPE aqueduct_b gauge\n"
            "aqueduct_b 0.5\n");
}

TEST(MetricsTextTest, EscapesLabelValuesAndFormatsValues) {
  EXPECT_EQ(EscapeLabelValue("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  EXPECT_EQ(FormatMetricValue(42), "42");
  EXPECT_EQ(FormatMetricValue(-7), "-7");
  EXPECT_EQ(FormatMetricValue(0.25), "0.25");
  EXPECT_EQ(FormatMetricValue(1.0 / 0.0), "+Inf");
  EXPECT_EQ(FormatMetricValue(-1.0 / 0.0), "-Inf");
  EXPECT_EQ(FormatMetricValue(0.0 / 0.0), "NaN");
  EXPECT_EQ(FormatMetricValue(1e20), "1e+20");
  MetricsText text;
  text.Declare("x", MetricType::kGauge, "");
  text.Add("x", {{"k", "q\"uote"}}, 1);
  EXPECT_EQ(text.Render(), "# TYPE x gauge\nx{k=\"q\\\"uote\"} 1\n");
}

TEST(HistogramTest, BucketsAreCumulativeWithInfLast) {
  Histogram h({0.1, 1, 10});
  for (double v : {0.05, 0.1, 0.5, 5.0, 50.0}) h.Observe(v);
  HistogramSnapshot s = h.Snapshot();
  EXPECT_EQ(s.cumulative, (std::vector<uint64_t>{2, 3, 4}));
  EXPECT_EQ(s.count, 5u);
  EXPECT_DOUBLE_EQ(s.sum, 55.65);
  MetricsText text;
  text.Declare("lat_seconds", MetricType::kHistogram, "Latency.");
  text.AddHistogram("lat_seconds", {{"method", "M"}}, s);
  EXPECT_EQ(text.Render(),
            "# HELP lat_seconds Latency.\n"
            "# TYPE lat_seconds histogram\n"
            "lat_seconds_bucket{method=\"M\",le=\"0.1\"} 2\n"
            "lat_seconds_bucket{method=\"M\",le=\"1\"} 3\n"
            "lat_seconds_bucket{method=\"M\",le=\"10\"} 4\n"
            "lat_seconds_bucket{method=\"M\",le=\"+Inf\"} 5\n"
            "lat_seconds_sum{method=\"M\"} 55.65\n"
            "lat_seconds_count{method=\"M\"} 5\n");
}

TEST(HistogramFamilyTest, IsThreadSafeAndBoundsItsSeries) {
  HistogramFamily family({"method", "code"}, RpcLatencyBuckets(), 3);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&family] {
      for (int i = 0; i < 1000; ++i) family.Observe({"A", "OK"}, 0.002);
    });
  }
  for (std::thread& t : threads) t.join();
  family.Observe({"B", "OK"}, 1);
  family.Observe({"C", "OK"}, 1);
  family.Observe({"D", "OK"}, 1);  // Over the bound: dropped.
  EXPECT_EQ(family.dropped(), 1u);
  MetricsText text;
  text.Declare("rpc_seconds", MetricType::kHistogram, "h");
  family.AddTo("rpc_seconds", &text);
  const std::string out = text.Render();
  EXPECT_NE(out.find("rpc_seconds_count{method=\"A\",code=\"OK\"} 4000\n"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("method=\"D\""), std::string::npos);
}

TEST(ProcessMetricsTest, ReadsProcSelf) {
  MetricsText text;
  AddProcessMetrics(&text);
  const std::string out = text.Render();
  for (const char* family :
       {"process_cpu_seconds_total counter", "process_resident_memory_bytes",
        "process_start_time_seconds", "process_open_fds"}) {
    EXPECT_NE(out.find(std::string("# TYPE ") + family), std::string::npos)
        << family << "\n"
        << out;
  }
}

TEST(StageTimeTotalsTest, SplitsComputeCommAndIdle) {
  StageTimeTotals t;
  EXPECT_EQ(t.idle_seconds(), 0);
  t.AddEvent("comm", 1000000, 200000);     // 1.0 - 1.2 s
  t.AddEvent("compute", 1200000, 500000);  // 1.2 - 1.7 s
  t.AddEvent("compute", 2000000, 500000);  // 2.0 - 2.5 s
  t.AddEvent("other", 2500000, -5);
  EXPECT_DOUBLE_EQ(t.compute_seconds(), 1.0);
  EXPECT_DOUBLE_EQ(t.comm_seconds(), 0.2);
  EXPECT_DOUBLE_EQ(t.idle_seconds(), 0.3);
}

}  // namespace
}  // namespace aqueduct
