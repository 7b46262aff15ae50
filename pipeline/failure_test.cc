#include "pipeline/failure.h"

#include "common/grpc_status.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

TEST(FailureTest, ACauseTravelsWithTheStatus) {
  v1::StageFailure f;
  f.set_cause(v1::FAILURE_PEER_UNREACHABLE);
  f.set_peer_worker_id("w2");
  const absl::Status s =
      WithFailure(absl::DeadlineExceededError("timed out"), f);
  EXPECT_EQ(FailureOf(s).cause(), v1::FAILURE_PEER_UNREACHABLE);
  EXPECT_EQ(FailureOf(s).peer_worker_id(), "w2");
  // The text plays no part.
  EXPECT_EQ(FailureOf(absl::DataLossError("non-finite loss at step 3")).cause(),
            v1::FAILURE_OTHER);
  EXPECT_EQ(FailureOf(absl::OkStatus()).cause(), v1::FAILURE_CAUSE_UNSPECIFIED);
  EXPECT_TRUE(WithCause(absl::OkStatus(), v1::FAILURE_NONFINITE_LOSS).ok());
}

TEST(FailureTest, ACauseCrossesGrpc) {
  v1::StageFailure f;
  f.set_cause(v1::FAILURE_BUSY_WITH_EARLIER_ATTEMPT);
  f.set_job_id("job-1");
  const absl::Status s = FromGrpcStatus(
      ToGrpcStatus(WithFailure(absl::FailedPreconditionError("busy"), f)));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "busy");
  EXPECT_EQ(FailureOf(s).cause(), v1::FAILURE_BUSY_WITH_EARLIER_ATTEMPT);
  EXPECT_EQ(FailureOf(s).job_id(), "job-1");
}

TEST(FailureTest, GarbageDetailsReadAsOther) {
  const absl::Status s = FromGrpcStatus(
      grpc::Status(grpc::StatusCode::INTERNAL, "x", "\xff\xff garbage"));
  EXPECT_EQ(FailureOf(s).cause(), v1::FAILURE_OTHER);
  const absl::Status big = FromGrpcStatus(
      grpc::Status(grpc::StatusCode::INTERNAL, "x", std::string(5000, '\x08')));
  EXPECT_FALSE(big.GetPayload(kStageFailurePayloadUrl).has_value());
  // An unknown cause number is OTHER too.
  v1::StageFailure f;
  f.set_cause(static_cast<v1::FailureCause>(99));
  EXPECT_EQ(FailureOf(WithFailure(absl::InternalError("x"), f)).cause(),
            v1::FAILURE_OTHER);
}

}  // namespace
}  // namespace aqueduct
