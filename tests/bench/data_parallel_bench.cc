// Data parallelism's modes (JobSpec.data_parallel) measured: every replica
// a thread with its own CPU device (one thread), the replicas connected by
// Gloo over TCP loopback, one stage (pure data parallelism).
//
//   data_parallel_bench overlap [--steps 30] [--delay-ms 0] [--rounds 3]
//                               [--bucket-mb 0]
//     An MLP of eight 512x512 layers (2.1 M parameters, Adam), batch 128:
//     one replica against 2 replicas under the flat all-reduce after the
//     backward pass (one bucket: the way before buckets), buckets after
//     the backward pass, buckets overlapped with it, and ZeRO-1. Per mode
//     the median step time, the median time the step waits for the
//     all-reduce after the backward pass (its exposed time: the AllReduce
//     op), the median backward time, and the optimizer state per replica.
//
//   data_parallel_bench staleness [--steps 400] [--target 0.75] [--slow 2]
//                                 [--lr 0.05] [--momentum 0.9] [--delay-ms 0]
//     Fashion-MNIST (784-512-512-10, SGD, batch 256) on 4 replicas, equal and
//     with replica 3 slowed (PipelineStage::Options::slowdown): all-reduce, the
//     parameter server sync, bounded S = 1, 2, 4, async. Per mode the time
//     to the target training loss (the mean of the last 32 microbatch
//     losses reported, in the order they were), the total time, the final
//     mean loss and the histogram of applied staleness.
#include <algorithm>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/comm/gloo_communicator.h"
#include "common/comm/local_store.h"
#include "common/device/cpu_device.h"
#include "worker/nn/spec.h"
#include "worker/runtime/pipeline_stage.h"

