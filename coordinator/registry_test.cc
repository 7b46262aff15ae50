#include "coordinator/registry.h"

#include <functional>
#include <limits>

#include "absl/strings/str_cat.h"
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
    // These tests jump the clock between readings, which a running
    // coordinator (reading it every 100 ms) would take for a stall of its
    // own; the stall tests below use the default.
    o.stall_after = absl::InfiniteDuration();
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

// A silent worker its job vouches for is UNREACHABLE (not final: a
// heartbeat brings it back) until the vouching runs out; a released worker
// is vouched for no more.
TEST_F(RegistryTest, VouchedForWorkersAreUnreachableUntilTheVouchingEnds) {
  ASSERT_TRUE(registry_.Register(Info("w1", "a"), nullptr).ok());
  registry_.Assign("w1", "job-1", 1, 0);
  registry_.Vouch("nobody", clock_.Now() + absl::Seconds(100));  // Ignored.
  clock_.Advance(absl::Seconds(9));
  registry_.Vouch("w1", clock_.Now() + absl::Seconds(10));
  clock_.Advance(absl::Seconds(1));
  auto t = registry_.Tick();
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].to, v1::WORKER_UNREACHABLE);
  EXPECT_EQ(t[0].detail,
            "no heartbeat for 10.0 s, but its job keeps committing steps");
  EXPECT_TRUE(registry_.IdleHealthyWorkers().empty());
  EXPECT_TRUE(registry_.CheckLive("w1", "a").ok());
  clock_.Advance(absl::Seconds(8));
  EXPECT_TRUE(registry_.Tick().empty());
  clock_.Advance(absl::Seconds(1));
  t = registry_.Tick();
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].from, v1::WORKER_UNREACHABLE);
  EXPECT_EQ(t[0].to, v1::WORKER_DEAD);
  EXPECT_EQ(t[0].detail,
            "no heartbeat for 19.0 s, and its job has committed no step for "
            "10.0 s");
  // Released from its job, a worker is not vouched for.
  ASSERT_TRUE(registry_.Register(Info("w2", "b"), nullptr).ok());
  registry_.Assign("w2", "job-1", 0, 0);
  registry_.Vouch("w2", clock_.Now() + absl::Seconds(30));
  registry_.Release("w2", "job-1");
  clock_.Advance(absl::Seconds(10));
  t = registry_.Tick();
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].to, v1::WORKER_DEAD);
  EXPECT_EQ(t[0].detail, "no heartbeat for 10.0 s");
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
  // Without naming the live incarnation, which proves a worker's calls.
  EXPECT_EQ(old.message(),
            "worker w1 incarnation a is not the registered one: a newer "
            "incarnation has fenced it");
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

