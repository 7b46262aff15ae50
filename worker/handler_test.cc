// WorkerHandler without gRPC: profiles run off the calling thread and a call
// waits no longer than its deadline; link probes are bounded; assignments
// reach the runtime; the status names the worker.
#include "worker/handler.h"

#include "common/clock.h"
#include "common/comm/local_store.h"
#include "gtest/gtest.h"
#include "worker/runtime/in_memory_data_plane.h"

namespace aqueduct {
namespace {

v1::ProfileRequest SmallProfile() {
  v1::ProfileRequest r;
  JobSpec* spec = r.mutable_spec();
  spec->set_name("p");
  spec->mutable_model()->add_layers()->mutable_flatten();
  auto* linear = spec->mutable_model()->add_layers()->mutable_linear();
  linear->set_in_features(8);
  linear->set_out_features(4);
  auto* data = spec->mutable_data()->mutable_synthetic();
  data->add_sample_shape(8);
  data->set_num_classes(4);
  data->set_train_samples(64);
  spec->mutable_optimizer()->mutable_sgd()->set_lr(0.1f);
  spec->set_batch_size(8);
  spec->set_max_steps(4);
  r.set_warmup_iterations(1);
  r.set_measured_iterations(2);
  return r;
}

class WorkerHandlerTest : public ::testing::Test {
 protected:
  WorkerHandlerTest()
      : runtime_(StageRuntimeOptions(), &data_plane_, &store_),
        handler_(&runtime_, DeviceSpec(), 1, [] {
          WorkerInfo info;
          info.set_worker_id("w1");
          return info;
        }) {}
  InMemoryDataPlaneFactory data_plane_;
  LocalRendezvousStore store_;
  StageRuntime runtime_;
  WorkerHandler handler_;
};

TEST_F(WorkerHandlerTest, ProfilesOnItsOwnThread) {
  auto profile =
      handler_.Profile(SmallProfile(), MonotonicNow() + absl::Seconds(60));
  ASSERT_TRUE(profile.ok()) << profile.status();
  EXPECT_EQ(profile->nodes_size(), 2);
  EXPECT_EQ(profile->batch_size(), 8);
}

TEST_F(WorkerHandlerTest, AProfileWaitsNoLongerThanItsDeadline) {
  const absl::Time start = MonotonicNow();
  auto profile = handler_.Profile(SmallProfile(), start);  // Already due.
  EXPECT_EQ(profile.status().code(), absl::StatusCode::kDeadlineExceeded)
      << profile.status();
  // The handler serves on: the next profile runs (once the one given up
  // on has left the queue: until then a third is refused as busy).
  absl::StatusOr<ModelProfile> next;
  const absl::Time until = MonotonicNow() + absl::Seconds(60);
  do {
    next = handler_.Profile(SmallProfile(), until);
  } while (absl::IsResourceExhausted(next.status()) && MonotonicNow() < until);
  EXPECT_TRUE(next.ok()) << next.status();
}

TEST_F(WorkerHandlerTest, ABadProfileSpecIsNamed) {
  v1::ProfileRequest r = SmallProfile();
  r.mutable_spec()
      ->mutable_model()
      ->mutable_layers(1)
      ->mutable_linear()
      ->set_in_features(9);  // The data has 8.
  auto profile = handler_.Profile(r, MonotonicNow() + absl::Seconds(60));
  EXPECT_FALSE(profile.ok());
  EXPECT_NE(profile.status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(WorkerHandlerTest, MeasureLinksChecksItsBounds) {
  v1::MeasureLinksRequest r;
  r.set_bytes(0);
  r.set_deadline_ms(1000);
  auto m = handler_.MeasureLinks(r, MonotonicNow() + absl::Seconds(5),
                                 [] { return false; });
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  r.set_bytes(1024);
  v1::LinkTarget* t = r.add_targets();
  t->set_worker_id("w2");
  t->set_host("127.0.0.1");
  t->set_port(70000);
  m = handler_.MeasureLinks(r, MonotonicNow() + absl::Seconds(5),
                            [] { return false; });
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->results_size(), 1);
  EXPECT_EQ(m->results(0).error(), "port 70000 is out of range");
  m = handler_.MeasureLinks(r, MonotonicNow() + absl::Seconds(5),
                            [] { return true; });
  EXPECT_EQ(m.status().code(), absl::StatusCode::kCancelled);
}

TEST_F(WorkerHandlerTest, AssignmentsReachTheRuntime) {
  StageAssignment a;
  a.set_job_id("job-1");
  a.mutable_plan()->add_stages()->set_replicas(1);
  ASSERT_TRUE(handler_.AssignStage(a).ok());
  const WorkerRuntimeStatus s = handler_.GetStatus();
  EXPECT_EQ(s.info().worker_id(), "w1");
  EXPECT_EQ(s.phase(), "assigned");
  v1::StopJobRequest stop;
  stop.set_job_id("job-1");
  EXPECT_TRUE(handler_.StopJob(stop).ok());
}

}  // namespace
}  // namespace aqueduct
