#include "worker/profiler.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "common/device/cpu_device.h"
#include "gtest/gtest.h"
#include "worker/nn/spec.h"

namespace aqueduct {
namespace {

constexpr char kSpec[] = R"pb(
  model {
    layers { flatten {} }
    layers { linear { in_features: 12 out_features: 8 } }
    layers { delay { forward_ms: 3 backward_ms: 5 } }
    layers { relu {} }
    layers { linear { in_features: 8 out_features: 3 bias: false } }
  }
  data {
    synthetic {
      sample_shape: [ 3, 4 ]
      num_classes: 3
      train_samples: 64
      seed: 1
    }
  }
  optimizer { sgd { lr: 0.1 } }
  batch_size: 16
  max_steps: 1
)pb";

TEST(ProfilerTest, ProfilesEveryLayer) {
  auto spec = ParseJobSpec(kSpec, "test");
  ASSERT_TRUE(spec.ok()) << spec.status();
  CpuDevice device(CpuDeviceOptions{1});
  ProfilerOptions options;
  options.warmup_iterations = 1;
  options.measured_iterations = 3;
  auto profile = ProfileModel(*spec, &device, options);
  ASSERT_TRUE(profile.ok()) << profile.status();
  ASSERT_EQ(profile->nodes_size(), 5);
  ASSERT_EQ(profile->edges_size(), 4);
  EXPECT_EQ(profile->edges(0).from(), "layer0");
  EXPECT_EQ(profile->edges(3).to(), "layer4");
  EXPECT_EQ(profile->batch_size(), 16);
  EXPECT_GT(profile->gemm_gflops(), 0);
  const LayerProfile& fc1 = profile->nodes(1);
  EXPECT_EQ(fc1.layer_index(), 1);
  EXPECT_DOUBLE_EQ(fc1.parameter_bytes(), (12 * 8 + 8) * 4);
  EXPECT_DOUBLE_EQ(fc1.activation_bytes(), 16 * 8 * 4);
  EXPECT_GE(fc1.forward_ms(), 0);
  // The Delay layer sleeps at least what it is told.
  const LayerProfile& delay = profile->nodes(2);
  EXPECT_GE(delay.forward_ms(), 3.0);
  EXPECT_GE(delay.backward_ms(), 5.0);
  EXPECT_NE(delay.description().find("delay"), std::string::npos);
  EXPECT_DOUBLE_EQ(profile->nodes(4).parameter_bytes(), 8 * 3 * 4);
  // Training runs no backward below the first layer with parameters (no
  // one needs the input's gradient); the profile says so.
  EXPECT_EQ(profile->nodes(0).backward_ms(), 0);
  // The weight update is measured for layers with parameters only.
  EXPECT_GT(fc1.optimizer_ms(), 0);
  EXPECT_EQ(delay.optimizer_ms(), 0);
  EXPECT_EQ(profile->nodes(3).optimizer_ms(), 0);

  options.measured_iterations = 0;
  EXPECT_FALSE(ProfileModel(*spec, &device, options).ok());
}

// A GPT's blocks: each recomputation mode's backward and saved bytes,
// measured (selective keeps all but the attention weights, full the input
// alone); the other layers have none.
TEST(ProfilerTest, MeasuresEachRecomputationModeOfTheBlocks) {
  const std::string path = testing::TempDir() + "/profiler_text.txt";
  std::FILE* f = std::fopen(path.c_str(), "w");
  for (int i = 0; i < 200; ++i) std::fputs("the quick brown fox. ", f);
  std::fclose(f);
  auto spec = ParseJobSpec(absl::StrFormat(R"spec(
        model {
          layers { token_embedding { vocab_size: 32 dim: 16 } }
          layers { transformer_block { dim: 16 heads: 2 } }
          layers { linear { in_features: 16 out_features: 32 } }
        }
        data { text { files: "%s" context: 8 tokenizer: "chars" } }
        optimizer { sgd { lr: 0.1 } }
        batch_size: 4
        max_steps: 1
      )spec",
                                           path),
                           "test");
  ASSERT_TRUE(spec.ok()) << spec.status();
  CpuDevice device(CpuDeviceOptions{1});
  ProfilerOptions options;
  options.warmup_iterations = 1;
  options.measured_iterations = 2;
  options.measure_gemm = false;
  auto profile = ProfileModel(*spec, &device, options);
  ASSERT_TRUE(profile.ok()) << profile.status();
  EXPECT_EQ(profile->nodes(0).recompute_costs_size(), 0);
  const LayerProfile& block = profile->nodes(1);
  ASSERT_EQ(block.recompute_costs_size(), 2);
  EXPECT_EQ(block.recompute_costs(0).mode(), "selective");
  EXPECT_EQ(block.recompute_costs(1).mode(), "full");
  // 4 samples x 2 heads x 8 x 8 attention weights; 4 x 8 x 16 inputs.
  EXPECT_DOUBLE_EQ(block.recompute_costs(0).saved_bytes(),
                   block.saved_bytes() - 4 * 2 * 8 * 8 * 4);
  EXPECT_DOUBLE_EQ(block.recompute_costs(1).saved_bytes(), 4 * 8 * 16 * 4);
  EXPECT_GT(block.recompute_costs(1).backward_ms(), 0);
}