TEST_F(RegistryTest, EveryFieldIsBounded) {
  const std::string big(4096, 'x');
  struct Case {
    const char* field;
    std::function<void(WorkerInfo*)> spoil;
  };
  const Case cases[] = {
      {"worker_id", [&](WorkerInfo* i) { i->set_worker_id(big); }},
      {"worker_id", [](WorkerInfo* i) { i->set_worker_id("a/../b"); }},
      {"incarnation", [&](WorkerInfo* i) { i->set_incarnation(big); }},
      {"incarnation", [](WorkerInfo* i) { i->clear_incarnation(); }},
      {"info.address", [&](WorkerInfo* i) { i->set_address(big + ":1"); }},
      {"info.address", [](WorkerInfo* i) { i->set_address("h:99999"); }},
      {"info.address", [](WorkerInfo* i) { i->clear_address(); }},
      {"info.version", [&](WorkerInfo* i) { i->set_version("0.1." + big); }},
      {"info.proto_hash", [&](WorkerInfo* i) { i->set_proto_hash(big); }},
      {"info.host", [](WorkerInfo* i) { i->set_host("h\nforged log line"); }},
      {"info.host", [&](WorkerInfo* i) { i->set_host(big); }},
      {"info.device.kind",
       [&](WorkerInfo* i) { i->mutable_device()->set_kind(big); }},
      {"info.device.name",
       [&](WorkerInfo* i) { i->mutable_device()->set_name(big); }},
      {"info.device.memory_bytes",
       [](WorkerInfo* i) { i->mutable_device()->set_memory_bytes(-1); }},
      {"info.device.gemm_gflops",
       [](WorkerInfo* i) {
         i->mutable_device()->set_gemm_gflops(
             std::numeric_limits<double>::quiet_NaN());
       }},
      {"info.device.gemm_gflops",
       [](WorkerInfo* i) { i->mutable_device()->set_gemm_gflops(-1); }},
  };
  for (const Case& c : cases) {
    WorkerInfo info = Info("w1", "a");
    c.spoil(&info);
    const absl::Status s = registry_.Register(info, nullptr);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_EQ(s.message().rfind(absl::StrCat("RegisterWorker: ", c.field), 0),
              0u)
        << s.message();
    // Never the whole of a huge value.
    EXPECT_LT(s.message().size(), 250u) << s.message();
  }
  EXPECT_EQ(registry_.size(), 0u);
  WorkerInfo max = Info(std::string(kMaxWorkerIdBytes, 'w'),
                        std::string(kMaxWorkerIdBytes, 'i'));
  max.set_address(std::string(249, 'h') + ":65535");
  max.set_host(std::string(kMaxWorkerTextBytes, 'h'));
  max.mutable_device()->set_name(std::string(kMaxWorkerTextBytes, 'n'));
  EXPECT_TRUE(registry_.Register(max, nullptr).ok());
  // The calls a worker makes about itself check its names too.
  EXPECT_EQ(registry_.Heartbeat(big, "a").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry_.CheckLive("w1", big).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry_.Deregister("", "a", nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(RegistryTest, AtMostMaxWorkers) {
  RegistryOptions o = Options();
  o.max_workers = 2;
  Registry registry(o, &clock_);
  ASSERT_TRUE(registry.Register(Info("w1", "a"), nullptr).ok());
  ASSERT_TRUE(registry.Register(Info("w2", "a"), nullptr).ok());
  const absl::Status full = registry.Register(Info("w3", "a"), nullptr);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(full.message(),
            "the coordinator has 2 workers registered, the most it keeps "
            "(--max_workers=2); DEAD and LEFT ones are forgotten after 10m");
  // Known ids may still register again (a restart).
  EXPECT_TRUE(registry.Register(Info("w2", "b"), nullptr).ok());
}

TEST_F(RegistryTest, DeadAndLeftWorkersAreForgotten) {
  ASSERT_TRUE(registry_.Register(Info("w1", "a"), nullptr).ok());
  ASSERT_TRUE(registry_.Register(Info("w2", "a"), nullptr).ok());
  ASSERT_TRUE(registry_.Register(Info("w3", "a"), nullptr).ok());
  ASSERT_TRUE(registry_.Deregister("w2", "a", nullptr).ok());
  // Time passes; w3 heartbeats, w1 does not.
  auto pass = [&](absl::Duration d) {
    for (absl::Duration t; t < d; t += absl::Seconds(1)) {
      clock_.Advance(absl::Seconds(1));
      ASSERT_TRUE(registry_.Heartbeat("w3", "a").ok());
      registry_.Tick();
    }
  };
  pass(absl::Seconds(10));
  EXPECT_EQ(registry_.Get("w1")->state(), v1::WORKER_DEAD);
  // w2 left 10 s before w1 died.
  pass(absl::Minutes(10) - absl::Seconds(10));
  std::vector<WorkerStatus> forgotten = registry_.ForgetFinal();
  ASSERT_EQ(forgotten.size(), 1u);
  EXPECT_EQ(forgotten[0].info().worker_id(), "w2");
  EXPECT_EQ(registry_.List().size(), 2u);
  pass(absl::Seconds(9));
  EXPECT_TRUE(registry_.ForgetFinal().empty());
  pass(absl::Seconds(1));
  forgotten = registry_.ForgetFinal();
  ASSERT_EQ(forgotten.size(), 1u);
  EXPECT_EQ(forgotten[0].info().worker_id(), "w1");
  EXPECT_EQ(forgotten[0].state(), v1::WORKER_DEAD);
  ASSERT_EQ(registry_.List().size(), 1u);
  EXPECT_EQ(registry_.Get("w1").status().code(), absl::StatusCode::kNotFound);
  // A healthy worker is never forgotten; a forgotten id registers afresh.
  EXPECT_EQ(registry_.List()[0].info().worker_id(), "w3");
  EXPECT_TRUE(registry_.Register(Info("w1", "b"), nullptr).ok());
}

TEST_F(RegistryTest, ListPageGoesInIdOrderWithinItsBounds) {
  for (const char* id : {"c", "a", "e", "b", "d"}) {
    ASSERT_TRUE(registry_.Register(Info(id, "a"), nullptr).ok());
  }
  bool more = false;
  std::vector<WorkerStatus> page = registry_.ListPage("", 2, 1 << 20, &more);
  ASSERT_EQ(page.size(), 2u);
  EXPECT_EQ(page[0].info().worker_id(), "a");
  EXPECT_EQ(page[1].info().worker_id(), "b");
  EXPECT_TRUE(more);
  page = registry_.ListPage("b", 10, 1 << 20, &more);
  ASSERT_EQ(page.size(), 3u);
  EXPECT_EQ(page[0].info().worker_id(), "c");
  EXPECT_FALSE(more);
  // A byte budget cuts the page, but a page holds at least one worker.
  page = registry_.ListPage("", 10, 1, &more);
  ASSERT_EQ(page.size(), 1u);
  EXPECT_TRUE(more);
  // After an id that is gone: from the next one there is.
  page = registry_.ListPage("bb", 10, 1 << 20, &more);
  EXPECT_EQ(page[0].info().worker_id(), "c");
}

// The regression: 18,000 registrations with 4 KB fields made
// ListWorkers exceed the message limit. Each is refused by the field
// limits and nothing is kept.
TEST_F(RegistryTest, EighteenThousandRegistrationsWithHugeFieldsAreRefused) {
  const std::string big(4096, 'x');
  for (int i = 0; i < 18000; ++i) {
    WorkerInfo info = Info(absl::StrCat("w", i), "a");
    switch (i % 3) {
      case 0:
        info.set_worker_id(absl::StrCat(big, i));
        break;
      case 1:
        info.set_host(big);
        break;
      default:
        info.mutable_device()->set_name(big);
    }
    ASSERT_EQ(registry_.Register(info, nullptr).code(),
              absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(registry_.size(), 0u);
}

// A registry as the coordinator runs it: default options (a stall is a gap
// of more than dead_after / 2 between readings), read every 100 ms.
class RegistryStallTest : public ::testing::Test {
 protected:
  RegistryStallTest() : registry_(Options(), &clock_) {}
  static RegistryOptions Options() {
    RegistryOptions o;
    o.heartbeat_interval = absl::Seconds(1);
    o.suspect_after_missed = 3;
    o.dead_after = absl::Seconds(10);
    return o;
  }
  // Advances the clock in ticks of 100 ms, heartbeating `alive` every
  // second; returns the transitions seen.
  std::vector<WorkerTransition> Run(absl::Duration d,
                                    const std::vector<std::string>& alive) {
    std::vector<WorkerTransition> all;
    for (absl::Duration t; t < d; t += absl::Milliseconds(100)) {
      clock_.Advance(absl::Milliseconds(100));
      ++ticks_;
      if (ticks_ % 10 == 0) {
        for (const std::string& w : alive) {
          EXPECT_TRUE(registry_.Heartbeat(w, "a").ok()) << w;
        }
      }
      for (WorkerTransition& x : registry_.Tick()) all.push_back(x);
    }
    return all;
  }
  FakeClock clock_;
  Registry registry_;
  int64_t ticks_ = 0;
};

TEST_F(RegistryStallTest, AStallOfTheCoordinatorBlamesNoWorker) {
  ASSERT_TRUE(registry_.Register(Info("w1", "a"), nullptr).ok());
  ASSERT_TRUE(registry_.Register(Info("w2", "a"), nullptr).ok());
  EXPECT_TRUE(Run(absl::Seconds(2), {"w1", "w2"}).empty());
  // SIGSTOP for 16 s: no reading of the clock, no heartbeat heard.
  clock_.Advance(absl::Seconds(16));
  EXPECT_TRUE(registry_.Tick().empty());
  EXPECT_EQ(registry_.stalls(), 1);
  EXPECT_EQ(registry_.Get("w1")->state(), v1::WORKER_HEALTHY);
  EXPECT_EQ(registry_.Get("w2")->state(), v1::WORKER_HEALTHY);
}

TEST_F(RegistryStallTest, AHeartbeatQueuedDuringAStallIsTaken) {
  ASSERT_TRUE(registry_.Register(Info("w1", "a"), nullptr).ok());
  EXPECT_TRUE(Run(absl::Seconds(1), {"w1"}).empty());
  clock_.Advance(absl::Seconds(16));
  // The first thing the coordinator does on resuming is a heartbeat that
  // waited in its socket: not "lease expired".
  EXPECT_TRUE(registry_.Heartbeat("w1", "a").ok());
  EXPECT_TRUE(registry_.Tick().empty());
}

TEST_F(RegistryStallTest, AWorkerSilentAfterTheStallStillDies) {
  ASSERT_TRUE(registry_.Register(Info("w1", "a"), nullptr).ok());
  ASSERT_TRUE(registry_.Register(Info("w2", "a"), nullptr).ok());
  EXPECT_TRUE(Run(absl::Seconds(1), {"w1", "w2"}).empty());
  clock_.Advance(absl::Seconds(16));
  // w2 froze with the coordinator and never speaks again: DEAD a full
  // dead_after after the stall, counted from its end.
  std::vector<WorkerTransition> t = Run(absl::Seconds(9.9), {"w1"});
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].to, v1::WORKER_SUSPECT);
  t = Run(absl::Milliseconds(200), {"w1"});
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].worker_id, "w2");
  EXPECT_EQ(t[0].to, v1::WORKER_DEAD);
  EXPECT_EQ(t[0].detail, "no heartbeat for 10.0 s");
  EXPECT_EQ(registry_.Get("w1")->state(), v1::WORKER_HEALTHY);
}

TEST_F(RegistryStallTest, AFrozenWorkerDiesWhileTheCoordinatorRuns) {
  ASSERT_TRUE(registry_.Register(Info("w1", "a"), nullptr).ok());
  ASSERT_TRUE(registry_.Register(Info("w2", "a"), nullptr).ok());
  std::vector<WorkerTransition> t = Run(absl::Seconds(10.1), {"w1"});
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[1].worker_id, "w2");
  EXPECT_EQ(t[1].to, v1::WORKER_DEAD);
  EXPECT_EQ(registry_.stalls(), 0);
}

TEST_F(RegistryStallTest, SettingTheWallClockMovesNoLease) {
  ASSERT_TRUE(registry_.Register(Info("w1", "a"), nullptr).ok());
  ASSERT_TRUE(registry_.Register(Info("w2", "a"), nullptr).ok());
  // +1 h: a healthy worker stays HEALTHY.
  clock_.StepWall(absl::Hours(1));
  EXPECT_TRUE(Run(absl::Seconds(2), {"w1", "w2"}).empty());
  // -30 min: a frozen worker (w2) still dies on time.
  clock_.StepWall(-absl::Minutes(30));
  std::vector<WorkerTransition> t = Run(absl::Seconds(10.5), {"w1"});
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[1].to, v1::WORKER_DEAD);
  // What is shown is wall time (30 min ahead of the monotonic reading).
  const int64_t shown = registry_.Get("w1")->last_heartbeat_ms();
  EXPECT_LE(shown, absl::ToUnixMillis(clock_.WallNow()));
  EXPECT_GT(shown, absl::ToUnixMillis(clock_.WallNow() - absl::Seconds(1)));
}

}  // namespace
}  // namespace aqueduct
