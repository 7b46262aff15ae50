// The pieces of data parallelism on their own: the flat layout and its
// buckets, element-range views, the bucket reducer over a real ring, and
// a parameter shard's consistency rules (sync sums in replica order,
// bounded lets a replica run S steps ahead and no further, async applies
// every push and drops a lost replica), its messages and their errors.
#include "worker/runtime/data_parallel.h"

#include <atomic>
#include <thread>

#include "absl/time/clock.h"
#include "common/comm/in_memory.h"
#include "common/device/cpu_device.h"
#include "gtest/gtest.h"
#include "worker/nn/spec.h"
#include "worker/runtime/param_server.h"

namespace aqueduct {
namespace {

// Layers 0..3 holding tensors of 6, (4, 2), none, 3 floats.
ParameterSet Params(Device* device) {
  ParameterSet set;
  set.begin = 0;
  set.end = 4;
  const std::vector<std::vector<int64_t>> sizes = {{6}, {4, 2}, {}, {3}};
  int index = 0;
  for (int l = 0; l < 4; ++l) {
    set.offsets.push_back(static_cast<int>(set.tensors.size()));
    for (int64_t n : sizes[l]) {
      set.names.push_back("layers." + std::to_string(l) + ".p" +
                          std::to_string(index++));
      set.tensors.push_back(*device->Zeros(Shape({n}), DType::kF32));
    }
  }
  set.offsets.push_back(static_cast<int>(set.tensors.size()));
  return set;
}

TEST(FlatLayoutTest, TensorsInBackwardOrderCutIntoBucketsOfWholeLayers) {
  CpuDevice device(CpuDeviceOptions{1});
  const ParameterSet params = Params(&device);
  const FlatLayout one = MakeFlatLayout(params, 1);
  // Layer 3 first (3 floats), then layer 1 (4 + 2), then layer 0 (6).
  EXPECT_EQ(one.offset, (std::vector<int64_t>{9, 3, 7, 0}));
  ASSERT_EQ(one.buckets.size(), 3u);
  EXPECT_EQ(one.buckets[0].lowest_layer, 3);
  EXPECT_EQ(one.buckets[1].begin, 3);
  EXPECT_EQ(one.buckets[1].end, 9);
  EXPECT_EQ(one.buckets[1].lowest_layer, 1);
  EXPECT_EQ(one.buckets[2].lowest_layer, 0);
  EXPECT_EQ(one.total, 15);
  const FlatLayout two = MakeFlatLayout(params, 9);
  ASSERT_EQ(two.buckets.size(), 2u);  // Layers 3 and 1, then layer 0.
  EXPECT_EQ(two.buckets[0].end, 9);
  EXPECT_EQ(MakeFlatLayout(params, 1000).buckets.size(), 1u);
  // Every element owned once, by member r's part of every bucket.
  std::vector<int> owners(one.total, 0);
  for (int r = 0; r < 4; ++r) {
    for (const auto& [lo, hi] : one.Owned(r, 4)) {
      for (int64_t i = lo; i < hi; ++i) ++owners[i];
    }
  }
  EXPECT_EQ(owners, std::vector<int>(one.total, 1));
}

TEST(FlatLayoutTest, BucketSizes) {
  EXPECT_EQ(BucketFloats(1, 1 << 30), 262144);
  EXPECT_EQ(BucketFloats(0, 1000), 250);  // A quarter of a small stage.
  EXPECT_EQ(BucketFloats(0, int64_t{1} << 30), 25 * 262144);  // DDP's 25 MiB.
}

TEST(FlatLayoutTest, ViewsShareTheFlatBufferAndTheTensors) {
  CpuDevice device(CpuDeviceOptions{1});
  const ParameterSet params = Params(&device);
  const FlatLayout layout = MakeFlatLayout(params, 1);
  Tensor flat;
  const ParameterSet grads = *FlatZerosLike(params, layout, &device, &flat);
  for (int64_t i = 0; i < flat.numel(); ++i) flat.f32()[i] = i;
  // Tensor 1 (layer 1's first) starts at element 3 of the flat buffer.
  EXPECT_EQ(grads.tensors[1].f32()[0], 3.0f);
  EXPECT_EQ(grads.tensors[3].f32()[2], 2.0f);
  std::vector<int64_t> starts;
  // [5, 10): the end of tensor 1, tensor 2, the start of tensor 0.
  const ParameterSet views = RangeViews(grads, layout, {{5, 10}}, &starts);
  ASSERT_EQ(views.names, (std::vector<std::string>{"layers.0.p0", "layers.1.p1",
                                                   "layers.1.p2"}));
  EXPECT_EQ(starts, (std::vector<int64_t>{0, 2, 0}));
  EXPECT_EQ(views.tensors[0].numel(), 1);
  EXPECT_EQ(views.tensors[0].f32()[0], 9.0f);
  EXPECT_EQ(views.tensors[1].numel(), 2);
  EXPECT_EQ(views.tensors[1].f32()[0], 5.0f);
  EXPECT_EQ(views.tensors[2].numel(), 2);
  // CopyRange moves a flat range in and out of the tensors.
  Tensor part = *device.Zeros(Shape({5}), DType::kF32);
  CopyRange(&device, layout, grads, 5, 10, part, true);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(part.f32()[i], 5.0f + i);
  device.Fill(part.f32(), 5, -1.0f);
  CopyRange(&device, layout, grads, 5, 10, part, false);
  EXPECT_EQ(flat.f32()[4], 4.0f);
  EXPECT_EQ(flat.f32()[7], -1.0f);
  EXPECT_EQ(flat.f32()[10], 10.0f);
}

TEST(BucketReducerTest, ThreadedBucketsSumAcrossTheRing) {
  const int p = 3;
  auto hub = std::make_shared<InMemoryHub>(p);
  std::vector<std::vector<float>> data(p, std::vector<float>(10));
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) {
    threads.emplace_back([&, r] {
      InMemoryCommunicator comm(hub, r);
      auto group = *ProcessGroup::Make(&comm, {0, 1, 2}, 1, "replicas");
      for (int i = 0; i < 10; ++i) data[r][i] = r + 1 + i;
      BucketReducer reducer(group.get(), absl::Seconds(10), true);
      reducer.Launch(BucketReducer::Kind::kAllReduce, data[r].data(), 4);
      reducer.Launch(BucketReducer::Kind::kReduceScatter, data[r].data() + 4,
                     6);
      EXPECT_TRUE(reducer.Wait(absl::Now() + absl::Seconds(10)).ok());
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < p; ++r) {
    for (int i = 0; i < 4; ++i) EXPECT_EQ(data[r][i], 6 + 3 * i);
    // Member r's part (2 of 6) of the scattered bucket.
    for (int i = 4 + 2 * r; i < 6 + 2 * r; ++i)
      EXPECT_EQ(data[r][i], 6 + 3 * i);
  }
}

// A shard of 2 floats under plain SGD (lr 1): weights -= summed gradient.
// (On a CPU device of its own, as the stages make them.)
std::unique_ptr<ParameterShard> Shard(Consistency c, int S, int replicas,
                                      int64_t steps) {
  auto own = std::make_unique<CpuDevice>(CpuDeviceOptions{1});
  Device* device = own.get();
  JobSpec spec = *ParseJobSpec(
      "model { layers { linear { in_features: 1 out_features: 2 } } } "
      "optimizer { sgd { lr: 1 } }",
      "shard");
  Tensor w = *device->Zeros(Shape({2}), DType::kF32);
  Tensor g = *device->Zeros(Shape({2}), DType::kF32);
  ParameterSet views, grad_views;
  views.names = grad_views.names = {"layers.0.bias"};
  views.tensors = {w};
  grad_views.tensors = {g};
  auto optimizer =
      *CreateOptimizer(spec.optimizer(), views, device, steps, nullptr);
  ParameterShard::Config config{0, replicas, c, S, 0, steps};
  return std::make_unique<ParameterShard>(config, std::move(own), w, views, g,
                                          grad_views, std::move(optimizer));
}

absl::Time Soon() { return absl::Now() + absl::Seconds(5); }

TEST(ParameterShardTest, SyncSumsEveryReplicaThenSteps) {
  auto shard = Shard(Consistency::kSync, 0, 2, 4);
  const float g0[] = {1, 2}, g1[] = {10, 20};
  ASSERT_TRUE(shard->Push(1, 0, 0, g1).ok());
  float out[2];
  // Replica 1 may not go on before replica 0's push of step 0.
  EXPECT_EQ(shard->Pull(1, 0, out, absl::Now() + absl::Milliseconds(20))
                .status()
                .code(),
            absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(shard->Push(0, 0, 0, g0).ok());
  auto update = shard->Pull(1, 0, out, Soon());
  ASSERT_TRUE(update.ok()) << update.status();
  EXPECT_EQ(*update, 1);
  EXPECT_EQ(out[0], -11.0f);
  EXPECT_EQ(out[1], -22.0f);
  EXPECT_EQ(shard->StalenessHistogram(), std::vector<int64_t>{2});
  // A gradient of an update the shard has not made is refused.
  EXPECT_EQ(shard->Push(0, 1, 7, g0).code(),
            absl::StatusCode::kInvalidArgument);
  // A push out of turn is refused, naming the step due.
  const absl::Status twice = shard->Push(0, 0, 1, g0);
  EXPECT_EQ(twice.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(twice.message().find("where step 1 was due"), std::string::npos)
      << twice;
}

TEST(ParameterShardTest, BoundedLetsAReplicaRunSStepsAheadAndNoFurther) {
  auto shard = Shard(Consistency::kBounded, 2, 2, 10);
  const float g[] = {1, 1};
  float out[2];
  auto quick = [] { return absl::Now() + absl::Milliseconds(20); };
  // Replica 0 pushes steps 0 and 1 alone: it may go on (S = 2) ...
  for (int64_t c : {0, 1}) {
    ASSERT_TRUE(shard->Push(0, c, 0, g).ok());
    EXPECT_TRUE(shard->Pull(0, c, out, quick()).ok()) << c;
  }
  // ... but not past step 2 while replica 1 has not pushed step 0.
  ASSERT_TRUE(shard->Push(0, 2, 0, g).ok());
  EXPECT_FALSE(shard->Pull(0, 2, out, quick()).ok());
  EXPECT_EQ(shard->updates(), 0);
  ASSERT_TRUE(shard->Push(1, 0, 0, g).ok());
  auto update = shard->Pull(0, 2, out, Soon());
  ASSERT_TRUE(update.ok()) << update.status();
  EXPECT_EQ(*update, 1);
  EXPECT_EQ(out[0], -2.0f);
}

TEST(ParameterShardTest, AsyncAppliesEveryPushAndDropsALostReplica) {
  auto shard = Shard(Consistency::kAsync, 0, 3, 2);
  const float g[] = {1, 0};
  float out[2];
  ASSERT_TRUE(shard->Push(0, 0, 0, g).ok());
  ASSERT_TRUE(shard->Pull(0, 0, out, Soon()).ok());
  EXPECT_EQ(out[0], -1.0f);
  ASSERT_TRUE(shard->Push(1, 0, 0, g).ok());  // One update stale.
  ASSERT_TRUE(shard->Push(0, 1, 1, g).ok());  // Also one (update 2).
  EXPECT_EQ(shard->StalenessHistogram(), (std::vector<int64_t>{1, 2}));
  // The last step waits for every live replica's last push: replica 2 is
  // lost, replica 1 still owes step 1.
  EXPECT_FALSE(
      shard->Pull(0, 1, out, absl::Now() + absl::Milliseconds(20)).ok());
  shard->Drop(2);
  ASSERT_TRUE(shard->Push(1, 1, 2, g).ok());
  auto update = shard->Pull(0, 1, out, Soon());
  ASSERT_TRUE(update.ok()) << update.status();
  EXPECT_EQ(*update, 4);
  EXPECT_EQ(out[0], -4.0f);
}

TEST(ShardMessageTest, RoundTripAndErrors) {
  const float data[] = {1.5f, -2.0f, 3.25f};
  const std::string message = EncodeShardMessage(7, 42, data, 3);
  float out[3];
  auto update = DecodeShardMessage(message, 7, out, 3);
  ASSERT_TRUE(update.ok()) << update.status();
  EXPECT_EQ(*update, 42);
  EXPECT_EQ(out[2], 3.25f);
  EXPECT_EQ(DecodeShardMessage(message, 8, out, 3).status().message(),
            "a parameter-shard message of step 7 arrived where step 8 was "
            "due");
  EXPECT_EQ(DecodeShardMessage(message, 7, out, 2).status().message(),
            "a parameter-shard message of step 7 has 28 bytes, not 24");
  EXPECT_NE(PushTag(0, 0, 1), PullTag(0, 0, 1));
  EXPECT_NE(PushTag(0, 1, 1), PushTag(1, 1, 1));
}

}  // namespace
}  // namespace aqueduct
