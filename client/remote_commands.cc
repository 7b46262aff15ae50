// The aq commands that talk to a coordinator about jobs and workers: submit,
// status, watch, jobs, workers, cancel. With --output json each prints
// exactly one JSON document on stdout; progress and other human text go to
// stderr then.
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cli.h"
#include "client/commands.h"
#include "client/follow.h"
#include "client/list_pages.h"
#include "client/progress.h"
#include "client/remote.h"
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
    "Lists the coordinator's jobs, oldest first, with each job's owner when\n"
    "the coordinator authenticates its users.\n";
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

absl::StatusOr<v1::SubmitJobRequest> SubmitRequest(const std::string& path) {
  v1::SubmitJobRequest request;
  ASSIGN_OR_RETURN(*request.mutable_spec(), LoadJobSpecFile(path));
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

// "job-1 mlp RUNNING ... | owner alice": the summary, and the owner when
// jobs have one (authentication on).
std::string JobLine(const JobStatus& job) {
  std::string line = JobSummary(job);
  if (!job.owner().empty()) {
    absl::StrAppend(&line, " | owner ", Printable(job.owner()));
  }
  return line;
}

int PrintJobList(const v1::ListJobsResponse& response) {
  if (JsonOutput()) {
    std::cout << (response.jobs().empty() ? "{\"jobs\":[]}"
                                          : ProtoJson(response))
              << std::endl;
  } else if (response.jobs().empty()) {
    std::cout << "no jobs" << std::endl;
  } else {
    for (const JobStatus& j : response.jobs()) std::cout << JobLine(j) << "\n";
  }
  return kExitOk;
}

int ListJobs() {
  Remote remote;
  const auto response =
      FetchAllPages<v1::ListJobsRequest, v1::ListJobsResponse>(
          v1::ListJobsRequest(), kJobsPageSize, "jobs",
          [&remote](const v1::ListJobsRequest& request) {
            return remote.client().ListJobs(request, kQueryTimeout);
          },
          std::cerr);
  if (!response.ok()) return remote.Failed(response.status());
  return PrintJobList(*response);
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
       CoordinatorFlag(),
       OutputFlag()});
  ParsedArgs parsed;
  if (auto code = ParseSubcommand(spec, args, 1, 1, &parsed)) return *code;
  const auto request = SubmitRequest(parsed.positional[0]);
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
