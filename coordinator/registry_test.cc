#include "coordinator/registry.h"

#include "gtest/gtest.h"

namespace aqueduct {
namespace {

WorkerInfo Info(const std::string& id, const std::string& incarnation,
                const std::string& version = "0.1.0") {
  WorkerInfo info;
  info.set_worker_id(id);
  info.set_incarnation(incarnation);
  info.set_version(version);
  info.set_address("127.0.0.1:1");
  return info;
}

class RegistryTest : public ::testing::Test {
 protected:
  RegistryTest() : registry_(Options(), &clock_) {}
  static RegistryOptions Options() {
    RegistryOptions o;
    o.heartbeat_interval = absl::Seconds(1);
    o.suspect_after_missed = 3;
    o.dead_after = absl::Seconds(10);
    o.version = "0.4.2";
    return o;
  }
  FakeClock clock_;
  Registry registry_;
};

TEST_F(RegistryTest, LeaseGoesSuspectThenDead) {
  ASSERT_TRUE(registry_.Register(Info("w1", "a"), nullptr).ok());
  EXPECT_EQ(registry_.IdleHealthyWorkers(), std::vector<std::string>{"w1"});
  clock_.Advance(absl::Milliseconds(2900));
  EXPECT_TRUE(registry_.Tick().empty());
  clock_.Advance(absl::Milliseconds(200));
  auto t = registry_.Tick();
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].to, v1::WORKER_SUSPECT);
  EXPECT_TRUE(registry_.IdleHealthyWorkers().empty());
  // A heartbeat brings it back.
  ASSERT_TRUE(registry_.Heartbeat("w1", "a").ok());
  EXPECT_EQ(registry_.Get("w1")->state(), v1::WORKER_HEALTHY);
  registry_.Assign("w1", "job-1", 0, 0);
  clock_.Advance(absl::Seconds(10));
  t = registry_.Tick();
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].to, v1::WORKER_DEAD);
  EXPECT_EQ(t[0].job_id, "job-1");
  EXPECT_EQ(t[0].detail, "no heartbeat for 10.0 s");
  // Dead is final for the incarnation.
  EXPECT_EQ(registry_.Heartbeat("w1", "a").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(registry_.Register(Info("w1", "a"), nullptr).code(),
            absl::StatusCode::kFailedPrecondition);
  // A restart (new incarnation) registers afresh.
  EXPECT_TRUE(registry_.Register(Info("w1", "b"), nullptr).ok());
  EXPECT_EQ(registry_.Get("w1")->state(), v1::WORKER_HEALTHY);
}

TEST_F(RegistryTest, HeartbeatAfterExpiryBeforeTickIsRefused) {
  ASSERT_TRUE(registry_.Register(Info("w1", "a"), nullptr).ok());
  clock_.Advance(absl::Seconds(11));
  EXPECT_EQ(registry_.Heartbeat("w1", "a").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(registry_.Get("w1")->state(), v1::WORKER_DEAD);
}

TEST_F(RegistryTest, DuplicateRegistrationIsIdempotent) {
  ASSERT_TRUE(registry_.Register(Info("w1", "a"), nullptr).ok());
  clock_.Advance(absl::Seconds(2));
  std::vector<WorkerTransition> t;
  ASSERT_TRUE(registry_.Register(Info("w1", "a"), &t).ok());
  EXPECT_TRUE(t.empty());
  EXPECT_EQ(registry_.List().size(), 1u);
  clock_.Advance(absl::Seconds(2));
  EXPECT_TRUE(registry_.Tick().empty()) << "the re-registration renewed";
}

TEST_F(RegistryTest, NewIncarnationFencesTheOld) {
  ASSERT_TRUE(registry_.Register(Info("w1", "a"), nullptr).ok());
  registry_.Assign("w1", "job-7", 1, 0);
  std::vector<WorkerTransition> t;
  ASSERT_TRUE(registry_.Register(Info("w1", "b"), &t).ok());
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].incarnation, "a");
  EXPECT_EQ(t[0].to, v1::WORKER_FENCED);
  EXPECT_EQ(t[0].job_id, "job-7");
  const absl::Status old = registry_.Heartbeat("w1", "a");
  EXPECT_EQ(old.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(old.message(),
            "worker w1 incarnation a has been fenced by incarnation b");
  EXPECT_EQ(registry_.CheckLive("w1", "a").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(registry_.CheckLive("w1", "b").ok());
  EXPECT_TRUE(registry_.Get("w1")->job_id().empty());
}

TEST_F(RegistryTest, VersionMismatchIsRefusedNamingBoth) {
  const absl::Status s = registry_.Register(Info("w9", "a", "1.0.0"), nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "worker w9 runs version '1.0.0', incompatible with the "
            "coordinator's version 0.4.2 (major versions differ)");
  EXPECT_TRUE(registry_.Register(Info("w9", "a", "0.9.1"), nullptr).ok());
}

TEST_F(RegistryTest, BadRequestsAndDeregistration) {
  WorkerInfo bad = Info("", "a");
  EXPECT_EQ(registry_.Register(bad, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry_.Heartbeat("ghost", "x").code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(registry_.Register(Info("w1", "a"), nullptr).ok());
  ASSERT_TRUE(registry_.Register(Info("w2", "a"), nullptr).ok());
  registry_.Assign("w2", "job-2", 0, 0);
  EXPECT_EQ(registry_.IdleHealthyWorkers(), std::vector<std::string>{"w1"});
  std::vector<WorkerTransition> t;
  ASSERT_TRUE(registry_.Deregister("w2", "a", &t).ok());
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].to, v1::WORKER_LEFT);
  EXPECT_EQ(t[0].job_id, "job-2");
  EXPECT_EQ(registry_.Get("w2")->state(), v1::WORKER_LEFT);
  EXPECT_EQ(registry_.Heartbeat("w2", "a").code(),
            absl::StatusCode::kFailedPrecondition);
  registry_.Release("w2", "job-2");
  EXPECT_TRUE(registry_.Get("w2")->job_id().empty());
}

}  // namespace
}  // namespace aqueduct
