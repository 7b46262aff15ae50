// aq trace's static SVG timeline and Chrome trace flow events, apart from
// the command so that they can be tested: one row per stage replica
// (labelled by stage, replica and worker), a window of the trace from a
// start offset, a time axis with ticks at round steps (labelled in ms or s
// by the span shown), and a legend. Pure functions.
#ifndef AQUEDUCT_CLIENT_TRACE_SVG_H_
#define AQUEDUCT_CLIENT_TRACE_SVG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "proto/control.pb.h"

namespace aqueduct {

struct AxisTick {
  int64_t offset_us = 0;  // From the window's start.
  std::string label;      // Time since the trace's start: "250 ms", "1.5 s".
};

// Ticks for a window of `window_us` starting `start_us` after the trace's
// start: a step of 1, 2 or 5 times a power of ten giving at most
// `max_ticks` ticks, at multiples of the step; labels in s for a window of
// 2 s or more, else in ms.
std::vector<AxisTick> AxisTicks(int64_t start_us, int64_t window_us,
                                int max_ticks = 10);

// The window shown: [start_us, start_us + window_us) after the trace's
// start `t0` (the trace spans `span_us`). start_ms < 0 and window_ms <= 0:
// the whole trace when it spans at most `default_window_ms`, else its last
// default_window_ms. start_ms < 0 alone: the window ends at the end.
struct TimeWindow {
  int64_t start_us = 0;
  int64_t window_us = 1;
};
TimeWindow ChooseWindow(int64_t span_us, double start_ms, double window_ms,
                        double default_window_ms = 30000);

// The SVG timeline of `window` (times relative to `t0`).
std::string SvgTimeline(const v1::GetTraceResponse& trace, int64_t t0,
                        const TimeWindow& window);

// Chrome trace flow events of `e` (of process `pid`, thread `tid`): "s" at
// a send ("out"), "f" bound to the enclosing slice at a receive ("in");
// "" for an event without a flow.
std::string ChromeFlowEvent(const v1::TraceEvent& e, int pid, int tid,
                            int64_t t0);

}  // namespace aqueduct

#endif  // AQUEDUCT_CLIENT_TRACE_SVG_H_