namespace aqueduct {
namespace {

struct Outcome {
  absl::Status status;
  std::vector<double> step_ms, allreduce_ms, backward_ms;  // Replica 0.
  std::vector<std::pair<absl::Time, double>> losses;       // Microbatch means.
  absl::Time start, end;
  std::vector<int64_t> histogram;
  std::vector<int64_t> state_bytes;  // Per replica.
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::vector<std::unique_ptr<Communicator>> Connect(int n) {
  LocalRendezvousStore store;
  std::vector<std::unique_ptr<Communicator>> comms(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto c = GlooCommunicator::Connect(&store, "dp/", r, n, "127.0.0.1",
                                         absl::Seconds(30));
      if (c.ok()) comms[r] = std::move(*c);
    });
  }
  for (auto& t : threads) t.join();
  return comms;
}

PipelineLayout OneStage(int layers, int replicas, int64_t steps, int micro) {
  PipelineLayout layout;
  layout.policy = v1::SCHEDULE_1F1B_FLUSH;
  layout.layer_begin = {0, layers};
  layout.ranks.emplace_back();
  for (int r = 0; r < replicas; ++r) layout.ranks[0].push_back(r);
  layout.warmup_depth = {0};
  layout.num_minibatches = steps;
  layout.microbatches = micro;
  return layout;
}

// Replica r's options: events and losses into `out` (under `mu`).
PipelineStage::Options OptionsFor(int r, double slowdown, absl::Mutex* mu,
                                  Outcome* out, absl::Time* last_step) {
  PipelineStage::Options options;
  options.timeout = absl::Seconds(300);
  options.slowdown = slowdown;
  options.on_event = [=](const StageEvent& e) {
    if (r != 0) return;
    absl::MutexLock lock(mu);
    if (e.kind == OpKind::kAllReduce) {
      out->allreduce_ms.push_back(absl::ToDoubleMilliseconds(e.end - e.start));
    } else if (e.kind == OpKind::kBackward) {
      out->backward_ms.push_back(absl::ToDoubleMilliseconds(e.compute));
    } else if (e.kind == OpKind::kOptimizerStep) {
      if (e.minibatch > 0) {
        out->step_ms.push_back(absl::ToDoubleMilliseconds(e.end - *last_step));
      }
      *last_step = e.end;
    }
  };
  options.on_loss = [=](int64_t, double sum, int64_t samples) {
    absl::MutexLock lock(mu);
    out->losses.emplace_back(absl::Now(), sum / static_cast<double>(samples));
  };
  return options;
}

// Over `shared` (one communicator per replica, reused across runs: a
// connection's latency differs from one to the next, see Ring), or fresh
// ones.
Outcome Run(const JobSpec& spec, int replicas, int micro,
            const std::vector<double>& slowdown,
            std::vector<std::unique_ptr<Communicator>>* shared = nullptr) {
  auto job = ValidateJobSpec(spec);
  auto data = LoadData(spec.data(), FileAccess::Anywhere());
  Outcome out;
  if (!job.ok() || !data.ok()) {
    out.status = job.ok() ? data.status() : job.status();
    return out;
  }
  const PipelineLayout layout =
      OneStage(spec.model().layers_size(), replicas, spec.max_steps(), micro);
  std::vector<std::unique_ptr<Communicator>> own;
  if (shared == nullptr) own = Connect(replicas);
  auto& comms = shared != nullptr ? *shared : own;
  absl::Mutex mu;
  absl::Time last_step;
  out.state_bytes.resize(replicas);
  out.start = absl::Now();
  std::vector<std::thread> threads;
  for (int r = 0; r < replicas; ++r) {
    threads.emplace_back([&, r] {
      CpuDevice device(CpuDeviceOptions{1});
      auto params =
          InitParameters(*job->model, 0, layout.layer_begin[1], &device);
      PipelineStage stage(job->model.get(), spec, layout, 0, r, &device,
                          comms[r].get(), &data->train, *params,
                          OptionsFor(r, slowdown[r], &mu, &out, &last_step));
      const absl::Status status = stage.Run();
      absl::MutexLock lock(&mu);
      if (!status.ok() && out.status.ok()) out.status = status;
      out.state_bytes[r] = stage.stats().optimizer_state_bytes;
      const auto& h = stage.stats().staleness_histogram;
      if (out.histogram.size() < h.size()) out.histogram.resize(h.size(), 0);
      for (size_t s = 0; s < h.size(); ++s) out.histogram[s] += h[s];
    });
  }
  for (auto& t : threads) t.join();
  out.end = absl::Now();
  return out;
}

double kBucketMb = 0;  // --bucket-mb; 0: the default (DDP's, scaled).

JobSpec WithMode(JobSpec spec, const std::string& mode) {
  v1::DataParallelSpec* d = spec.mutable_data_parallel();
  if (mode == "flat") {
    d->set_bucket_mb(4096);
    d->set_reduce("after");
  } else if (mode == "buckets-after") {
    d->set_bucket_mb(kBucketMb);
    d->set_reduce("after");
  } else if (mode == "buckets-overlap") {
    d->set_bucket_mb(kBucketMb);
  } else if (mode == "zero") {
    d->set_bucket_mb(kBucketMb);
    d->set_shard_optimizer(true);
  } else if (mode != "allreduce") {
    d->set_mode("parameter_server");
    const size_t colon = mode.find(':');
    d->set_consistency(mode.substr(0, colon));
    if (colon != std::string::npos) {
      d->set_staleness(std::stoi(mode.substr(colon + 1)));
    }
  }
  return spec;
}

// With `delay_ms` > 0, a Delay layer after every linear sleeps that long
// in its backward (and half in its forward): compute that leaves the CPU
// free, as an accelerator's does.
JobSpec OverlapSpec(int64_t steps, double delay_ms) {
  std::string layers = "layers { flatten {} }";
  for (int i = 0; i < 8; ++i) {
    absl::StrAppend(&layers,
                    " layers { linear { in_features: 512 out_features: 512 } }",
                    " layers { relu {} }");
    if (delay_ms > 0) {
      absl::StrAppend(&layers, " layers { delay { forward_ms: ", delay_ms / 2,
                      " backward_ms: ", delay_ms, " } }");
    }
  }
  absl::StrAppend(&layers,
                  " layers { linear { in_features: 512 out_features: 10 } }");
  return *ParseJobSpec(
      absl::StrCat("model { ", layers,
                   " } data { synthetic { sample_shape: [512] num_classes: 10 "
                   "train_samples: 8192 seed: 1 } } optimizer { adam { lr: "
                   "0.001 } } batch_size: 128 max_steps: ",
                   steps, " seed: 1"),
      "overlap");
}

// Each round's modes share one pair of connections; rounds reconnect.
void Overlap(int64_t steps, double delay_ms, int rounds) {
  const JobSpec spec = OverlapSpec(steps, delay_ms);
  std::printf(
      "compute: %s\n",
      delay_ms > 0
          ? absl::StrCat("+", delay_ms, " ms asleep per layer backward").c_str()
          : "CPU only");
  std::printf("%-16s %8s %10s %13s %11s %14s\n", "mode", "replicas", "step ms",
              "exposed AR ms", "backward ms", "state MB/rep");
  std::vector<std::unique_ptr<Communicator>> comms;
  auto row = [&](const std::string& mode, int replicas) {
    const Outcome o = Run(WithMode(spec, mode), replicas, replicas,
                          std::vector<double>(replicas, 1.0),
                          replicas == 2 ? &comms : nullptr);
    if (!o.status.ok()) {
      std::printf("%s: %s\n", mode.c_str(), o.status.ToString().c_str());
      return;
    }
    std::printf("%-16s %8d %10.2f %13.2f %11.2f %14.2f\n", mode.c_str(),
                replicas, Median(o.step_ms), Median(o.allreduce_ms),
                Median(o.backward_ms), o.state_bytes[0] / 1048576.0);
  };
  for (int round = 0; round < rounds; ++round) {
    std::printf("round %d\n", round + 1);
    comms = Connect(2);
    row("allreduce", 1);
    for (const char* mode :
         {"flat", "buckets-after", "buckets-overlap", "zero"}) {
      row(mode, 2);
    }
  }
}

// Seconds from the start until the mean of the last 32 losses reported
// first reaches `target` (-1: never).
double TimeToTarget(const Outcome& o, double target) {
  constexpr size_t kWindow = 32;
  std::deque<double> window;
  double sum = 0;
  for (const auto& [when, loss] : o.losses) {
    window.push_back(loss);
    sum += loss;
    if (window.size() > kWindow) {
      sum -= window.front();
      window.pop_front();
    }
    if (window.size() == kWindow && sum / kWindow <= target) {
      return absl::ToDoubleSeconds(when - o.start);
    }
  }
  return -1;
}

double FinalLoss(const Outcome& o) {
  const size_t n = std::min<size_t>(32, o.losses.size());
  double sum = 0;
  for (size_t i = o.losses.size() - n; i < o.losses.size(); ++i) {
    sum += o.losses[i].second;
  }
  return n == 0 ? 0 : sum / static_cast<double>(n);
}

// With `delay_ms` > 0, a Delay layer sleeps that long per microbatch (a
// third forward, two thirds backward), compute that leaves the CPU free.
JobSpec StalenessSpec(int64_t steps, double lr, double momentum,
                      double delay_ms) {
  const std::string delay =
      delay_ms > 0 ? absl::StrCat("layers { delay { forward_ms: ", delay_ms / 3,
                                  " backward_ms: ", 2 * delay_ms / 3, " } } ")
                   : "";
  return *ParseJobSpec(
      absl::StrCat(
          "model { layers { flatten {} } layers { linear { in_features: 784 "
          "out_features: 512 } } layers { relu {} } ",
          delay,
          "layers { linear { "
          "in_features: 512 out_features: 512 } } layers { relu {} } layers { "
          "linear { in_features: 512 out_features: 10 } } } data { "
          "fashion_mnist_dir: \"/usr/share/datasets/fashion-mnist\" mean: "
          "0.2860 std: 0.3530 } optimizer { sgd { lr: ",
          lr, " momentum: ", momentum,
          " } } batch_size: 256 max_steps: ", steps, " seed: 1"),
      "staleness");
}

void Staleness(int64_t steps, double target, double slow, double lr,
               double momentum, double delay_ms) {
  const JobSpec spec = StalenessSpec(steps, lr, momentum, delay_ms);
  std::printf(
      "SGD lr %g momentum %g, batch 256 (64 a replica), %g ms asleep per "
      "microbatch\n",
      lr, momentum, delay_ms);
  std::printf("target: mean of the last 32 microbatch losses <= %.3f\n",
              target);
  std::printf("%-10s %-12s %10s %9s %10s  %s\n", "workers", "mode", "to target",
              "total s", "final loss", "staleness histogram");
  for (const double s : {1.0, slow}) {
    const std::vector<double> slowdown = {1, 1, 1, s};
    const std::string workers =
        s == 1.0 ? "equal" : absl::StrCat("one ", s, "x");
    for (const char* mode : {"allreduce", "sync", "bounded:1", "bounded:2",
                             "bounded:4", "async"}) {
      const Outcome o = Run(WithMode(spec, mode), 4, 4, slowdown);
      if (!o.status.ok()) {
        std::printf("%s: %s\n", mode, o.status.ToString().c_str());
        continue;
      }
      const double to = TimeToTarget(o, target);
      std::printf("%-10s %-12s %9.2fs %9.2f %10.4f  [%s]\n", workers.c_str(),
                  mode, to, absl::ToDoubleSeconds(o.end - o.start),
                  FinalLoss(o), absl::StrJoin(o.histogram, " ").c_str());
      std::fflush(stdout);
    }
  }
}

// The ring all-reduce alone: 2 ranks over Gloo, the median time of 40
// all-reduces per size (what a bucket costs).
void Ring() {
  std::printf("%10s %10s %10s\n", "floats", "median ms", "GB/s");
  for (size_t n :
       {size_t{1} << 12, size_t{1} << 15, size_t{1} << 16, size_t{1} << 17,
        size_t{3} << 16, size_t{1} << 18, size_t{3} << 17, size_t{1} << 19,
        size_t{1} << 20, size_t{1} << 21}) {
    auto comms = Connect(2);
    std::vector<std::vector<double>> ms(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        auto group = *ProcessGroup::Make(comms[r].get(), {0, 1}, 1, "ring");
        std::vector<float> data(n, 1.0f);
        for (int i = 0; i < 40; ++i) {
          const absl::Time start = absl::Now();
          const absl::Status s =
              group->AllReduce(data.data(), n, start + absl::Seconds(30));
          if (!s.ok()) std::fprintf(stderr, "%s\n", s.ToString().c_str());
          ms[r].push_back(absl::ToDoubleMilliseconds(absl::Now() - start));
        }
      });
    }
    for (auto& t : threads) t.join();
    const double median = Median(ms[0]);
    std::printf("%10zu %10.3f %10.2f\n", n, median,
                n * 4 / (median / 1000) / 1e9);
  }
}

