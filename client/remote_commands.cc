// The aq commands that talk to a coordinator about jobs and workers: submit,
// status, watch, jobs, workers, cancel. With --output json each prints
// exactly one JSON document on stdout; progress and other human text go to
// stderr then.
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cli.h"
#include "client/commands.h"
#include "client/follow.h"
#include "client/list_pages.h"
#include "client/progress.h"
#include "client/remote.h"
#include "client/spec_overrides.h"
#include "client/terminal_text.h"
#include "common/status.h"
#include "coordinator/planner/profile_graph.h"
#include "proto/service_types.h"
#include "worker/nn/spec.h"

ABSL_FLAG(bool, wait, false,
          "follow the job until it ends, as aq watch does; the exit code is "
          "then the job's");
ABSL_FLAG(std::string, resume, "",
          "start from a committed checkpoint: a job id (its latest), a "
          "checkpoint's version directory or its manifest.json (aq "
          "checkpoints JOB lists them)");

ABSL_FLAG(std::vector<std::string>, set, {},
          "override a scalar field of the spec, by its dotted path: --set "
          "max_steps=100 --set pipeline.workers=2 (repeatable; a value "
          "cannot hold a comma)");
ABSL_FLAG(std::string, name, "", "the job's name, overriding the spec's");
ABSL_FLAG(int32_t, priority, 0,
          "the job's place in the queue, overriding the spec's (higher "
          "first; a user credential may set at most the coordinator's "
          "--max_user_priority)");
// Shared with aq train-local and aq plan.
ABSL_DECLARE_FLAG(int64_t, max_steps);
ABSL_DECLARE_FLAG(std::vector<std::string>, workers);

ABSL_FLAG(std::string, checkpoint_dir, "",
          "checkpoint into this directory (absolute; every worker and the "
          "coordinator must be able to write it), overriding the spec's "
          "checkpoint.dir");
ABSL_FLAG(int64_t, checkpoint_every, 0,
          "a checkpoint every N optimizer steps, overriding the spec's "
          "checkpoint.every_steps");

