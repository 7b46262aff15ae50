#include "coordinator/profile_cache.h"

#include "gtest/gtest.h"

namespace aqueduct {
namespace {

JobSpec Spec(int64_t batch) {
  JobSpec spec;
  spec.mutable_model()->add_layers()->mutable_linear()->set_in_features(4);
  spec.set_batch_size(batch);
  spec.set_max_steps(10);
  return spec;
}

ModelProfile Profile(double ms) {
  ModelProfile p;
  p.add_nodes()->set_forward_ms(ms);
  return p;
}

// Two kinds of worker: each layer's slower figures, the lower GEMM rate,
// both devices named.
TEST(ProfileCacheTest, SlowestOfTakesEachLayersSlowerFigure) {
  ModelProfile fast = Profile(1), slow = Profile(3);
  fast.mutable_nodes(0)->set_backward_ms(5);
  slow.mutable_nodes(0)->set_backward_ms(4);
  fast.add_nodes()->set_forward_ms(7);
  slow.add_nodes()->set_forward_ms(2);
  v1::RecomputeCost* cost = slow.mutable_nodes(1)->add_recompute_costs();
  cost->set_mode("full");
  cost->set_backward_ms(9);
  *fast.mutable_nodes(1)->add_recompute_costs() = *cost;
  fast.mutable_nodes(1)->mutable_recompute_costs(0)->set_backward_ms(6);
  fast.set_device("cpu (2 threads)");
  slow.set_device("cpu (1 threads)");
  fast.set_gemm_gflops(40);
  slow.set_gemm_gflops(20);
  const ModelProfile both = SlowestOf(fast, slow);
  EXPECT_EQ(both.nodes(0).forward_ms(), 3);
  EXPECT_EQ(both.nodes(0).backward_ms(), 5);
  EXPECT_EQ(both.nodes(1).forward_ms(), 7);
  EXPECT_EQ(both.nodes(1).recompute_costs(0).backward_ms(), 9);
  EXPECT_EQ(both.gemm_gflops(), 20);
  EXPECT_EQ(both.device(), "slowest of cpu (2 threads) and cpu (1 threads)");
}

// The key holds what a profile depends on, and nothing else: the steps,
// the name and the pipeline do not change it.
TEST(ProfileCacheTest, KeysOnTheModelDataBatchAndDevice) {
  v1::DeviceInfo cpu;
  cpu.set_kind("cpu");
  cpu.set_name("cpu (OpenBLAS 1 threads)");
  cpu.set_threads(1);
  JobSpec other_run = Spec(16);
  other_run.set_max_steps(99);
  other_run.set_name("again");
  other_run.mutable_pipeline()->set_workers(4);
  EXPECT_EQ(ProfileCache::KeyOf(Spec(16), cpu),
            ProfileCache::KeyOf(other_run, cpu));
  EXPECT_NE(ProfileCache::KeyOf(Spec(16), cpu),
            ProfileCache::KeyOf(Spec(32), cpu));
  v1::DeviceInfo two = cpu;
  two.set_threads(2);
  EXPECT_NE(ProfileCache::KeyOf(Spec(16), cpu),
            ProfileCache::KeyOf(Spec(16), two));
  JobSpec wider = Spec(16);
  wider.mutable_model()->mutable_layers(0)->mutable_linear()->set_in_features(
      8);
  EXPECT_NE(ProfileCache::KeyOf(Spec(16), cpu),
            ProfileCache::KeyOf(wider, cpu));
}

TEST(ProfileCacheTest, FindsWhatWasPutAndForgetsTheOldest) {
  ProfileCache cache(2);
  EXPECT_FALSE(cache.Find("a").has_value());
  cache.Put("a", Profile(1));
  cache.Put("b", Profile(2));
  ASSERT_TRUE(cache.Find("a").has_value());
  EXPECT_EQ(cache.Find("a")->nodes(0).forward_ms(), 1);
  cache.Put("c", Profile(3));
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_FALSE(cache.Find("a").has_value());
  EXPECT_EQ(cache.Find("c")->nodes(0).forward_ms(), 3);
  cache.Put("c", Profile(4));  // Replaced, not added.
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.Find("c")->nodes(0).forward_ms(), 4);
}

}  // namespace
}  // namespace aqueduct
