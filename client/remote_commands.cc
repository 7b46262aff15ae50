// The aq commands that talk to a coordinator: submit, status, watch, jobs,
// workers, cancel. Exit codes: 0 success, 1 the job failed or the input was
// bad, 2 usage error, 3 coordinator unreachable.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/commands.h"
#include "client/flags.h"
#include "coordinator/planner/profile_graph.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "proto/service.grpc.pb.h"
#include "proto/service_types.h"
#include "worker/nn/spec.h"

namespace aqueduct {
namespace {

constexpr char kRemoteUsage[] =
    "usage: aq [--coordinator HOST:PORT] <command> ...\n"
    "  submit JOB [--wait] [--profile FILE] [--output text|json]\n"
    "  status [JOB] [--output text|json]\n"
    "  watch JOB [--output text|json]\n"
    "  jobs [--output text|json]\n"
    "  workers [--output text|json]\n"
    "  cancel JOB\n"
    "  trace JOB -o FILE [--svg FILE] [--window-ms MS]\n"
    "The coordinator defaults to $AQ_COORDINATOR, else 127.0.0.1:7070.\n";

constexpr int kUnreachable = 3;

struct Common {
  std::string coordinator;
  bool json = false;
  std::vector<std::string> positional;
  bool wait = false;
  std::string profile;
  std::string out, svg;
  double window_ms = 0;
};

// Parses the flags every remote command takes.
bool ParseCommon(const std::vector<std::string>& args, Common* c,
                 std::string* error) {
  const char* env = std::getenv("AQ_COORDINATOR");
  c->coordinator = env != nullptr && *env ? env : "127.0.0.1:7070";
  for (size_t i = 0; i < args.size(); ++i) {
    std::string v;
    if (TakeValue(args, &i, "--coordinator", &v)) {
      c->coordinator = v;
    } else if (TakeValue(args, &i, "--output", &v)) {
      if (v != "text" && v != "json") {
        *error = "--output must be text or json, got '" + v + "'";
        return false;
      }
      c->json = v == "json";
    } else if (args[i] == "--wait") {
      c->wait = true;
    } else if (TakeValue(args, &i, "--profile", &v)) {
      c->profile = v;
    } else if (TakeValue(args, &i, "-o", &v) ||
               TakeValue(args, &i, "--out", &v)) {
      c->out = v;
    } else if (TakeValue(args, &i, "--svg", &v)) {
      c->svg = v;
    } else if (TakeValue(args, &i, "--window-ms", &v)) {
      if (!absl::SimpleAtod(v, &c->window_ms) || c->window_ms < 0) {
        *error = "--window-ms needs a number of milliseconds";
        return false;
      }
    } else if (!args[i].empty() && args[i][0] == '-') {
      *error = "unknown or incomplete flag '" + args[i] + "'";
      return false;
    } else {
      c->positional.push_back(args[i]);
    }
  }
  return true;
}

std::unique_ptr<v1::Coordinator::Stub> Connect(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  return v1::Coordinator::NewStub(grpc::CreateCustomChannel(
      address, grpc::InsecureChannelCredentials(), args));
}

void SetDeadline(grpc::ClientContext* ctx, int seconds) {
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::seconds(seconds));
}

// Prints the error and returns the exit code for a failed call.
int CallFailed(const grpc::Status& s, const std::string& coordinator) {
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE ||
      (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED)) {
    std::cerr << "aq: cannot reach the coordinator at " << coordinator << ": "
              << s.error_message() << "\n";
    return kUnreachable;
  }
  std::cerr << "aq: " << s.error_message() << "\n";
  return 1;
}

