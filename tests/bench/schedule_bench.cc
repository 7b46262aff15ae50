// Schedule efficiency with the Delay layer: 4 stage workers (threads, an
// in-memory communicator), each stage one Delay layer (forward 5 ms,
// backward 10 ms of which 5 ms stand for the weight gradient) behind a tiny
// Linear. Reports, per policy, the steady state time per minibatch against
// the analytic bound: 1F1B runs one minibatch per max stage time (15 ms);
// the flushing schedules (1f1b_flush, gpipe, zb_h1, zb_h2) with m
// microbatches and p stages against the action IR's simulator
// (pipeline/ir/replay.h) at the configured costs: its predicted time per
// minibatch and bubble (idle over busy time: (p-1)/m for 1F1B at F = B/2 =
// W... see docs/benchmarks.md).
//
//   schedule_bench [--minibatches 96] [--microbatches 8] [--forward-ms 5]
//                  [--backward-ms 10] [--weight-ms 5]
#include <sys/prctl.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/comm/in_memory.h"
#include "common/device/cpu_device.h"
#include "pipeline/ir/generate.h"
#include "pipeline/ir/lower.h"
#include "pipeline/ir/replay.h"
#include "worker/nn/spec.h"
#include "worker/runtime/pipeline_stage.h"

namespace aqueduct {
namespace {

double kForwardMs = 5, kBackwardMs = 10, kWeightMs = 5;
constexpr int kStages = 4;

JobSpec Spec(int64_t minibatches) {
  std::string layers = "layers { flatten {} }";
  for (int s = 0; s < kStages; ++s) {
    absl::StrAppend(
        &layers, " layers { linear { in_features: 8 out_features: 8 } }",
        " layers { delay { forward_ms: ", kForwardMs,
        " backward_ms: ", kBackwardMs, " weight_ms: ", kWeightMs, " } }");
  }
  const std::string text = absl::StrCat(
      "model { ", layers,
      " } data { synthetic { sample_shape: [8] num_classes: 8 "
      "train_samples: 8192 seed: 1 } } optimizer { sgd { lr: 0.01 } } "
      "batch_size: 16 max_steps: ",
      minibatches, " seed: 1");
  return *ParseJobSpec(text, "bench");
}

struct RunResult {
  std::vector<absl::Time> steps;  // End times of the last stage's steps.
  // Median measured forward + backward + step time of the slowest stage,
  // per microbatch (the Delay layers' sleeps as they actually took).
  double measured_stage_ms = 0;
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Runs the pipeline.
RunResult Run(Schedule policy, int64_t minibatches, int micro) {
  const JobSpec spec = Spec(minibatches);
  auto job = ValidateJobSpec(spec);
  auto data = LoadData(spec.data(), FileAccess::Anywhere());
  PipelineLayout layout;
  layout.policy = policy;
  for (int s = 0; s < kStages; ++s) {
    // Stage 0 also holds the flatten layer.
    layout.layer_begin.push_back(s == 0 ? 0 : 1 + 2 * s);
    layout.ranks.push_back({s});
    layout.warmup_depth.push_back(kStages - s - 1);
  }
  layout.layer_begin.push_back(1 + 2 * kStages);
  layout.num_minibatches = minibatches;
  layout.microbatches = micro;
  auto hub = std::make_shared<InMemoryHub>(kStages);
  absl::Mutex mu;
  std::vector<absl::Time> steps;
  std::vector<std::vector<double>> forward_ms(kStages), backward_ms(kStages),
      step_ms(kStages);
  std::vector<size_t> weight_count(kStages, 0);
  std::vector<std::thread> threads;
  for (int s = 0; s < kStages; ++s) {
    threads.emplace_back([&, s] {
      // Sleep precision: the kernel's default 50 us timer slack would add
      // to every Delay on the critical path; this measures the schedule.
      prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
      CpuDevice device(CpuDeviceOptions{1});
      InMemoryCommunicator comm(hub, s);
      PipelineStage::Options options;
      options.on_event = [&, s](const StageEvent& e) {
        // Compute only: a forward that waits for its input is not slower.
        const double ms = absl::ToDoubleMilliseconds(e.compute);
        absl::MutexLock lock(&mu);
        if (e.kind == OpKind::kForward) forward_ms[s].push_back(ms);
        if (e.kind == OpKind::kBackward) backward_ms[s].push_back(ms);
        if (e.kind == OpKind::kBackwardInput ||
            e.kind == OpKind::kBackwardWeight) {
          // I then W of the same microbatch: their sum is its backward.
          if (e.kind == OpKind::kBackwardInput) {
            backward_ms[s].push_back(ms);
          } else {
            backward_ms[s][weight_count[s]++] += ms;
          }
        }
        if (e.kind == OpKind::kOptimizerStep) {
          step_ms[s].push_back(ms);
          if (s == kStages - 1) steps.push_back(e.end);
        }
      };
      PipelineStage stage(job->model.get(), spec, layout, s, 0, &device, &comm,
                          &data->train,
                          *InitParameters(*job->model, layout.layer_begin[s],
                                          layout.layer_begin[s + 1], &device),
                          options);
      const absl::Status status = stage.Run();
      if (!status.ok()) std::fprintf(stderr, "%s\n", status.ToString().c_str());
    });
  }
  for (auto& t : threads) t.join();
  std::sort(steps.begin(), steps.end());
  RunResult result;
  result.steps = steps;
  for (int s = 0; s < kStages; ++s) {
    result.measured_stage_ms =
        std::max(result.measured_stage_ms, Median(forward_ms[s]) +
                                               Median(backward_ms[s]) +
                                               Median(step_ms[s]) / micro);
  }
  return result;
}

// The action IR's prediction for `policy` at the configured delays.
ir::Simulation Predict(Schedule policy, int micro) {
  const ir::ScheduleKind kind =
      policy == v1::SCHEDULE_GPIPE   ? ir::ScheduleKind::kGpipe
      : policy == v1::SCHEDULE_ZB_H1 ? ir::ScheduleKind::kZbH1
      : policy == v1::SCHEDULE_ZB_H2 ? ir::ScheduleKind::kZbH2
                                     : ir::ScheduleKind::k1F1B;
  ir::ActionCosts costs;
  costs.f = kForwardMs;
  costs.b = kBackwardMs;
  costs.i = kBackwardMs - kWeightMs;
  costs.w = kWeightMs;
  auto program = ir::ComputeSchedule(kind, {kStages, micro, 1});
  auto sim = ir::Simulate(ir::Lower(*program), costs);
  return sim.ok() ? *sim : ir::Simulation{};
}

// Median gap between consecutive steps over the middle of the run.
double SteadyMsPerMinibatch(const std::vector<absl::Time>& steps) {
  // (steps are the last stage's optimizer steps, one per minibatch)
  const size_t skip = steps.size() / 8;
  std::vector<double> gaps;
  for (size_t i = skip + 1; i + skip < steps.size(); ++i) {
    gaps.push_back(absl::ToDoubleMilliseconds(steps[i] - steps[i - 1]));
  }
  std::sort(gaps.begin(), gaps.end());
  return gaps.empty() ? 0 : gaps[gaps.size() / 2];
}

int Main(int argc, char** argv) {
  int64_t minibatches = 96;
  int micro = 8;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--minibatches")
      (void)absl::SimpleAtoi(argv[i + 1], &minibatches);
    if (flag == "--microbatches") (void)absl::SimpleAtoi(argv[i + 1], &micro);
    if (flag == "--forward-ms")
      (void)absl::SimpleAtod(argv[i + 1], &kForwardMs);
    if (flag == "--backward-ms") {
      (void)absl::SimpleAtod(argv[i + 1], &kBackwardMs);
    }
    if (flag == "--weight-ms") (void)absl::SimpleAtod(argv[i + 1], &kWeightMs);
  }
  const double nominal = kForwardMs + kBackwardMs;
  {
    const RunResult r = Run(v1::SCHEDULE_1F1B_STASHED, minibatches, 1);
    const double ms = SteadyMsPerMinibatch(r.steps);
    std::printf(
        "{\"policy\":\"1f1b_stashed\",\"stages\":%d,\"minibatches\":%lld,"
        "\"steady_ms_per_minibatch\":%.3f,\"nominal_bound_ms\":%.1f,"
        "\"efficiency_vs_nominal\":%.4f,\"measured_stage_ms\":%.3f,"
        "\"efficiency_vs_measured\":%.4f}\n",
        kStages, static_cast<long long>(minibatches), ms, nominal, nominal / ms,
        r.measured_stage_ms, r.measured_stage_ms / ms);
  }
  for (Schedule policy : {v1::SCHEDULE_1F1B_FLUSH, v1::SCHEDULE_GPIPE,
                          v1::SCHEDULE_ZB_H1, v1::SCHEDULE_ZB_H2}) {
    const int64_t n = std::max<int64_t>(8, minibatches / micro);
    const RunResult r = Run(policy, n, micro);
    const double ms = SteadyMsPerMinibatch(r.steps);
    const ir::Simulation predicted = Predict(policy, micro);
    // Bubble as the zero-bubble paper measures it: idle over busy time.
    const double bubble_nominal = ms / (micro * nominal) - 1.0;
    const double bubble_measured = ms / (micro * r.measured_stage_ms) - 1.0;
    std::printf(
        "{\"policy\":\"%s\",\"stages\":%d,\"microbatches\":%d,"
        "\"minibatches\":%lld,\"steady_ms_per_minibatch\":%.3f,"
        "\"predicted_ms_per_minibatch\":%.3f,\"predicted_bubble\":%.4f,"
        "\"bubble_vs_nominal\":%.4f,\"measured_stage_ms\":%.3f,"
        "\"bubble_vs_measured\":%.4f,"
        "\"difference_points_vs_measured\":%.2f,"
        "\"simulator_error\":%.4f}\n",
        ScheduleName(policy), kStages, micro, static_cast<long long>(n), ms,
        predicted.step_time, predicted.bubble, bubble_nominal,
        r.measured_stage_ms, bubble_measured,
        100 * (bubble_measured - predicted.bubble),
        ms / predicted.step_time - 1.0);
  }
  return 0;
}

}  // namespace
}  // namespace aqueduct

int main(int argc, char** argv) { return aqueduct::Main(argc, argv); }
