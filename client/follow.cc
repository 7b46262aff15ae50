#include "client/follow.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace aqueduct {

namespace {

bool IsFinal(v1::JobState state) {
  return state == v1::JOB_SUCCEEDED || state == v1::JOB_FAILED ||
         state == v1::JOB_CANCELLED;
}

absl::Status PollDeadline(const std::string& job_id, absl::Duration timeout) {
  return absl::DeadlineExceededError(
      absl::StrCat("job ", job_id, " did not end within ",
                   absl::FormatDuration(timeout), " of polling"));
}

}  // namespace

absl::Status FollowJobStatus(
    CoordinatorClient& client, const std::string& job_id,
    const FollowOptions& options,
    const std::function<void(const JobStatus&)>& on_status) {
  const absl::Time give_up = options.now() + options.timeout;
  v1::WatchJobRequest watch;
  watch.set_job_id(job_id);
  watch.set_max_rate_hz(4);
  const absl::Status watched =
      client.WatchJob(watch, options.timeout, [&](const JobStatus& status) {
        on_status(status);
        return true;
      });
  if (!absl::IsResourceExhausted(watched)) return watched;
  if (options.on_polling) options.on_polling(watched);
  v1::GetJobRequest get;
  get.set_job_id(job_id);
  std::string last;
  while (true) {
    absl::StatusOr<JobStatus> status = client.GetJob(get, options.poll_timeout);
    if (!status.ok()) return status.status();
    if (std::string now = status->SerializeAsString(); now != last) {
      last = std::move(now);
      on_status(*status);
    }
    if (IsFinal(status->state())) return absl::OkStatus();
    if (options.now() + options.poll_every > give_up) {
      return PollDeadline(job_id, options.timeout);
    }
    options.sleep(options.poll_every);
  }
}

absl::Status PollJobLogs(CoordinatorClient& client,
                         const v1::StreamLogsRequest& request,
                         const FollowOptions& options,
                         const std::function<void(const v1::LogLine&)>& on_line,
                         int64_t* last_seq) {
  const absl::Time give_up = options.now() + options.timeout;
  v1::GetJobRequest get;
  get.set_job_id(request.job_id());
  v1::StreamLogsRequest read = request;
  read.set_follow(false);
  while (true) {
    // The state before the read: the final state's own line is in the log
    // by then, so a read after a final state reaches the log's end.
    absl::StatusOr<JobStatus> status = client.GetJob(get, options.poll_timeout);
    if (!status.ok()) return status.status();
    read.set_since_seq(*last_seq);
    const absl::Status s = client.StreamLogs(read, options.poll_timeout,
                                             [&](const v1::LogLine& line) {
                                               on_line(line);
                                               *last_seq = line.seq();
                                               return true;
                                             });
    if (!s.ok()) return s;
    if (IsFinal(status->state())) return absl::OkStatus();
    if (options.now() + options.poll_every > give_up) {
      return PollDeadline(request.job_id(), options.timeout);
    }
    options.sleep(options.poll_every);
  }
}

}  // namespace aqueduct