std::string Json(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

// "JOB_RUNNING" -> "RUNNING".
std::string StateName(JobState s) { return v1::JobState_Name(s).substr(4); }

std::string Summary(const JobStatus& j) {
  std::string line =
      absl::StrFormat("%s %s %s step %d/%d loss %.4f %.0f samples/s",
                      j.job_id(), j.name(), StateName(j.state()), j.step(),
                      j.total_steps(), j.loss(), j.samples_per_second());
  for (const StageStatus& s : j.stages()) {
    absl::StrAppend(&line,
                    absl::StrFormat(" | stage %d v%d util %.0f%% p50 %.1f ms",
                                    s.stage(), s.committed_version(),
                                    100 * s.utilization(), s.step_ms_p50()));
  }
  if (j.state() == v1::JOB_SUCCEEDED && j.test_accuracy() > 0) {
    absl::StrAppend(&line,
                    absl::StrFormat(" test accuracy %.4f", j.test_accuracy()));
  }
  if (!j.reason().empty()) absl::StrAppend(&line, ": ", j.reason());
  return line;
}

int ExitFor(const JobStatus& j) {
  return j.state() == v1::JOB_SUCCEEDED ? 0 : 1;
}

int Watch(v1::Coordinator::Stub* stub, const Common& c,
          const std::string& job) {
  grpc::ClientContext ctx;
  // A watch lasts as long as the job; a day bounds it.
  SetDeadline(&ctx, 24 * 3600);
  v1::WatchJobRequest request;
  request.set_job_id(job);
  request.set_max_rate_hz(4);
  auto reader = stub->WatchJob(&ctx, request);
  const bool tty = !c.json && isatty(STDOUT_FILENO);
  JobStatus status, last;
  bool any = false;
  while (reader->Read(&status)) {
    any = true;
    last = status;
    if (c.json) {
      std::cout << Json(status) << std::endl;
    } else if (tty) {
      const int width = 30;
      const int filled =
          status.total_steps() > 0
              ? static_cast<int>(width * status.step() / status.total_steps())
              : 0;
      std::printf("\r[%s%s] %s", std::string(filled, '#').c_str(),
                  std::string(width - filled, '.').c_str(),
                  Summary(status).c_str());
      std::fflush(stdout);
    } else {
      std::cout << Summary(status) << std::endl;
    }
  }
  if (tty && any) std::printf("\n");
  const grpc::Status s = reader->Finish();
  if (!s.ok()) return CallFailed(s, c.coordinator);
  if (!any) return 1;
  if (tty) std::cout << Summary(last) << std::endl;
  return ExitFor(last);
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out + "\"";
}

// Chrome trace JSON: one process per stage replica, a thread for compute and
// one for communication; times relative to the job's first event.
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
    }
  }
  return out + "]}\n";
}

// A static SVG timeline of the first `window_us` microseconds.
std::string SvgTimeline(const v1::GetTraceResponse& trace, int64_t t0,
                        int64_t window_us) {
  const int width = 1400, label = 190, row = 26, top = 30;
  const int rows = trace.stages_size();
  const double scale = static_cast<double>(width - label - 10) / window_us;
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
      "font-family=\"sans-serif\" font-size=\"10\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<text x=\"%d\" y=\"18\" font-size=\"12\">first %.0f ms; F forward, "
      "B backward (blue/green), step (grey), waits for peers (yellow)</text>\n",
      width, top + rows * row + 20, label, window_us / 1000.0);
  for (int p = 0; p < rows; ++p) {
    const v1::StageTrace& st = trace.stages(p);
    const int y = top + p * row;
    absl::StrAppend(
        &svg,
        absl::StrFormat("<text x=\"4\" y=\"%d\">stage %d replica %d (%s)"
                        "</text>\n",
                        y + 16, st.stage(), st.replica(), st.worker_id()));
    for (const TraceEvent& e : st.events()) {
      const int64_t start = e.start_us() - t0;
      if (start > window_us) continue;
      const double x = label + start * scale;
      const double w = std::max(1.0, e.duration_us() * scale);
      const bool compute = e.track() == "compute";
      const char* fill = !compute                       ? "#f2d45c"
                         : e.name().rfind("F ", 0) == 0 ? "#5b8def"
                         : e.name().rfind("B ", 0) == 0 ? "#4caf50"
                                                        : "#9e9e9e";
      absl::StrAppend(
          &svg,
          absl::StrFormat("<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" "
                          "height=\"%d\" fill=\"%s\" stroke=\"white\" "
                          "stroke-width=\"0.5\"><title>%s</title></rect>\n",
                          x, y + (compute ? 2 : 14), w, compute ? 12 : 8, fill,
                          e.name()));
      if (compute && w > 38) {
        absl::StrAppend(
            &svg, absl::StrFormat("<text x=\"%.1f\" y=\"%d\" fill=\"white\">"
                                  "%s</text>\n",
                                  x + 2, y + 11, e.name().substr(0, w / 5.5)));
      }
    }
  }
  return svg + "</svg>\n";
}

}  // namespace

