#include "client/trace_svg.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"

namespace aqueduct {

namespace {

// Text for SVG: the markup characters escaped.
std::string Escaped(const std::string& s) {
  return absl::StrReplaceAll(s, {{"&", "&amp;"}, {"<", "&lt;"}, {">", "&gt;"}});
}

// `us` in s when the window shown spans 2 s or more, else in ms.
std::string Label(int64_t us, int64_t window_us) {
  if (window_us >= 2000000) {
    return absl::StrFormat("%g s", static_cast<double>(us) / 1e6);
  }
  return absl::StrFormat("%g ms", static_cast<double>(us) / 1e3);
}

// Colour of an event's bar.
const char* Fill(const v1::TraceEvent& e) {
  if (e.track() != "compute") return "#f2d45c";
  if (e.name().rfind("F ", 0) == 0) return "#5b8def";
  if (e.name().rfind("B ", 0) == 0) return "#4caf50";
  return "#9e9e9e";
}

constexpr int kWidth = 1400, kLabel = 210, kRow = 26, kTop = 46;

std::string Legend(int y) {
  std::string out;
  const std::pair<const char*, const char*> items[] = {
      {"#5b8def", "forward"},
      {"#4caf50", "backward"},
      {"#9e9e9e", "optimizer step"},
      {"#f2d45c", "send / receive / load (waits)"}};
  int x = kLabel;
  for (const auto& [fill, what] : items) {
    absl::StrAppend(&out,
                    absl::StrFormat("<rect x=\"%d\" y=\"%d\" width=\"12\" "
                                    "height=\"10\" fill=\"%s\"/><text x=\"%d\" "
                                    "y=\"%d\">%s</text>\n",
                                    x, y, fill, x + 16, y + 9, what));
    x += 40 + 7 * static_cast<int>(std::string(what).size());
  }
  return out;
}

std::string Axis(const TimeWindow& w, double scale, int y_top, int y_axis) {
  std::string out = absl::StrFormat(
      "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333\"/>\n",
      kLabel, y_axis, kWidth - 10, y_axis);
  for (const AxisTick& t : AxisTicks(w.start_us, w.window_us)) {
    const double x = kLabel + t.offset_us * scale;
    absl::StrAppend(
        &out, absl::StrFormat(
                  "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" "
                  "stroke=\"#ddd\"/><line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" "
                  "y2=\"%d\" stroke=\"#333\"/><text x=\"%.1f\" y=\"%d\" "
                  "text-anchor=\"middle\" class=\"tick\">%s</text>\n",
                  x, y_top, x, y_axis, x, y_axis, x, y_axis + 5, x, y_axis + 17,
                  t.label));
  }
  return out;
}

void AppendRow(const v1::StageTrace& st, const TimeWindow& w, int64_t t0,
               double scale, int y, std::string* svg) {
  absl::StrAppend(
      svg, absl::StrFormat("<text x=\"4\" y=\"%d\">stage %d replica %d (%s)"
                           "</text>\n",
                           y + 16, st.stage(), st.replica(),
                           Escaped(st.worker_id().substr(0, 24))));
  for (const v1::TraceEvent& e : st.events()) {
    const int64_t start = e.start_us() - t0 - w.start_us;
    const int64_t end = start + e.duration_us();
    if (end < 0 || start > w.window_us) continue;
    const int64_t from = std::max<int64_t>(0, start);
    const int64_t to = std::min(end, w.window_us);
    const double x = kLabel + from * scale;
    const double width = std::max(1.0, (to - from) * scale);
    const bool compute = e.track() == "compute";
    absl::StrAppend(
        svg, absl::StrFormat("<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" "
                             "height=\"%d\" fill=\"%s\" stroke=\"white\" "
                             "stroke-width=\"0.5\"><title>%s</title></rect>\n",
                             x, y + (compute ? 2 : 14), width, compute ? 12 : 8,
                             Fill(e), Escaped(e.name())));
    if (compute && width > 38) {
      absl::StrAppend(
          svg, absl::StrFormat("<text x=\"%.1f\" y=\"%d\" fill=\"white\">"
                               "%s</text>\n",
                               x + 2, y + 11,
                               Escaped(e.name().substr(
                                   0, static_cast<size_t>(width / 5.5)))));
    }
  }
}

}  // namespace

std::vector<AxisTick> AxisTicks(int64_t start_us, int64_t window_us,
                                int max_ticks) {
  std::vector<AxisTick> ticks;
  if (window_us <= 0 || max_ticks < 1) return ticks;
  int64_t step = 1;
  for (int64_t decade = 1;; decade *= 10) {
    bool found = false;
    for (int64_t m : {1, 2, 5}) {
      if (window_us / (m * decade) <= max_ticks) {
        step = m * decade;
        found = true;
        break;
      }
    }
    if (found) break;
  }
  // The first multiple of the step at or after the window's start.
  int64_t t = (start_us + step - 1) / step * step;
  for (; t <= start_us + window_us; t += step) {
    ticks.push_back({t - start_us, Label(t, window_us)});
  }
  return ticks;
}

TimeWindow ChooseWindow(int64_t span_us, double start_ms, double window_ms,
                        double default_window_ms) {
  TimeWindow w;
  const int64_t span = std::max<int64_t>(1, span_us);
  // Clamped to the trace while still doubles: --window_ms 1e300 (or inf)
  // converted to int64 microseconds would overflow (undefined behaviour;
  // here it showed 1 us), and a start past the end shows the end.
  const double span_ms = static_cast<double>(span) / 1000;
  const double wanted_ms =
      std::min(window_ms > 0 ? window_ms : default_window_ms, span_ms);
  w.window_us = std::max<int64_t>(1, static_cast<int64_t>(wanted_ms * 1000));
  if (start_ms >= 0) {
    w.start_us = static_cast<int64_t>(std::min(start_ms, span_ms) * 1000);
    if (window_ms <= 0) w.window_us = std::max<int64_t>(1, span - w.start_us);
  } else {
    w.start_us = span - w.window_us;  // The last part of the trace.
  }
  return w;
}

std::string SvgTimeline(const v1::GetTraceResponse& trace, int64_t t0,
                        const TimeWindow& w) {
  const int rows = trace.stages_size();
  const double scale = static_cast<double>(kWidth - kLabel - 10) /
                       std::max<int64_t>(1, w.window_us);
  const int axis_y = kTop + rows * kRow + 4;
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
      "font-family=\"sans-serif\" font-size=\"10\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<text x=\"%d\" y=\"16\" font-size=\"12\">%s to %s after the trace's "
      "start (%s shown)</text>\n",
      kWidth, axis_y + 30, kLabel, Label(w.start_us, w.window_us),
      Label(w.start_us + w.window_us, w.window_us),
      Label(w.window_us, w.window_us));
  absl::StrAppend(&svg, Legend(24));
  absl::StrAppend(&svg, Axis(w, scale, kTop, axis_y));
  for (int p = 0; p < rows; ++p) {
    AppendRow(trace.stages(p), w, t0, scale, kTop + p * kRow, &svg);
  }
  return svg + "</svg>\n";
}

std::string ChromeFlowEvent(const v1::TraceEvent& e, int pid, int tid,
                            int64_t t0) {
  if (e.flow_id() == 0 || (e.flow() != "out" && e.flow() != "in")) return "";
  const bool out = e.flow() == "out";
  // Inside the event's slice: the start of a send, the end of a receive.
  const int64_t ts =
      e.start_us() - t0 + (out ? 0 : std::max<int64_t>(0, e.duration_us() - 1));
  return absl::StrCat(
      "{\"ph\":\"", out ? "s" : "f", "\"", out ? "" : ",\"bp\":\"e\"",
      ",\"cat\":\"transfer\",\"name\":\"transfer\",\"id\":", e.flow_id(),
      ",\"pid\":", pid, ",\"tid\":", tid, ",\"ts\":", ts, "}");
}

}  // namespace aqueduct
