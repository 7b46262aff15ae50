#include "common/status.h"

#include "common/grpc_status.h"
#include "common/tensor.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::Status Quarter(int x, int* out) {
  ASSIGN_OR_RETURN(int h, Half(x));
  ASSIGN_OR_RETURN(*out, Half(h));
  return absl::OkStatus();
}

absl::Status Chain(bool fail) {
  RETURN_IF_ERROR(fail ? absl::NotFoundError("gone") : absl::OkStatus());
  return absl::InternalError("reached the end");
}

TEST(StatusTest, Macros) {
  int out = 0;
  EXPECT_TRUE(Quarter(8, &out).ok());
  EXPECT_EQ(out, 2);
  EXPECT_EQ(Quarter(6, &out).message(), "odd");
  EXPECT_EQ(Chain(true).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Chain(false).code(), absl::StatusCode::kInternal);
}

TEST(StatusTest, AnnotateAndGrpcConversion) {
  const absl::Status s =
      Annotate(absl::DeadlineExceededError("late"), "worker w1");
  EXPECT_EQ(s.message(), "worker w1: late");
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(Annotate(absl::OkStatus(), "x").ok());
  const grpc::Status g = ToGrpcStatus(s);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(g.error_message(), "worker w1: late");
  EXPECT_EQ(FromGrpcStatus(g), s);
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
}

TEST(TensorTest, ShapesAndDTypes) {
  const Shape s({2, 3, 4});
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(s.ToString(), "[2, 3, 4]");
  EXPECT_EQ(s.WithLeading(5), Shape({5, 2, 3, 4}));
  EXPECT_EQ(s.WithoutLeading(), Shape({3, 4}));
  EXPECT_EQ(Shape().numel(), 1);
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(*DTypeFromName("F16"), DType::kF16);
  EXPECT_FALSE(DTypeFromName("F128").ok());
}

}  // namespace
}  // namespace aqueduct
