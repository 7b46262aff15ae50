#include "client/trace_svg.h"

#include <limits>

#include "gtest/gtest.h"

namespace aqueduct {
namespace {

TEST(AxisTicksTest, RoundStepsInMillisecondsForShortWindows) {
  // 0..100 ms: a 10 ms step, 11 ticks from 0.
  std::vector<AxisTick> ticks = AxisTicks(0, 100000);
  ASSERT_EQ(ticks.size(), 11u);
  EXPECT_EQ(ticks[0].label, "0 ms");
  EXPECT_EQ(ticks[1].offset_us, 10000);
  EXPECT_EQ(ticks[1].label, "10 ms");
  EXPECT_EQ(ticks[10].label, "100 ms");
  // 0..35 ms: a 5 ms step.
  ticks = AxisTicks(0, 35000);
  ASSERT_EQ(ticks.size(), 8u);
  EXPECT_EQ(ticks[7].label, "35 ms");
}

TEST(AxisTicksTest, SecondsForLongWindowsFromAnOffset) {
  // 95 s to 155 s of a long job: a 10 s step at multiples of 10 s.
  std::vector<AxisTick> ticks = AxisTicks(95000000, 60000000);
  ASSERT_EQ(ticks.size(), 6u);
  EXPECT_EQ(ticks[0].offset_us, 5000000);
  EXPECT_EQ(ticks[0].label, "100 s");
  EXPECT_EQ(ticks[5].label, "150 s");
  for (const AxisTick& t : ticks) {
    EXPECT_GE(t.offset_us, 0);
    EXPECT_LE(t.offset_us, 60000000);
  }
  // A 3 s window: half-second labels in s.
  ticks = AxisTicks(0, 3000000);
  EXPECT_EQ(ticks[1].label, "0.5 s");
  EXPECT_TRUE(AxisTicks(0, 0).empty());
}

TEST(ChooseWindowTest, LastPartOfALongTraceByDefault) {
  TimeWindow w = ChooseWindow(10000000, -1, 0, 30000);  // 10 s: all of it.
  EXPECT_EQ(w.start_us, 0);
  EXPECT_EQ(w.window_us, 10000000);
  w = ChooseWindow(300000000, -1, 0, 30000);  // 5 min: the last 30 s.
  EXPECT_EQ(w.start_us, 270000000);
  EXPECT_EQ(w.window_us, 30000000);
  w = ChooseWindow(300000000, 60000, 2000, 30000);  // --start_ms --window_ms
  EXPECT_EQ(w.start_us, 60000000);
  EXPECT_EQ(w.window_us, 2000000);
  w = ChooseWindow(300000000, 100000, 0, 30000);  // From 100 s to the end.
  EXPECT_EQ(w.window_us, 200000000);
}

TEST(ChooseWindowTest, HugeFlagsAreClampedToTheTrace) {
  // --window_ms 1e308 or inf: the whole trace (it once overflowed int64 and
  // showed 1 us).
  TimeWindow w = ChooseWindow(7018210, -1, 1e308, 30000);
  EXPECT_EQ(w.start_us, 0);
  EXPECT_EQ(w.window_us, 7018210);
  w = ChooseWindow(7018210, -1, std::numeric_limits<double>::infinity());
  EXPECT_EQ(w.start_us, 0);
  EXPECT_EQ(w.window_us, 7018210);
  // A start past the end (or 1e300 ms): the trace's end.
  w = ChooseWindow(7018210, 1e300, 0, 30000);
  EXPECT_EQ(w.start_us, 7018210);
  EXPECT_EQ(w.window_us, 1);
  w = ChooseWindow(7018210, 99999999, 200, 30000);
  EXPECT_EQ(w.start_us, 7018210);
  EXPECT_EQ(w.window_us, 200000);
}

v1::GetTraceResponse Trace() {
  v1::GetTraceResponse trace;
  v1::StageTrace* st = trace.add_stages();
  st->set_worker_id("w<0>");
  st->set_stage(0);
  for (int i = 0; i < 100; ++i) {
    v1::TraceEvent* e = st->add_events();
    e->set_name(i % 2 == 0 ? "F mb=1" : "send act mb=1");
    e->set_track(i % 2 == 0 ? "compute" : "comm");
    e->set_start_us(1000000 + i * 1000000);
    e->set_duration_us(500000);
  }
  return trace;
}

TEST(SvgTimelineTest, HasAxisLabelsRowsAndLegendAndOnlyTheWindow) {
  const v1::GetTraceResponse trace = Trace();
  const std::string svg = SvgTimeline(trace, 1000000, {90000000, 10000000});
  EXPECT_NE(svg.find("stage 0 replica 0 (w&lt;0&gt;)"), std::string::npos);
  EXPECT_NE(svg.find(">90 s</text>"), std::string::npos);
  EXPECT_NE(svg.find(">100 s</text>"), std::string::npos);
  EXPECT_NE(svg.find("forward"), std::string::npos);
  EXPECT_NE(svg.find("backward"), std::string::npos);
  // Events 90..99 overlap the window, the 90 before it do not.
  size_t rects = 0;
  for (size_t at = svg.find("<title>"); at != std::string::npos;
       at = svg.find("<title>", at + 1)) {
    ++rects;
  }
  EXPECT_EQ(rects, 10u);
}

TEST(ChromeFlowEventTest, SendStartsAndReceiveEndsAFlow) {
  v1::TraceEvent send;
  send.set_start_us(5000);
  send.set_duration_us(1);
  send.set_flow_id(42);
  send.set_flow("out");
  EXPECT_EQ(ChromeFlowEvent(send, 0, 2, 1000),
            "{\"ph\":\"s\",\"cat\":\"transfer\",\"name\":\"transfer\","
            "\"id\":42,\"pid\":0,\"tid\":2,\"ts\":4000}");
  v1::TraceEvent recv = send;
  recv.set_flow("in");
  recv.set_start_us(5000);
  recv.set_duration_us(300);
  EXPECT_EQ(ChromeFlowEvent(recv, 1, 2, 1000),
            "{\"ph\":\"f\",\"bp\":\"e\",\"cat\":\"transfer\",\"name\":"
            "\"transfer\",\"id\":42,\"pid\":1,\"tid\":2,\"ts\":4299}");
  EXPECT_EQ(ChromeFlowEvent(v1::TraceEvent(), 0, 1, 0), "");
}

}  // namespace
}  // namespace aqueduct
