// StageRuntime's assignment rules (no job is run here).
#include "worker/runtime/stage_runtime.h"

#include <thread>

#include "gtest/gtest.h"

namespace aqueduct {
namespace {

StageAssignment OneStage(const std::string& job) {
  StageAssignment a;
  a.set_job_id(job);
  PlanStage* s = a.mutable_plan()->add_stages();
  s->set_replicas(1);
  return a;
}

TEST(StageRuntimeTest, BusyWorkerRefusesAnotherJobAfterItsWait) {
  StageRuntimeOptions options;
  options.busy_wait = absl::Milliseconds(100);
  StageRuntime runtime(options);
  ASSERT_TRUE(runtime.Assign(OneStage("a")).ok());
  EXPECT_TRUE(runtime.Assign(OneStage("a")).ok());  // Idempotent.
  const absl::Time start = absl::Now();
  const absl::Status s = runtime.Assign(OneStage("b"));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("busy with job a"), std::string::npos) << s;
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(90));
  EXPECT_EQ(runtime.current_job(), "a");
}

TEST(StageRuntimeTest, AssignmentWaitsForAStopInFlight) {
  StageRuntimeOptions options;
  options.busy_wait = absl::Seconds(20);
  StageRuntime runtime(options);
  ASSERT_TRUE(runtime.Assign(OneStage("a")).ok());
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(100));
    ASSERT_TRUE(runtime.Stop("a", "test").ok());
  });
  const absl::Time start = absl::Now();
  const absl::Status s = runtime.Assign(OneStage("b"));
  stopper.join();
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ(runtime.current_job(), "b");
}

}  // namespace
}  // namespace aqueduct
