#include "coordinator/jobs/job_state.h"

#include "gtest/gtest.h"

namespace aqueduct {
namespace {

constexpr JobEvent kEvents[] = {
    JobEvent::kWorkersReserved,     JobEvent::kStarted,
    JobEvent::kAllReplicasFinished, JobEvent::kFailed,
    JobEvent::kCancelled,           JobEvent::kRestart};
constexpr v1::JobState kStates[] = {v1::JOB_PENDING, v1::JOB_PLANNING,
                                    v1::JOB_RUNNING, v1::JOB_SUCCEEDED,
                                    v1::JOB_FAILED,  v1::JOB_CANCELLED};

TEST(JobStateTest, TheHappyPath) {
  auto t = NextJobState(v1::JOB_PENDING, JobEvent::kWorkersReserved);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->to, v1::JOB_PLANNING);
  EXPECT_FALSE(t->finished);
  t = NextJobState(v1::JOB_PLANNING, JobEvent::kStarted);
  EXPECT_EQ(t->to, v1::JOB_RUNNING);
  t = NextJobState(v1::JOB_RUNNING, JobEvent::kAllReplicasFinished);
  EXPECT_EQ(t->to, v1::JOB_SUCCEEDED);
  EXPECT_TRUE(t->finished);
  EXPECT_FALSE(t->stop_workers);  // They stop by themselves.
}

TEST(JobStateTest, EveryUnfinishedStateCanFailOrBeCancelled) {
  for (v1::JobState s : {v1::JOB_PENDING, v1::JOB_PLANNING, v1::JOB_RUNNING}) {
    for (JobEvent e : {JobEvent::kFailed, JobEvent::kCancelled}) {
      auto t = NextJobState(s, e);
      ASSERT_TRUE(t.ok()) << JobStateName(s) << " " << JobEventName(e);
      EXPECT_TRUE(t->finished);
      EXPECT_TRUE(t->stop_workers);
      EXPECT_EQ(t->to,
                e == JobEvent::kFailed ? v1::JOB_FAILED : v1::JOB_CANCELLED);
    }
  }
}

TEST(JobStateTest, ARestartGoesBackToPendingAndStopsTheWorkers) {
  for (v1::JobState s : {v1::JOB_PLANNING, v1::JOB_RUNNING}) {
    auto t = NextJobState(s, JobEvent::kRestart);
    ASSERT_TRUE(t.ok()) << JobStateName(s);
    EXPECT_EQ(t->to, v1::JOB_PENDING);
    EXPECT_FALSE(t->finished);
    EXPECT_TRUE(t->stop_workers);
  }
  EXPECT_FALSE(NextJobState(v1::JOB_PENDING, JobEvent::kRestart).ok());
}

TEST(JobStateTest, FinalStatesTakeNoEventAndOrderIsEnforced) {
  int allowed = 0;
  for (v1::JobState s : kStates) {
    for (JobEvent e : kEvents) {
      auto t = NextJobState(s, e);
      if (IsFinal(s)) {
        EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition);
      }
      allowed += t.ok();
    }
  }
  // 3 unfinished states x (failed, cancelled) + the 3 forward steps + the
  // restarts of PLANNING and RUNNING.
  EXPECT_EQ(allowed, 11);
  auto late = NextJobState(v1::JOB_CANCELLED, JobEvent::kStarted);
  EXPECT_EQ(late.status().message(),
            "a CANCELLED job does not take the event 'started'");
  EXPECT_FALSE(NextJobState(v1::JOB_PENDING, JobEvent::kStarted).ok());
}

}  // namespace
}  // namespace aqueduct
