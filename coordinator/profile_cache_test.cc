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