// A model too large for the worker's memory is refused before anything is
// allocated, naming the layer (the Profile RPC once failed with "Unexpected
// error in RPC handling": a std::bad_alloc).
TEST(ProfilerTest, AModelLargerThanTheWorkerNamesTheLayer) {
  auto spec = ParseJobSpec(
      R"pb(
        model {
          layers { flatten {} }
          layers { linear { in_features: 16384 out_features: 16384 } }
          layers { relu {} }
          layers { linear { in_features: 16384 out_features: 4 } }
        }
        data {
          synthetic {
            sample_shape: [ 16384 ]
            num_classes: 4
            train_samples: 64
          }
        }
        optimizer { adam { lr: 0.001 } }
        batch_size: 16
        max_steps: 1
      )pb",
      "test");
  ASSERT_TRUE(spec.ok()) << spec.status();
  CpuDevice device(CpuDeviceOptions{1});
  ProfilerOptions options;
  options.measure_gemm = false;
  options.memory_bytes = 2000000000;
  auto profile = ProfileModel(*spec, &device, options);
  ASSERT_EQ(profile.status().code(), absl::StatusCode::kResourceExhausted);
  // Weights, gradients, the update's copies of both and Adam's two
  // moments: 6 copies of 268 M parameters.
  EXPECT_EQ(std::string(profile.status().message()),
            "profiling the whole model (model.layers[0, 4)) needs at least "
            "6.4 GB: 268517380 parameters with their gradients and optimizer "
            "state (6.4 GB) and the activations of a microbatch of 16 samples "
            "(3.1 MB); model.layers[1].linear alone holds 6.4 GB; more than "
            "this worker's memory (2.0 GB) (profile on a larger worker and "
            "submit the job with the profile: aq profile, then aq submit "
            "--profile)");
}

// --slowdown F (issue 28): the profiler's passes take F times as long, so
// the profile measures the slowed worker.
TEST(ProfilerTest, ASlowedWorkerProfilesSlowed) {
  auto spec = ParseJobSpec(kSpec, "test");
  ASSERT_TRUE(spec.ok()) << spec.status();
  CpuDevice device(CpuDeviceOptions{1});
  ProfilerOptions options;
  options.warmup_iterations = 0;
  options.measured_iterations = 1;
  options.measure_gemm = false;
  options.slowdown = 2;
  auto profile = ProfileModel(*spec, &device, options);
  ASSERT_TRUE(profile.ok()) << profile.status();
  // The Delay layer sleeps 3 ms forward and 5 ms backward; slowed 2x, at
  // least twice that.
  EXPECT_GE(profile->nodes(2).forward_ms(), 6.0);
  EXPECT_GE(profile->nodes(2).backward_ms(), 10.0);

  options.slowdown = 0.5;
  EXPECT_EQ(ProfileModel(*spec, &device, options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ProfilerTest, SlowdownBelowOneIsRefused) {
  EXPECT_TRUE(CheckSlowdown(1).ok());
  EXPECT_TRUE(CheckSlowdown(2.5).ok());
  for (double bad : {0.5, 0.0, -1.0, std::nan(""), HUGE_VAL}) {
    const absl::Status s = CheckSlowdown(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("must be a number >= 1"), std::string::npos)
        << s;
  }
  CpuDevice device(CpuDeviceOptions{1});
  EXPECT_EQ(MeasureSpeedProbe(&device, 64, 1, 0.9).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The speed probe a worker registers with: slowed 4x, it measures about a
// quarter of the throughput (each run sleeps 3x its own GEMM's time). The
// best of alternating rounds, so that other load on the host does not
// decide the ratio.
TEST(ProfilerTest, ASlowedWorkersSpeedProbeIsAboutOneOverF) {
  CpuDevice device(CpuDeviceOptions{1});
  double full = 0, slowed = 0;
  for (int round = 0; round < 3; ++round) {
    auto f = MeasureSpeedProbe(&device, 256, 5, 1);
    auto s = MeasureSpeedProbe(&device, 256, 5, 4);
    ASSERT_TRUE(f.ok()) << f.status();
    ASSERT_TRUE(s.ok()) << s.status();
    full = std::max(full, *f);
    slowed = std::max(slowed, *s);
  }
  const double ratio = slowed / full;
  EXPECT_GT(ratio, 0.15) << slowed << " vs " << full;
  EXPECT_LT(ratio, 0.4) << slowed << " vs " << full;
}

}  // namespace
}  // namespace aqueduct
