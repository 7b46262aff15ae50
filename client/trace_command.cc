// aq trace: a job's executed schedule from the coordinator, as Chrome trace
// JSON (Perfetto, chrome://tracing) and optionally a static SVG timeline.
// Every file write is checked; an unwritable path fails before the call.
#include <algorithm>
#include <cstdint>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cli.h"
#include "client/commands.h"
#include "client/remote.h"
#include "client/trace_svg.h"
#include "proto/service_types.h"

ABSL_FLAG(std::string, svg, "",
          "also write a static SVG timeline here (a time axis, one row per "
          "stage replica, a legend)");
ABSL_FLAG(double, window_ms, 0,
          "milliseconds the SVG timeline shows (default: the whole trace, "
          "or its last 30 s when it is longer)");
ABSL_FLAG(double, start_ms, -1,
          "where the SVG timeline starts, in ms after the trace's start "
          "(default: so that the window ends at the trace's end)");

namespace aqueduct {
namespace {

constexpr char kTraceDescription[] =
    "Writes the schedule a pipeline job executed (every stage replica's\n"
    "forward, backward, step and communication spans) as Chrome trace JSON\n"
    "for Perfetto or chrome://tracing. One-worker jobs are not traced.\n";

// Chrome trace JSON: one process per stage replica, a thread for compute and
// one for communication; times relative to the job's first event. Each
// send and its receive are joined by a flow event pair ("s" and "f" with
// the same id), drawn as an arrow.
std::string ChromeTrace(const v1::GetTraceResponse& trace, int64_t t0) {
  std::string out = "{\"traceEvents\":[";
  bool first = true;
  auto emit = [&](const std::string& e) {
    absl::StrAppend(&out, first ? "" : ",\n", e);
    first = false;
  };
  for (int p = 0; p < trace.stages_size(); ++p) {
    const v1::StageTrace& st = trace.stages(p);
    emit(absl::StrCat(
        "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":", p,
        ",\"args\":{\"name\":",
        JsonString(absl::StrCat("stage ", st.stage(), " replica ", st.replica(),
                                " (", st.worker_id(), ")")),
        "}}"));
    emit(absl::StrCat("{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":",
                      p, ",\"args\":{\"sort_index\":", p, "}}"));
    for (int tid : {1, 2}) {
      emit(absl::StrCat("{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":", p,
                        ",\"tid\":", tid, ",\"args\":{\"name\":\"",
                        tid == 1 ? "compute" : "send/recv", "\"}}"));
    }
    for (const TraceEvent& e : st.events()) {
      emit(absl::StrCat(
          "{\"ph\":\"X\",\"name\":", JsonString(e.name()), ",\"pid\":", p,
          ",\"tid\":", e.track() == "compute" ? 1 : 2,
          ",\"ts\":", e.start_us() - t0, ",\"dur\":", e.duration_us(), "}"));
      const std::string flow =
          ChromeFlowEvent(e, p, e.track() == "compute" ? 1 : 2, t0);
      if (!flow.empty()) emit(flow);
    }
  }
  return out + "]}\n";
}

// The trace's time span and its number of events.
struct TraceExtent {
  int64_t t0 = std::numeric_limits<int64_t>::max();
  int64_t t1 = 0;
  int64_t events = 0;
};

TraceExtent Extent(const v1::GetTraceResponse& trace) {
  TraceExtent e;
  for (const v1::StageTrace& st : trace.stages()) {
    for (const TraceEvent& ev : st.events()) {
      e.t0 = std::min(e.t0, ev.start_us());
      e.t1 = std::max(e.t1, ev.start_us() + ev.duration_us());
      ++e.events;
    }
  }
  return e;
}

absl::Status WriteTrace(const v1::GetTraceResponse& trace,
                        const TraceExtent& e) {
  const std::string out = absl::GetFlag(FLAGS_output_file);
  if (absl::Status s = WriteTextFile(out, ChromeTrace(trace, e.t0)); !s.ok()) {
    return s;
  }
  const std::string svg = absl::GetFlag(FLAGS_svg);
  if (svg.empty()) return absl::OkStatus();
  const TimeWindow window =
      ChooseWindow(e.t1 - e.t0, absl::GetFlag(FLAGS_start_ms),
                   absl::GetFlag(FLAGS_window_ms));
  return WriteTextFile(svg, SvgTimeline(trace, e.t0, window));
}

void PrintWritten(const std::string& job, const v1::GetTraceResponse& trace,
                  const TraceExtent& e) {
  const std::string out = absl::GetFlag(FLAGS_output_file);
  if (JsonOutput()) {
    std::cout << "{\"job_id\":" << JsonString(job)
              << ",\"file\":" << JsonString(out)
              << ",\"svg\":" << JsonString(absl::GetFlag(FLAGS_svg))
              << ",\"events\":" << e.events
              << ",\"stage_replicas\":" << trace.stages_size()
              << ",\"dropped\":" << trace.dropped() << "}" << std::endl;
    return;
  }
  std::cout << "wrote " << e.events << " events of " << trace.stages_size()
            << " stage replicas to " << out
            << (trace.dropped() > 0
                    ? absl::StrCat(" (", trace.dropped(), " dropped)")
                    : "")
            << "\n";
}

// The output paths must be writable before the trace is fetched.
absl::Status CheckOutputs() {
  if (absl::Status s = CheckWritable(absl::GetFlag(FLAGS_output_file));
      !s.ok()) {
    return s;
  }
  const std::string svg = absl::GetFlag(FLAGS_svg);
  return svg.empty() ? absl::OkStatus() : CheckWritable(svg);
}

CommandLineSpec TraceSpec() {
  CommandLineSpec spec =
      SubcommandSpec("trace", "JOB -o FILE [flags]", kTraceDescription,
                     {{"output_file", "FILE",
                       "where to write the Chrome trace JSON (required)"},
                      {"svg", "FILE", ""},
                      {"window_ms", "MS", ""},
                      {"start_ms", "MS", ""},
                      CoordinatorFlag(),
                      OutputFlag()});
  spec.aliases = {{"o", "output_file"}, {"out", "output_file"}};
  return spec;
}

}  // namespace

int TraceMain(const std::vector<std::string>& args) {
  const CommandLineSpec spec = TraceSpec();
  ParsedArgs parsed;
  if (auto code = ParseSubcommand(spec, args, 1, 1, &parsed)) return *code;
  if (absl::GetFlag(FLAGS_output_file).empty()) {
    return UsageError(spec, "trace needs -o FILE");
  }
  if (absl::GetFlag(FLAGS_window_ms) < 0) {
    return UsageError(spec, "--window_ms must not be negative");
  }
  if (absl::Status s = CheckOutputs(); !s.ok()) {
    return Fail(std::string(s.message()));
  }
  const std::string& job = parsed.positional[0];
  Remote remote;
  v1::GetTraceRequest request;
  request.set_job_id(job);
  const auto trace = remote.client().GetTrace(request, kTraceTimeout);
  if (!trace.ok()) return remote.Failed(trace.status());
  const TraceExtent extent = Extent(*trace);
  if (extent.events == 0) {
    return Fail("job " + job +
                " has no trace events (one-worker jobs are not traced)");
  }
  if (absl::Status s = WriteTrace(*trace, extent); !s.ok()) {
    return Fail(std::string(s.message()));
  }
  PrintWritten(job, *trace, extent);
  return kExitOk;
}

}  // namespace aqueduct
