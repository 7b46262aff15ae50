#include "coordinator/submission.h"

#include <string>

#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

constexpr char kSpec[] = R"pb(
  name: "tiny"
  model {
    layers { flatten {} }
    layers { linear { in_features: 8 out_features: 2 } }
  }
  data {
    synthetic {
      sample_shape: [ 8 ]
      num_classes: 2
      train_samples: 64
      seed: 1
    }
  }
  optimizer { sgd { lr: 0.1 } }
  batch_size: 8
  epochs: 2
)pb";

JobSpec Spec() {
  JobSpec spec;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(kSpec, &spec));
  return spec;
}

TEST(SubmissionTest, SizesNameTheField) {
  const JobSpec spec = Spec();
  EXPECT_TRUE(CheckSubmissionSizes(spec, nullptr, "", "alice").ok());
  const absl::Status owner =
      CheckSubmissionSizes(spec, nullptr, "", std::string(257, 'o'));
  EXPECT_EQ(owner.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(owner.message(), "owner is 257 bytes, more than the 256 allowed");
  const absl::Status resume =
      CheckSubmissionSizes(spec, nullptr, std::string(4097, 'r'), "");
  EXPECT_EQ(resume.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(resume.message().find("resume is 4097 bytes"), std::string::npos);
}

TEST(SubmissionTest, ABadSpecIsInvalid) {
  JobSpec spec = Spec();
  spec.set_batch_size(0);
  auto checked = CheckSpecAndProfile(spec, nullptr, 0);
  EXPECT_EQ(checked.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(checked.status().message().rfind("invalid job spec: ", 0), 0u);
}

TEST(SubmissionTest, ABadProfileIsInvalid) {
  ModelProfile empty;
  auto checked = CheckSpecAndProfile(Spec(), &empty, 0);
  EXPECT_EQ(checked.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(checked.status().message().rfind("invalid profile: ", 0), 0u);
}

TEST(SubmissionTest, TotalStepsWhenTheSpecSaysThem) {
  const JobSpec spec = Spec();
  auto summary = CheckSpecAndProfile(spec, nullptr, 0);
  ASSERT_TRUE(summary.ok()) << summary.status();
  // 64 samples in batches of 8, two epochs.
  EXPECT_EQ(KnownTotalSteps(spec, *summary).value_or(-1), 16);
  SpecSummary unknown = *summary;
  unknown.train_samples = -1;
  EXPECT_EQ(KnownTotalSteps(spec, unknown).value_or(-1), 0);
  JobSpec steps = spec;
  steps.set_epochs(0);
  steps.set_max_steps(5);
  EXPECT_EQ(KnownTotalSteps(steps, unknown).value_or(-1), 5);
}

TEST(SubmissionTest, NewJobIsPendingWithWhatWasSubmitted) {
  const JobSpec spec = Spec();
  auto summary = CheckSpecAndProfile(spec, nullptr, 0);
  ASSERT_TRUE(summary.ok()) << summary.status();
  ModelProfile profile;
  const Job job = NewJob("job-1", "alice", spec, &profile, *summary, 16,
                         v1::CheckpointManifest(), absl::FromUnixSeconds(5),
                         absl::FromUnixSeconds(7));
  EXPECT_EQ(job.state, v1::JOB_PENDING);
  EXPECT_EQ(job.owner, "alice");
  EXPECT_TRUE(job.has_profile);
  EXPECT_EQ(job.submitted, absl::FromUnixSeconds(5));
  EXPECT_EQ(job.pending_since, absl::FromUnixSeconds(7));
  EXPECT_EQ(job.workers_needed, summary->pipeline.workers);
  EXPECT_EQ(job.total_steps, 16);
  EXPECT_EQ(job.max_restarts, 3);
}

// A user's credential may set at most --max_user_priority; an admin's and
// an unauthenticated caller's any in range (the spec's checks bound it).
TEST(SubmissionTest, PriorityIsBoundedByTheRole) {
  JobSpec spec = Spec();
  spec.set_priority(5);
  EXPECT_TRUE(CheckPriority(spec, "user", 5).ok());
  const absl::Status high = CheckPriority(spec, "user", 0);
  EXPECT_EQ(high.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(high.message(),
            "priority=5 is above 0, the most a user credential may set (the "
            "coordinator's --max_user_priority); an admin credential may set "
            "up to 1000");
  EXPECT_TRUE(CheckPriority(spec, "admin", 0).ok());
  EXPECT_TRUE(CheckPriority(spec, "", 0).ok());
  spec.set_priority(1001);
  EXPECT_EQ(CheckSpecAndProfile(spec, nullptr, 0).status().message(),
            "invalid job spec: priority=1001 must be in [-1000, 1000]");
}

// No set of registered workers could run a job that needs more: refused,
// unless the spec asks to wait for workers to register.
TEST(SubmissionTest, AJobNeedsWorkersThatExist) {
  JobSpec spec = Spec();
  EXPECT_TRUE(CheckWorkersExist(spec, 2, 2).ok());
  const absl::Status s = CheckWorkersExist(spec, 3, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "the job needs 3 workers and 1 is registered: no set of "
            "registered workers could run it; start more workers, ask for "
            "fewer (pipeline.workers), or set pipeline.wait_for_workers_ms to "
            "wait that long for more to register");
  spec.mutable_pipeline()->set_wait_for_workers_ms(60000);
  EXPECT_TRUE(CheckWorkersExist(spec, 3, 1).ok());
}

}  // namespace
}  // namespace aqueduct
