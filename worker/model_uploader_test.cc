// The worker's model sink against the fake coordinator client on a fake
// clock: an upload goes through with the worker's current identity; a
// coordinator that is down for a while is retried with growing waits; one
// that stays down is given up on at the deadline, naming its address; a
// refusal ends the delivery at once, unless the coordinator was just
// unreachable (a restarted coordinator that does not know the worker yet).
#include "worker/model_uploader.h"

#include <string>
#include <vector>

#include "common/clock.h"
#include "common/fake_coordinator_client.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

using Rpc = FakeCoordinatorClient::Rpc;

class ModelUploaderTest : public ::testing::Test {
 protected:
  ModelUploaderTest() {
    info_.set_worker_id("w1");
    info_.set_incarnation("inc-1");
    v1::RegisterWorkerRequest reg;
    *reg.mutable_info() = info_;
    EXPECT_TRUE(coordinator_.RegisterWorker(reg, absl::Seconds(1)).ok());
    options_.coordinator_address = "10.0.0.1:7070";
    options_.initial_backoff = absl::Milliseconds(100);
    options_.max_backoff = absl::Seconds(2);
    options_.deadline = absl::Seconds(30);
    options_.clock = &clock_;
    options_.sleep = [this](absl::Duration d) {
      sleeps_.push_back(d);
      clock_.Advance(d);
    };
  }

  CoordinatorModelSink Sink() {
    return CoordinatorModelSink(
        &coordinator_, [this] { return info_; }, options_);
  }

  FakeClock clock_;
  FakeCoordinatorClient coordinator_;
  WorkerInfo info_;
  ModelUploaderOptions options_;
  std::vector<absl::Duration> sleeps_;
};

TEST_F(ModelUploaderTest, UploadsWithTheWorkersIdentity) {
  const std::string model(3 << 20, 'm');
  ASSERT_TRUE(Sink().Deliver("job-1", 2, model).ok());
  const auto uploads = coordinator_.uploads();
  ASSERT_EQ(uploads.size(), 1u);
  EXPECT_EQ(uploads[0].header.worker_id(), "w1");
  EXPECT_EQ(uploads[0].header.incarnation(), "inc-1");
  EXPECT_EQ(uploads[0].header.job_id(), "job-1");
  EXPECT_EQ(uploads[0].header.attempt(), 2);
  EXPECT_TRUE(uploads[0].bytes == model);
  EXPECT_TRUE(sleeps_.empty());
}

TEST_F(ModelUploaderTest, RetriesWhileTheCoordinatorRestarts) {
  coordinator_.FailNext(Rpc::kUploadModel,
                        absl::UnavailableError("connection refused"), 3);
  coordinator_.FailNext(Rpc::kUploadModel,
                        absl::DeadlineExceededError("deadline"), 1);
  // Restarted, it does not know the worker until it registers again.
  coordinator_.FailNext(Rpc::kUploadModel,
                        absl::NotFoundError("worker w1 is not registered"), 1);
  coordinator_.FailNext(Rpc::kUploadModel,
                        absl::AbortedError("another upload in progress"), 1);
  ASSERT_TRUE(Sink().Deliver("job-1", 0, "weights").ok());
  EXPECT_EQ(coordinator_.calls(Rpc::kUploadModel), 7);
  EXPECT_EQ(coordinator_.uploads().size(), 1u);
  const std::vector<absl::Duration> want = {
      absl::Milliseconds(100),  absl::Milliseconds(200),
      absl::Milliseconds(400),  absl::Milliseconds(800),
      absl::Milliseconds(1600), absl::Seconds(2)};
  EXPECT_EQ(sleeps_, want);
}

TEST_F(ModelUploaderTest, GivesUpAtTheDeadlineNamingTheCoordinator) {
  coordinator_.set_unavailable(true);
  const absl::Time start = clock_.Now();
  const absl::Status s = Sink().Deliver("job-3", 0, "weights");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("the coordinator at 10.0.0.1:7070 is unreachable"),
            std::string::npos)
      << s;
  EXPECT_NE(s.message().find("job-3"), std::string::npos) << s;
  EXPECT_LE(clock_.Now() - start, options_.deadline);
  EXPECT_GT(clock_.Now() - start, options_.deadline - options_.max_backoff * 2);
  EXPECT_GT(coordinator_.calls(Rpc::kUploadModel), 10);
  // Each call's timeout fits in what is left of the deadline.
  EXPECT_LE(coordinator_.last_timeout(), options_.deadline);
}

TEST_F(ModelUploaderTest, ARefusalEndsTheDeliveryAtOnce) {
  coordinator_.FailNext(
      Rpc::kUploadModel,
      absl::FailedPreconditionError("w1 does not run the output stage"), 1);
  const absl::Status s = Sink().Deliver("job-4", 1, "weights");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "uploading the trained model of job job-4: w1 does not run the "
            "output stage");
  EXPECT_EQ(coordinator_.calls(Rpc::kUploadModel), 1);
  // A fenced incarnation (the fake checks it) is refused too.
  coordinator_.Fence("w1");
  EXPECT_EQ(Sink().Deliver("job-4", 1, "weights").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(coordinator_.uploads().empty());
}

TEST_F(ModelUploaderTest, EachAttemptTakesTheCurrentIncarnation) {
  coordinator_.FailNext(Rpc::kUploadModel, absl::UnavailableError("down"), 1);
  int asked = 0;
  CoordinatorModelSink sink(
      &coordinator_,
      [&] {
        ++asked;
        return info_;
      },
      options_);
  ASSERT_TRUE(sink.Deliver("job-5", 0, "weights").ok());
  EXPECT_EQ(asked, 2);
}

}  // namespace
}  // namespace aqueduct
