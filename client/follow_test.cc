// FollowJobStatus: a watch, and GetJob polls once the coordinator refuses
// the watch for want of waiting calls (issue 22, item 10: one user's
// watches made every other user's `aq submit --wait` fail at once).
#include "client/follow.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/fake_coordinator_client.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

using Rpc = FakeCoordinatorClient::Rpc;

const absl::Status kRefused = absl::ResourceExhaustedError(
    "too many waiting calls of watches (limit 32, half of "
    "--max_waiting_calls); try again later");

v1::JobStatus Job(v1::JobState state, int64_t step = 0) {
  v1::JobStatus job;
  job.set_job_id("job-1");
  job.set_state(state);
  job.set_step(step);
  return job;
}

// Polls on a fake clock: each sleep advances it and runs `on_sleep` (the
// job moving on meanwhile).
struct FakeTime {
  absl::Time now = absl::UnixEpoch();
  std::vector<absl::Duration> sleeps;
  std::function<void(int)> on_sleep = [](int) {};

  FollowOptions Options() {
    FollowOptions o;
    o.timeout = absl::Seconds(30);
    o.now = [this] { return now; };
    o.sleep = [this](absl::Duration d) {
      sleeps.push_back(d);
      now += d;
      on_sleep(static_cast<int>(sleeps.size()));
    };
    return o;
  }
};

TEST(FollowTest, ARefusedWatchFallsBackToPollingUntilTheJobEnds) {
  FakeCoordinatorClient client;
  client.SetJob(Job(v1::JOB_RUNNING, 1));
  client.FailNext(Rpc::kWatchJob, kRefused);
  FakeTime time;
  time.on_sleep = [&](int n) {
    if (n == 2) client.SetJob(Job(v1::JOB_RUNNING, 5));
    if (n == 4) client.SetJob(Job(v1::JOB_SUCCEEDED, 8));
  };
  FollowOptions options = time.Options();
  std::vector<absl::Status> refusals;
  options.on_polling = [&](const absl::Status& s) { refusals.push_back(s); };
  std::vector<int64_t> steps;
  const absl::Status s = FollowJobStatus(
      client, "job-1", options,
      [&](const v1::JobStatus& j) { steps.push_back(j.step()); });
  EXPECT_TRUE(s.ok()) << s;
  ASSERT_EQ(refusals.size(), 1u);
  EXPECT_EQ(refusals[0], kRefused);
  // Each change once; the final status last.
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 5, 8}));
  EXPECT_EQ(client.calls(Rpc::kWatchJob), 1);
  EXPECT_EQ(client.calls(Rpc::kGetJob), 5);
  EXPECT_EQ(time.sleeps, std::vector<absl::Duration>(4, absl::Seconds(1)));
}

TEST(FollowTest, PollingHasItsOwnDeadline) {
  FakeCoordinatorClient client;
  client.SetJob(Job(v1::JOB_PENDING));
  client.FailNext(Rpc::kWatchJob, kRefused);
  FakeTime time;
  const absl::Status s = FollowJobStatus(client, "job-1", time.Options(),
                                         [](const v1::JobStatus&) {});
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(s.message(), "job job-1 did not end within 30s of polling");
  EXPECT_EQ(time.sleeps.size(), 30u);
  EXPECT_EQ(client.calls(Rpc::kGetJob), 31);
}

TEST(FollowTest, AWatchThatIsServedIsNotPolled) {
  FakeCoordinatorClient client;
  client.SetJob(Job(v1::JOB_SUCCEEDED, 8));
  FakeTime time;
  bool polled = false;
  FollowOptions options = time.Options();
  options.on_polling = [&](const absl::Status&) { polled = true; };
  std::vector<int64_t> steps;
  EXPECT_TRUE(
      FollowJobStatus(client, "job-1", options, [&](const v1::JobStatus& j) {
        steps.push_back(j.step());
      }).ok());
  EXPECT_EQ(steps, std::vector<int64_t>{8});
  EXPECT_FALSE(polled);
  EXPECT_EQ(client.calls(Rpc::kGetJob), 0);
}

TEST(FollowTest, OtherErrorsAreReturnedAsTheyAre) {
  FakeCoordinatorClient client;
  FakeTime time;
  // An unknown job: the watch's NOT_FOUND, no polling.
  EXPECT_EQ(FollowJobStatus(client, "job-x", time.Options(),
                            [](const v1::JobStatus&) {})
                .code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(client.calls(Rpc::kGetJob), 0);
  // A poll that fails ends the follow with its error.
  client.SetJob(Job(v1::JOB_RUNNING));
  client.FailNext(Rpc::kWatchJob, kRefused);
  client.FailNext(Rpc::kGetJob, absl::UnavailableError("connection refused"));
  EXPECT_EQ(FollowJobStatus(client, "job-1", time.Options(),
                            [](const v1::JobStatus&) {})
                .code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace aqueduct
