// aq logs: a job's log lines through the coordinator (StreamLogs): what its
// workers' stage threads logged and the coordinator's events about it
// (planned, running, restarts, checkpoints, the end). --follow keeps
// printing until the job ends and exits by its outcome; a follow whose
// coordinator restarts reconnects and goes on after the last line printed.
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/cli.h"
#include "client/commands.h"
#include "client/follow.h"
#include "client/remote.h"
#include "client/terminal_text.h"
#include "proto/service_types.h"

ABSL_FLAG(bool, follow, false,
          "keep printing new lines until the job ends; exit 0 if it "
          "SUCCEEDED, 1 otherwise");
ABSL_FLAG(int32_t, stage, -1, "only this stage's lines (-1: all)");
ABSL_FLAG(int64_t, since_seq, 0, "only lines numbered after this one");

namespace aqueduct {
namespace {

constexpr char kLogsDescription[] =
    "Prints a job's log: the lines its workers' stages wrote and the\n"
    "coordinator's events about it, one per line as\n"
    "  TIME LEVEL WORKER STAGE: TEXT\n"
    "(--output json: one JSON object per line instead, with its seq).\n"
    "The coordinator keeps the last 20,000 lines of each job, also across\n"
    "its restarts (in its --state_dir). --follow waits for new lines until\n"
    "the job ends, reconnecting (for up to 5 minutes) if the coordinator\n"
    "restarts, and reading them every second instead when the coordinator\n"
    "has no waiting call to spare. Control characters in a line are shown\n"
    "as \\xNN.\n";

// How long a follow tries to reach a coordinator that went away.
constexpr absl::Duration kReconnectFor = absl::Minutes(5);

std::string FormatLine(const v1::LogLine& line) {
  const std::string time = absl::FormatTime(
      "%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMillis(line.time_ms()),
      absl::UTCTimeZone());
  const std::string stage =
      line.stage() < 0 ? "-" : absl::StrCat("s", line.stage());
  // Every string of the line came from a worker or quotes one: shown
  // escaped, so a line cannot clear the terminal or forge other lines (a
  // coordinator of this version keeps workers' text escaped already; aq
  // does not rely on it).
  return absl::StrCat(time, " ", Printable(line.level()), " ",
                      Printable(line.worker()), " ", stage, ": ",
                      Printable(line.text()));
}

void Print(const v1::LogLine& line) {
  if (JsonOutput()) {
    std::cout << ProtoJson(line) << "\n";
  } else {
    std::cout << FormatLine(line) << "\n";
  }
  // A follow prints each line as it comes: into a pipe or a file stdout is
  // block-buffered, so `aq logs J --follow | grep` showed nothing until 4 KB
  // or the job's end, and a follow stopped by a signal lost its lines.
  if (absl::GetFlag(FLAGS_follow)) std::cout.flush();
}

bool Retryable(const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnavailable ||
         s.code() == absl::StatusCode::kDeadlineExceeded;
}

// Streams the lines after `*last_seq`, advancing it.
absl::Status StreamOnce(Remote& remote, const std::string& job, bool follow,
                        int64_t* last_seq) {
  v1::StreamLogsRequest request;
  request.set_job_id(job);
  request.set_since_seq(*last_seq);
  request.set_follow(follow);
  if (absl::GetFlag(FLAGS_stage) >= 0) {
    request.set_stage(absl::GetFlag(FLAGS_stage));
  }
  return remote.client().StreamLogs(request,
                                    follow ? kWatchTimeout : kTraceTimeout,
                                    [last_seq](const v1::LogLine& line) {
                                      Print(line);
                                      *last_seq = line.seq();
                                      return true;
                                    });
}

// A follow the coordinator refused (`refused`: RESOURCE_EXHAUSTED, its
// waiting calls taken): reads the new lines every second without a
// waiting call until the job ends (follow.h).
absl::Status PollLines(Remote& remote, const std::string& job,
                       const absl::Status& refused, int64_t* last_seq) {
  FollowOptions options;
  options.timeout = kWatchTimeout;
  options.poll_timeout = kTraceTimeout;
  std::cerr << "aq: the coordinator refused to follow the log of "
            << Printable(job) << " (" << Printable(refused.message())
            << "); reading it every "
            << absl::FormatDuration(options.poll_every) << std::endl;
  v1::StreamLogsRequest request;
  request.set_job_id(job);
  if (absl::GetFlag(FLAGS_stage) >= 0) {
    request.set_stage(absl::GetFlag(FLAGS_stage));
  }
  return PollJobLogs(remote.client(), request, options, Print, last_seq);
}

// --follow: streams until the job ends, reconnecting after the last line
// printed, or polling when the coordinator has no waiting call to spare;
// the exit code by the job's final state.
int Follow(Remote& remote, const std::string& job, int64_t last_seq) {
  absl::Time give_up = absl::InfiniteFuture();
  absl::Duration backoff = absl::Milliseconds(200);
  while (true) {
    const int64_t seq_before = last_seq;
    const absl::Time started = absl::Now();
    absl::Status s = StreamOnce(remote, job, /*follow=*/true, &last_seq);
    std::cout.flush();
    if (s.ok()) break;
    if (absl::IsResourceExhausted(s)) {
      s = PollLines(remote, job, s, &last_seq);
      if (!s.ok()) return remote.Failed(s);
      break;
    }
    if (!Retryable(s)) return remote.Failed(s);
    const absl::Time now = absl::Now();
    // A stream that delivered lines, or stayed up a while, was a
    // successful reconnect: a later break gets its own 5 minutes.
    if (last_seq > seq_before || now - started > absl::Seconds(10)) {
      give_up = absl::InfiniteFuture();
      backoff = absl::Milliseconds(200);
    }
    if (give_up == absl::InfiniteFuture()) {
      give_up = now + kReconnectFor;
      std::cerr << "aq: log stream of " << job << " broke (" << s.message()
                << "); reconnecting after line " << last_seq << std::endl;
    }
    if (now >= give_up) return remote.Failed(s);
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(2));
  }
  v1::GetJobRequest get;
  get.set_job_id(job);
  const auto status = remote.client().GetJob(get, kQueryTimeout);
  if (!status.ok()) return remote.Failed(status.status());
  if (status->state() == v1::JOB_SUCCEEDED) return kExitOk;
  std::cerr << "aq: job " << Printable(job) << " "
            << v1::JobState_Name(status->state()).substr(4)
            << (status->reason().empty() ? ""
                                         : ": " + Printable(status->reason()))
            << std::endl;
  return kExitFailed;
}

}  // namespace

int LogsMain(const std::vector<std::string>& args) {
  const CommandLineSpec spec = SubcommandSpec(
      "logs", "JOB [--follow] [--stage S] [--since_seq N]", kLogsDescription,
      {{"follow", "", ""},
       {"stage", "S", ""},
       {"since_seq", "N", ""},
       CoordinatorFlag(),
       OutputFlag()});
  ParsedArgs parsed;
  if (auto code = ParseSubcommand(spec, args, 1, 1, &parsed)) return *code;
  if (absl::GetFlag(FLAGS_since_seq) < 0) {
    return UsageError(spec, "--since_seq must not be negative");
  }
  const std::string& job = parsed.positional[0];
  Remote remote;
  int64_t last_seq = absl::GetFlag(FLAGS_since_seq);
  if (absl::GetFlag(FLAGS_follow)) return Follow(remote, job, last_seq);
  if (absl::Status s = StreamOnce(remote, job, /*follow=*/false, &last_seq);
      !s.ok()) {
    return remote.Failed(s);
  }
  return kExitOk;
}

}  // namespace aqueduct