int RemoteMain(const std::string& command,
               const std::vector<std::string>& args) {
  Common c;
  std::string error;
  if (!ParseCommon(args, &c, &error)) return UsageError(error, kRemoteUsage);
  auto stub = Connect(c.coordinator);

  if (command == "submit") {
    if (c.positional.size() != 1) {
      return UsageError("submit needs one job spec file", kRemoteUsage);
    }
    auto spec = LoadJobSpecFile(c.positional[0]);
    if (!spec.ok()) {
      std::cerr << "aq: " << spec.status().message() << "\n";
      return 1;
    }
    v1::SubmitJobRequest request;
    *request.mutable_spec() = *spec;
    if (!c.profile.empty()) {
      auto graph = ReadProfileFile(c.profile, "");
      if (!graph.ok()) {
        std::cerr << "aq: " << graph.status().message() << "\n";
        return 1;
      }
      *request.mutable_profile() = graph->ToProto();
    }
    grpc::ClientContext ctx;
    SetDeadline(&ctx, 30);
    v1::SubmitJobResponse response;
    const grpc::Status s = stub->SubmitJob(&ctx, request, &response);
    if (!s.ok()) return CallFailed(s, c.coordinator);
    if (c.json && !c.wait) {
      std::cout << Json(response) << std::endl;
    } else {
      std::cout << response.job_id() << std::endl;
    }
    return c.wait ? Watch(stub.get(), c, response.job_id()) : 0;
  }
  if (command == "watch") {
    if (c.positional.size() != 1) {
      return UsageError("watch needs a job id", kRemoteUsage);
    }
    return Watch(stub.get(), c, c.positional[0]);
  }
  if (command == "status" && c.positional.size() == 1) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, 10);
    v1::GetJobRequest request;
    request.set_job_id(c.positional[0]);
    JobStatus status;
    const grpc::Status s = stub->GetJob(&ctx, request, &status);
    if (!s.ok()) return CallFailed(s, c.coordinator);
    std::cout << (c.json ? Json(status) : Summary(status)) << std::endl;
    return 0;
  }
  if (command == "jobs" || command == "status") {
    if (!c.positional.empty()) {
      return UsageError(command + " takes no arguments", kRemoteUsage);
    }
    grpc::ClientContext ctx;
    SetDeadline(&ctx, 10);
    v1::ListJobsResponse response;
    const grpc::Status s =
        stub->ListJobs(&ctx, v1::ListJobsRequest(), &response);
    if (!s.ok()) return CallFailed(s, c.coordinator);
    if (c.json) {
      std::cout << Json(response) << std::endl;
    } else {
      for (const JobStatus& j : response.jobs()) {
        std::cout << Summary(j) << "\n";
      }
    }
    return 0;
  }
  if (command == "workers") {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, 10);
    v1::ListWorkersResponse response;
    const grpc::Status s =
        stub->ListWorkers(&ctx, v1::ListWorkersRequest(), &response);
    if (!s.ok()) return CallFailed(s, c.coordinator);
    if (c.json) {
      std::cout << Json(response) << std::endl;
    } else {
      std::cout << absl::StrFormat("%-24s %-8s %-22s %-12s %s\n", "worker",
                                   "state", "address", "GEMM GFLOP/s", "job");
      for (const WorkerStatus& w : response.workers()) {
        std::cout << absl::StrFormat(
            "%-24s %-8s %-22s %-12.1f %s\n", w.info().worker_id(),
            v1::WorkerState_Name(w.state()).substr(7), w.info().address(),
            w.info().device().gemm_gflops(),
            w.job_id().empty()
                ? "-"
                : absl::StrCat(w.job_id(), " stage ", w.stage()));
      }
    }
    return 0;
  }
  if (command == "trace") {
    if (c.positional.size() != 1 || c.out.empty()) {
      return UsageError("trace needs a job id and -o FILE", kRemoteUsage);
    }
    grpc::ClientContext ctx;
    SetDeadline(&ctx, 60);
    v1::GetTraceRequest request;
    request.set_job_id(c.positional[0]);
    v1::GetTraceResponse trace;
    const grpc::Status s = stub->GetTrace(&ctx, request, &trace);
    if (!s.ok()) return CallFailed(s, c.coordinator);
    int64_t t0 = std::numeric_limits<int64_t>::max(), t1 = 0, events = 0;
    for (const v1::StageTrace& st : trace.stages()) {
      for (const TraceEvent& e : st.events()) {
        t0 = std::min(t0, e.start_us());
        t1 = std::max(t1, e.start_us() + e.duration_us());
        ++events;
      }
    }
    if (events == 0) {
      std::cerr << "aq: job " << c.positional[0]
                << " has no trace events (one-worker jobs are not traced)\n";
      return 1;
    }
    std::ofstream(c.out) << ChromeTrace(trace, t0);
    if (!c.svg.empty()) {
      const int64_t window =
          c.window_ms > 0 ? static_cast<int64_t>(c.window_ms * 1000) : t1 - t0;
      std::ofstream(c.svg) << SvgTimeline(trace, t0,
                                          std::max<int64_t>(1, window));
    }
    std::cout << "wrote " << events << " events of " << trace.stages_size()
              << " stage replicas to " << c.out
              << (trace.dropped() > 0
                      ? absl::StrCat(" (", trace.dropped(), " dropped)")
                      : "")
              << "\n";
    return 0;
  }
  if (command == "cancel") {
    if (c.positional.size() != 1) {
      return UsageError("cancel needs a job id", kRemoteUsage);
    }
    grpc::ClientContext ctx;
    SetDeadline(&ctx, 10);
    v1::CancelJobRequest request;
    request.set_job_id(c.positional[0]);
    v1::CancelJobResponse response;
    const grpc::Status s = stub->CancelJob(&ctx, request, &response);
    if (!s.ok()) return CallFailed(s, c.coordinator);
    std::cout << c.positional[0] << " " << StateName(response.state())
              << std::endl;
    return 0;
  }
  return UsageError("unknown command '" + command + "'", kRemoteUsage);
}

}  // namespace aqueduct