namespace aqueduct {
namespace {

constexpr char kSubmitDescription[] =
    "Submits a job spec (text proto or JSON, proto/job.proto) to the\n"
    "coordinator and prints its id. With --wait, follows it as aq watch\n"
    "does and exits 0 only if it succeeds. With --resume, the job starts\n"
    "from a committed checkpoint of the same model (the number of workers\n"
    "may differ).\n";
constexpr char kStatusDescription[] =
    "Prints a job's status (every job's without JOB): the summary, then\n"
    "its trained model, latest checkpoint, the checkpoint it resumed from\n"
    "and its restarts, when it has them.\n";
constexpr char kWatchDescription[] =
    "Follows a job until it ends: one line redrawn in place on a terminal,\n"
    "plain lines otherwise; with --output json, the final status as one\n"
    "JSON document (progress on stderr when it is a terminal). When the\n"
    "coordinator has no waiting call to spare, asks for the job's status\n"
    "every second instead. Exits 0 if the job succeeds, 1 if it fails or\n"
    "is cancelled.\n";
constexpr char kJobsDescription[] =
    "Lists the coordinator's jobs, oldest first, a row each (whole ids, to\n"
    "copy), with each job's owner when the coordinator authenticates its\n"
    "users; aq status JOB has a job's stages.\n";
constexpr char kQueueDescription[] =
    "Lists the jobs waiting for workers in the order they will start\n"
    "(higher priority first, then first come), with what each waits for.\n";
constexpr char kWorkersDescription[] =
    "Lists the workers registered with the coordinator.\n";
constexpr char kCancelDescription[] = "Cancels a job.\n";

// "JOB_RUNNING" -> "RUNNING".
std::string StateName(JobState s) { return v1::JobState_Name(s).substr(4); }

// Follows `job_id` until it ends: a watch, or GetJob every second when the
// coordinator has no waiting call to spare (follow.h). Prints its final
// status (the JSON document with --output json); returns 0 if it
// succeeded, else 1 (3 if the coordinator cannot be reached).
int FollowJob(Remote& remote, const std::string& job_id) {
  const bool json = JsonOutput();
  ProgressDisplay display(json ? stderr : stdout, /*plain_lines=*/!json);
  FollowOptions options;
  options.timeout = kWatchTimeout;
  options.poll_timeout = kQueryTimeout;
  options.on_polling = [&](const absl::Status& refused) {
    display.Finish();
    std::cerr << "aq: the coordinator refused a watch of " << Printable(job_id)
              << " (" << Printable(refused.message()) << "); polling it every "
              << absl::FormatDuration(options.poll_every) << std::endl;
  };
  JobStatus last;
  bool any = false;
  const absl::Status s = FollowJobStatus(remote.client(), job_id, options,
                                         [&](const JobStatus& status) {
                                           last = status;
                                           any = true;
                                           display.Update(status);
                                         });
  display.Finish();
  if (!s.ok()) return remote.Failed(s);
  if (!any) return Fail("the coordinator sent no status for job " + job_id);
  if (json) {
    std::cout << ProtoJson(last) << std::endl;
  } else if (display.in_place()) {
    std::cout << JobSummary(last) << std::endl;
  }
  return last.state() == v1::JOB_SUCCEEDED ? kExitOk : kExitFailed;
}

absl::StatusOr<v1::SubmitJobRequest> SubmitRequest(const std::string& path,
                                                   const ParsedArgs& parsed) {
  v1::SubmitJobRequest request;
  ASSIGN_OR_RETURN(*request.mutable_spec(), LoadJobSpecFile(path));
  JobSpec* spec = request.mutable_spec();
  if (parsed.given.count("max_steps") != 0) {
    spec->set_max_steps(absl::GetFlag(FLAGS_max_steps));
  }
  if (parsed.given.count("workers") != 0) {
    const std::vector<std::string> workers = absl::GetFlag(FLAGS_workers);
    int n = 0;
    if (workers.size() != 1 || !absl::SimpleAtoi(workers[0], &n) || n < 1) {
      return absl::InvalidArgumentError(
          "--workers needs one positive integer (pipeline.workers)");
    }
    spec->mutable_pipeline()->set_workers(n);
  }
  if (parsed.given.count("priority") != 0) {
    spec->set_priority(absl::GetFlag(FLAGS_priority));
  }
  RETURN_IF_ERROR(ApplyOverrideFlags(parsed, spec));
  const std::string profile = absl::GetFlag(FLAGS_profile);
  if (!profile.empty()) {
    ASSIGN_OR_RETURN(ProfileGraph graph, ReadProfileFile(profile, ""));
    *request.mutable_profile() = graph.ToProto();
  }
  request.set_resume(absl::GetFlag(FLAGS_resume));
  v1::CheckpointSpec* checkpoint = request.mutable_spec()->mutable_checkpoint();
  if (!absl::GetFlag(FLAGS_checkpoint_dir).empty()) {
    checkpoint->set_dir(absl::GetFlag(FLAGS_checkpoint_dir));
  }
  if (absl::GetFlag(FLAGS_checkpoint_every) != 0) {
    checkpoint->set_every_steps(absl::GetFlag(FLAGS_checkpoint_every));
  }
  return request;
}

// Page sizes aq asks for: the most the coordinator gives.
constexpr int kJobsPageSize = 1000;
constexpr int kWorkersPageSize = 5000;

// "3m12s", "2h05m", "4d03h": how long ago `ms` (milliseconds since the
// epoch) was; "-" when unknown.
std::string Age(int64_t ms) {
  if (ms <= 0) return "-";
  const int64_t s =
      std::max<int64_t>(0, absl::ToUnixMillis(absl::Now()) - ms) / 1000;
  if (s < 60) return absl::StrCat(s, "s");
  if (s < 3600) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  if (s < 86400) return absl::StrFormat("%dh%02dm", s / 3600, s % 3600 / 60);
  return absl::StrFormat("%dd%02dh", s / 86400, s % 86400 / 3600);
}

// A name cut to `width` columns (names come from users: escaped).
std::string Cell(const std::string& text, size_t width) {
  std::string shown = Printable(text);
  if (shown.size() > width) shown = shown.substr(0, width - 1) + "~";
  return shown.empty() ? "-" : shown;
}

// One row a job: its whole id (to copy), name, state, progress, loss and
// age, and its owner when jobs have one (authentication on); per-stage
// detail is aq status JOB's.
void PrintJobTable(const v1::ListJobsResponse& response) {
  bool owners = false;
  for (const JobStatus& j : response.jobs()) owners |= !j.owner().empty();
  auto row = [owners](const std::string& id, const std::string& name,
                      const std::string& state, const std::string& steps,
                      const std::string& loss, const std::string& age,
                      const std::string& owner) {
    std::string line =
        absl::StrFormat("%-40s %-20s %-10s %-13s %-8s %-8s %s", id, name, state,
                        steps, loss, age, owners ? owner : "");
    absl::StripTrailingAsciiWhitespace(&line);
    std::cout << line << "\n";
  };
  row("ID", "NAME", "STATE", "STEP/TOTAL", "LOSS", "AGE", "OWNER");
  for (const JobStatus& j : response.jobs()) {
    const std::string steps = j.total_steps() > 0
                                  ? absl::StrCat(j.step(), "/", j.total_steps())
                                  : absl::StrCat(j.step());
    const std::string loss =
        j.step() > 0 ? absl::StrFormat("%.4f", j.loss()) : std::string("-");
    row(Printable(j.job_id()), Cell(j.name(), 20), StateName(j.state()), steps,
        loss, Age(j.submitted_ms()), Cell(j.owner(), 24));
  }
}

int PrintJobList(const v1::ListJobsResponse& response) {
  if (JsonOutput()) {
    std::cout << (response.jobs().empty() ? "{\"jobs\":[]}"
                                          : ProtoJson(response))
              << std::endl;
  } else if (response.jobs().empty()) {
    std::cout << "no jobs" << std::endl;
  } else {
    PrintJobTable(response);
  }
  return kExitOk;
}

// The pending jobs in the queue's order: position, id, name, priority,
// owner, time waited and what each waits for.
int PrintQueue(const v1::ListJobsResponse& response) {
  std::vector<const JobStatus*> pending;
  for (const JobStatus& j : response.jobs()) {
    if (j.state() == v1::JOB_PENDING) pending.push_back(&j);
  }
  std::stable_sort(pending.begin(), pending.end(),
                   [](const JobStatus* a, const JobStatus* b) {
                     return a->queue_position() < b->queue_position();
                   });
  if (JsonOutput()) {
    v1::ListJobsResponse queue;
    for (const JobStatus* j : pending) *queue.add_jobs() = *j;
    std::cout << (pending.empty() ? "{\"jobs\":[]}" : ProtoJson(queue))
              << std::endl;
    return kExitOk;
  }
  if (pending.empty()) {
    std::cout << "no jobs are waiting" << std::endl;
    return kExitOk;
  }
  static constexpr char kRow[] = "%-4s %-40s %-20s %-8s %-16s %-8s %s\n";
  std::cout << absl::StrFormat(kRow, "POS", "ID", "NAME", "PRIORITY", "OWNER",
                               "WAITED", "WAITING FOR");
  for (const JobStatus* j : pending) {
    std::cout << absl::StrFormat(
        kRow, absl::StrCat(j->queue_position()), Printable(j->job_id()),
        Cell(j->name(), 20), absl::StrCat(j->priority()), Cell(j->owner(), 16),
        Age(j->submitted_ms()), Printable(j->waiting_for()));
  }
  return kExitOk;
}

// Every job, a page at a time; `print` shows them.
int ListJobs(int (*print)(const v1::ListJobsResponse&) = PrintJobList) {
  Remote remote;
  const auto response =
      FetchAllPages<v1::ListJobsRequest, v1::ListJobsResponse>(
          v1::ListJobsRequest(), kJobsPageSize, "jobs",
          [&remote](const v1::ListJobsRequest& request) {
            return remote.client().ListJobs(request, kQueryTimeout);
          },
          std::cerr);
  if (!response.ok()) return remote.Failed(response.status());
  return print(*response);
}

void PrintWorkerTable(const v1::ListWorkersResponse& response) {
  std::cout << absl::StrFormat("%-24s %-8s %-22s %-12s %s\n", "worker", "state",
                               "address", "GEMM GFLOP/s", "job");
  for (const WorkerStatus& w : response.workers()) {
    // Ids and addresses are checked at registration; shown escaped anyway.
    std::cout << absl::StrFormat(
        "%-24s %-8s %-22s %-12.1f %s\n", Printable(w.info().worker_id()),
        v1::WorkerState_Name(w.state()).substr(7),
        Printable(w.info().address()), w.info().device().gemm_gflops(),
        w.job_id().empty()
            ? "-"
            : absl::StrCat(Printable(w.job_id()), " stage ", w.stage()));
  }
}

}  // namespace

absl::Status ApplyOverrideFlags(const ParsedArgs& parsed, JobSpec* spec) {
  if (parsed.given.count("name") != 0)
    spec->set_name(absl::GetFlag(FLAGS_name));
  return ApplySpecOverrides(absl::GetFlag(FLAGS_set), spec);
}

int SubmitMain(const std::vector<std::string>& args) {
  const CommandLineSpec spec = SubcommandSpec(
      "submit", "JOB_SPEC [flags]", kSubmitDescription,
      {{"wait", "", ""},
       {"profile", "FILE",
        "plan with this profile (aq profile) instead of profiling the model "
        "on a worker"},
       {"resume", "JOB|CHECKPOINT", ""},
       {"checkpoint_dir", "DIR", ""},
       {"checkpoint_every", "N", ""},
       {"set", "PATH=VALUE", ""},
       {"name", "NAME", ""},
       {"max_steps", "N", "stop after N steps (the spec's max_steps)"},
       {"workers", "N", "the workers to ask for (pipeline.workers)"},
       {"priority", "P", ""},
       CoordinatorFlag(),
       OutputFlag()});
  ParsedArgs parsed;
  if (auto code = ParseSubcommand(spec, args, 1, 1, &parsed)) return *code;
  const auto request = SubmitRequest(parsed.positional[0], parsed);
  if (!request.ok()) return Fail(std::string(request.status().message()));
  Remote remote;
  const auto response = remote.client().SubmitJob(*request, kSubmitTimeout);
  if (!response.ok()) return remote.Failed(response.status());
  const bool wait = absl::GetFlag(FLAGS_wait);
  if (!JsonOutput()) {
    std::cout << Printable(response->job_id()) << std::endl;
  } else if (wait) {
    // The one JSON document is the final status; the id goes to stderr.
    std::cerr << "aq: submitted " << Printable(response->job_id()) << "\n";
  } else {
    std::cout << ProtoJson(*response) << std::endl;
  }
  return wait ? FollowJob(remote, response->job_id()) : kExitOk;
}

int StatusMain(const std::vector<std::string>& args) {
  const CommandLineSpec spec =
      SubcommandSpec("status", "[JOB] [flags]", kStatusDescription,
                     {CoordinatorFlag(), OutputFlag()});
  ParsedArgs parsed;
  if (auto code = ParseSubcommand(spec, args, 0, 1, &parsed)) return *code;
  if (parsed.positional.empty()) return ListJobs();
  Remote remote;
  v1::GetJobRequest request;
  request.set_job_id(parsed.positional[0]);
  const auto status = remote.client().GetJob(request, kQueryTimeout);
  if (!status.ok()) return remote.Failed(status.status());
  if (JsonOutput()) {
    std::cout << ProtoJson(*status) << std::endl;
  } else {
    std::cout << JobSummary(*status) << "\n";
    if (!status->owner().empty())
      std::cout << "owner: " << Printable(status->owner()) << "\n";
    std::cout << JobDetails(*status) << std::flush;
  }
  return kExitOk;
}

int WatchMain(const std::vector<std::string>& args) {
  const CommandLineSpec spec =
      SubcommandSpec("watch", "JOB [flags]", kWatchDescription,
                     {CoordinatorFlag(), OutputFlag()});
  ParsedArgs parsed;
  if (auto code = ParseSubcommand(spec, args, 1, 1, &parsed)) return *code;
  Remote remote;
  return FollowJob(remote, parsed.positional[0]);
}

int JobsMain(const std::vector<std::string>& args) {
  const CommandLineSpec spec = SubcommandSpec(
      "jobs", "[flags]", kJobsDescription, {CoordinatorFlag(), OutputFlag()});
  ParsedArgs parsed;
  if (auto code = ParseSubcommand(spec, args, 0, 0, &parsed)) return *code;
  return ListJobs();
}

int QueueMain(const std::vector<std::string>& args) {
  const CommandLineSpec spec = SubcommandSpec(
      "queue", "[flags]", kQueueDescription, {CoordinatorFlag(), OutputFlag()});
  ParsedArgs parsed;
  if (auto code = ParseSubcommand(spec, args, 0, 0, &parsed)) return *code;
  return ListJobs(PrintQueue);
}

int WorkersMain(const std::vector<std::string>& args) {
  const CommandLineSpec spec =
      SubcommandSpec("workers", "[flags]", kWorkersDescription,
                     {CoordinatorFlag(), OutputFlag()});
  ParsedArgs parsed;
  if (auto code = ParseSubcommand(spec, args, 0, 0, &parsed)) return *code;
  Remote remote;
  const auto response =
      FetchAllPages<v1::ListWorkersRequest, v1::ListWorkersResponse>(
          v1::ListWorkersRequest(), kWorkersPageSize, "workers",
          [&remote](const v1::ListWorkersRequest& request) {
            return remote.client().ListWorkers(request, kQueryTimeout);
          },
          std::cerr);
  if (!response.ok()) return remote.Failed(response.status());
  if (JsonOutput()) {
    std::cout << (response->workers().empty() ? "{\"workers\":[]}"
                                              : ProtoJson(*response))
              << std::endl;
  } else if (response->workers().empty()) {
    std::cout << "no workers registered" << std::endl;
  } else {
    PrintWorkerTable(*response);
  }
  return kExitOk;
}

int CancelMain(const std::vector<std::string>& args) {
  const CommandLineSpec spec =
      SubcommandSpec("cancel", "JOB [flags]", kCancelDescription,
                     {CoordinatorFlag(), OutputFlag()});
  ParsedArgs parsed;
  if (auto code = ParseSubcommand(spec, args, 1, 1, &parsed)) return *code;
  const std::string& job = parsed.positional[0];
  Remote remote;
  v1::CancelJobRequest request;
  request.set_job_id(job);
  const auto response = remote.client().CancelJob(request, kQueryTimeout);
  if (!response.ok()) return remote.Failed(response.status());
  if (JsonOutput()) {
    std::cout << "{\"job_id\":" << JsonString(job) << ",\"state\":\""
              << v1::JobState_Name(response->state()) << "\"}" << std::endl;
  } else {
    std::cout << Printable(job) << " " << StateName(response->state())
              << std::endl;
  }
  return kExitOk;
}

}  // namespace aqueduct
