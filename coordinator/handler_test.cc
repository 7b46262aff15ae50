#include "coordinator/handler.h"

#include <memory>
#include <vector>

#include "coordinator/core.h"
#include "gtest/gtest.h"
#include "pipeline/spec.h"

namespace aqueduct {
namespace {

constexpr char kSpec[] = R"pb(
  model {
    layers { flatten {} }
    layers { linear { in_features: 8 out_features: 2 } }
  }
  data {
    synthetic {
      sample_shape: [ 8 ]
      num_classes: 2
      train_samples: 64
    }
  }
  optimizer { sgd { lr: 0.1 } }
  batch_size: 8
  max_steps: 4
)pb";

class HandlerTest : public ::testing::Test {
 protected:
  HandlerTest()
      : core_(CoordinatorOptions(), &clock_,
              [](const std::string&) -> std::unique_ptr<WorkerClient> {
                return nullptr;  // No worker registers in these tests.
              }),
        handler_(NewCoordinatorHandler(&core_)) {}

  FakeClock clock_;
  CoordinatorCore core_;
  std::unique_ptr<CoordinatorHandler> handler_;
};

TEST_F(HandlerTest, SubmitGetListAndCancel) {
  v1::SubmitJobRequest submit;
  *submit.mutable_spec() = *ParseJobSpec(kSpec, "test");
  auto submitted = handler_->SubmitJob(submit);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  v1::GetJobRequest get;
  get.set_job_id(submitted->job_id());
  auto job = handler_->GetJob(get);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state(), v1::JOB_PENDING);
  EXPECT_EQ(job->total_steps(), 4);
  EXPECT_EQ(handler_->ListJobs({})->jobs_size(), 1);
  v1::CancelJobRequest cancel;
  cancel.set_job_id(submitted->job_id());
  EXPECT_EQ(handler_->CancelJob(cancel)->state(), v1::JOB_CANCELLED);
  get.set_job_id("job-none");
  EXPECT_EQ(handler_->GetJob(get).status().code(), absl::StatusCode::kNotFound);
  submit.mutable_spec()->set_batch_size(-1);
  EXPECT_EQ(handler_->SubmitJob(submit).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(HandlerTest, RegisterTellsTheLease) {
  v1::RegisterWorkerRequest request;
  request.mutable_info()->set_worker_id("w1");
  request.mutable_info()->set_incarnation("i1");
  request.mutable_info()->set_address("127.0.0.1:1");
  request.mutable_info()->set_version(core_.options().registry.version);
  auto response = handler_->RegisterWorker(request);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_GT(response->heartbeat_interval_ms(), 0);
  EXPECT_GT(response->lease_ms(), response->heartbeat_interval_ms());
  v1::HeartbeatRequest beat;
  beat.set_worker_id("w1");
  beat.set_incarnation("stale");
  EXPECT_EQ(handler_->Heartbeat(beat).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(HandlerTest, StoreChecksItsInputAndWaitsWithADeadline) {
  v1::StoreGetRequest get;
  get.set_key("k");
  get.set_wait_ms(-1);
  EXPECT_EQ(handler_->StoreGet(get, absl::InfiniteFuture()).status().code(),
            absl::StatusCode::kInvalidArgument);
  get.set_wait_ms(20);
  const absl::Time start = absl::Now();
  EXPECT_FALSE(handler_->StoreGet(get, absl::InfiniteFuture()).ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  v1::StoreSetRequest set;
  set.set_key("k");
  set.set_value("v");
  ASSERT_TRUE(handler_->StoreSet(set).ok());
  EXPECT_EQ(handler_->StoreGet(get, absl::InfiniteFuture())->value(), "v");
}

TEST_F(HandlerTest, WatchEndsOnDeadlineOrCancellation) {
  v1::SubmitJobRequest submit;
  *submit.mutable_spec() = *ParseJobSpec(kSpec, "test");
  v1::WatchJobRequest watch;
  watch.set_job_id(handler_->SubmitJob(submit)->job_id());
  std::vector<v1::JobState> seen;
  auto record = [&](const v1::JobStatus& s) {
    seen.push_back(s.state());
    return true;
  };
  const absl::Status timed_out = handler_->WatchJob(
      watch, absl::Now() + absl::Milliseconds(300), [] { return false; },
      record);
  EXPECT_EQ(timed_out.code(), absl::StatusCode::kDeadlineExceeded);
  ASSERT_EQ(seen.size(), 1u);  // The first status; nothing changed since.
  EXPECT_EQ(seen[0], v1::JOB_PENDING);
  EXPECT_EQ(handler_
                ->WatchJob(
                    watch, absl::InfiniteFuture(), [] { return true; }, record)
                .code(),
            absl::StatusCode::kCancelled);
  watch.set_job_id("job-none");
  EXPECT_EQ(handler_
                ->WatchJob(
                    watch, absl::Now() + absl::Seconds(5), [] { return false; },
                    record)
                .code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace aqueduct
