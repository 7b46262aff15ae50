// How aq follows a job and its log when the coordinator has no waiting
// call to spare. A watch (WatchJob) and a log follow (StreamLogs with
// follow) each hold one of the coordinator's --max_waiting_calls slots; when
// they are taken (RESOURCE_EXHAUSTED "too many waiting calls ..."), aq
// polls instead, with calls that hold no slot: GetJob, or StreamLogs
// without follow, every second until the job is final (issue 22, item 10:
// one user's watches and log follows refused every other user's `aq submit
// --wait`).
//
// Not thread-safe (used from main).
#ifndef AQUEDUCT_CLIENT_FOLLOW_H_
#define AQUEDUCT_CLIENT_FOLLOW_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/coordinator_client.h"
#include "proto/service_types.h"

namespace aqueduct {

struct FollowOptions {
  // The whole follow, watch or polls (a watch lasts as long as the job; a
  // day bounds it, as kWatchTimeout does).
  absl::Duration timeout = absl::Hours(24);
  // Between two polls, and each poll call's deadline.
  absl::Duration poll_every = absl::Seconds(1);
  absl::Duration poll_timeout = absl::Seconds(10);
  // The clock and the wait between polls (tests pass fakes).
  std::function<absl::Time()> now = [] { return absl::Now(); };
  std::function<void(absl::Duration)> sleep = [](absl::Duration d) {
    absl::SleepFor(d);
  };
  // Told once, with the refusal, when polling begins (aq says so on
  // stderr). May be empty.
  std::function<void(const absl::Status&)> on_polling;
};

// Follows job `job_id`: calls `on_status` with its status on every change
// until it is final. Watches first (WatchJob at most 4 updates a second);
// when the watch is refused with RESOURCE_EXHAUSTED, polls GetJob every
// options.poll_every, calling `on_status` when the status differs from the
// last one given. OK once the job is final (or the watch ended); the
// watch's other errors, or a poll's; DEADLINE_EXCEEDED when
// options.timeout passes while polling.
absl::Status FollowJobStatus(
    CoordinatorClient& client, const std::string& job_id,
    const FollowOptions& options,
    const std::function<void(const JobStatus&)>& on_status);

// Reads the log lines of request.job_id() (of request.stage() when set)
// numbered after *last_seq with StreamLogs without follow, every
// options.poll_every, advancing *last_seq, until the job is final and its
// log read to the end: OK. A poll's error, or DEADLINE_EXCEEDED when
// options.timeout passes. For when a log follow is refused.
absl::Status PollJobLogs(CoordinatorClient& client,
                         const v1::StreamLogsRequest& request,
                         const FollowOptions& options,
                         const std::function<void(const v1::LogLine&)>& on_line,
                         int64_t* last_seq);

}  // namespace aqueduct

#endif  // AQUEDUCT_CLIENT_FOLLOW_H_