double Flag(int argc, char** argv, const std::string& name, double fallback) {
  for (int i = 2; i + 1 < argc; ++i) {
    double v;
    if (argv[i] == "--" + name && absl::SimpleAtod(argv[i + 1], &v)) return v;
  }
  return fallback;
}

}  // namespace
}  // namespace aqueduct

int main(int argc, char** argv) {
  using aqueduct::Flag;
  const std::string what = argc > 1 ? argv[1] : "";
  aqueduct::kBucketMb = Flag(argc, argv, "bucket-mb", 0);
  if (what == "overlap") {
    aqueduct::Overlap(static_cast<int64_t>(Flag(argc, argv, "steps", 30)),
                      Flag(argc, argv, "delay-ms", 0),
                      static_cast<int>(Flag(argc, argv, "rounds", 3)));
  } else if (what == "ring") {
    aqueduct::Ring();
  } else if (what == "staleness") {
    aqueduct::Staleness(
        static_cast<int64_t>(Flag(argc, argv, "steps", 400)),
        Flag(argc, argv, "target", 0.75), Flag(argc, argv, "slow", 2),
        Flag(argc, argv, "lr", 0.05), Flag(argc, argv, "momentum", 0.9),
        Flag(argc, argv, "delay-ms", 0));
  } else {
    std::fprintf(stderr,
                 "usage: data_parallel_bench overlap [--steps N] [--delay-ms "
                 "MS] [--rounds N] [--bucket-mb MB] | staleness [--steps N] "
                 "[--target LOSS] [--slow F] [--lr LR] [--momentum M] "
                 "[--delay-ms MS] | ring\n");
    return 2;
  }
  return 0;
}
