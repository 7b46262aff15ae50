// Training-step throughput of an MLP on a device (the CPU, or cuda:N in a
// CUDA build): forward, softmax cross-entropy, backward and an SGD-momentum
// step on a fixed random batch, the loss read back every step (as a training
// loop does). Prints one JSON line with samples/s and the GEMM GFLOP/s the
// step achieves; with --gemm_peak N also the device's GEMM GFLOP/s on N x N
// x N (the peak to compare with). The PyTorch counterpart is
// tests/bench/torch_mlp.py; run both side by side with
// tests/bench/mlp_vs_torch.sh. GPU use is in docs/gpu.md.
//
//   mlp_bench [--device cpu|cuda:N] [--gemm_precision fp32|tf32|bf16]
//             [--hidden 1024,1024,1024] [--batch 128] [--threads 2]
//             [--warmup 20] [--steps 200] [--gemm_peak 0]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/device/factory.h"
#include "worker/nn/loss.h"
#include "worker/nn/model.h"
#include "worker/nn/optimizer.h"

namespace aqueduct {
namespace {

int Main(int argc, char** argv) {
  std::vector<int64_t> hidden = {1024, 1024, 1024};
  int64_t batch = 128, warmup = 20, steps = 200, in = 784, classes = 10;
  int threads = 2;
  int64_t gemm_peak = 0;
  std::string device_text = "cpu";
  std::string precision_text = "fp32";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    bool ok = true;
    if (flag == "--hidden") {
      hidden.clear();
      for (absl::string_view part : absl::StrSplit(value, ',')) {
        int64_t h;
        ok = ok && absl::SimpleAtoi(part, &h) && h > 0;
        hidden.push_back(h);
      }
    } else if (flag == "--batch") {
      ok = absl::SimpleAtoi(value, &batch) && batch > 0;
    } else if (flag == "--threads") {
      ok = absl::SimpleAtoi(value, &threads) && threads > 0;
    } else if (flag == "--warmup") {
      ok = absl::SimpleAtoi(value, &warmup) && warmup >= 0;
    } else if (flag == "--device") {
      device_text = value;
    } else if (flag == "--gemm_precision") {
      precision_text = value;
    } else if (flag == "--gemm_peak") {
      ok = absl::SimpleAtoi(value, &gemm_peak) && gemm_peak >= 0;
    } else if (flag == "--steps") {
      ok = absl::SimpleAtoi(value, &steps) && steps > 0;
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(stderr, "mlp_bench: bad flag %s %s\n", flag.c_str(),
                   value.c_str());
      return 2;
    }
  }

  ModelSpec spec;
  int64_t prev = in;
  for (int64_t h : hidden) {
    auto* linear = spec.add_layers()->mutable_linear();
    linear->set_in_features(prev);
    linear->set_out_features(h);
    spec.add_layers()->mutable_relu();
    prev = h;
  }
  auto* last = spec.add_layers()->mutable_linear();
  last->set_in_features(prev);
  last->set_out_features(classes);

  auto device_spec = ParseDeviceSpec(device_text);
  if (!device_spec.ok()) {
    std::fprintf(stderr, "mlp_bench: %s\n",
                 device_spec.status().ToString().c_str());
    return 2;
  }
  auto precision = ParseGemmPrecision(precision_text);
  if (!precision.ok()) {
    std::fprintf(stderr, "mlp_bench: %s\n",
                 precision.status().ToString().c_str());
    return 2;
  }
  device_spec->gemm = *precision;
  auto made = CreateDevice(*device_spec, threads);
  if (!made.ok()) {
    std::fprintf(stderr, "mlp_bench: %s\n", made.status().ToString().c_str());
    return 2;
  }
  Device& device = **made;
  // GEMM flops of one training step: forward, and backward's two GEMMs.
  double step_flops = 0;
  {
    int64_t a = in;
    for (int64_t h : hidden) {
      step_flops += 6.0 * batch * a * h;
      a = h;
    }
    step_flops += 6.0 * batch * a * classes;
  }
  auto model = Model::Build(spec, Shape({in}), 1);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    return 1;
  }
  auto params = InitParameters(**model, 0, (*model)->num_layers(), &device);
  auto grads = ZerosLike(*params, &device);
  OptimizerSpec opt_spec;
  opt_spec.mutable_sgd()->set_lr(0.01f);
  opt_spec.mutable_sgd()->set_momentum(0.9f);
  auto optimizer = CreateOptimizer(opt_spec, *params, &device, warmup + steps);
  if (!params.ok() || !grads.ok() || !optimizer.ok()) return 1;

  std::vector<float> xs(batch * in);
  std::vector<int32_t> ys(batch);
  for (size_t i = 0; i < xs.size(); ++i) {
    xs[i] = DropoutUniform(99, i) * 2 - 1;
  }
  for (int64_t i = 0; i < batch; ++i) ys[i] = static_cast<int32_t>(i % classes);
  Tensor labels = *device.Allocate(Shape({batch}), DType::kI32);
  (void)device.CopyFromHost(ys.data(), labels);
  std::vector<float> losses(batch);

  using Clock = std::chrono::steady_clock;
  Clock::time_point start;
  double last_loss = 0;
  for (int64_t step = 0; step < warmup + steps; ++step) {
    if (step == warmup) start = Clock::now();
    Tensor x = *device.Allocate(Shape({batch, in}), DType::kF32);
    (void)device.CopyFromHost(xs.data(), x);
    PassContext ctx;
    ctx.minibatch = static_cast<uint64_t>(step);
    RangeCache cache;
    Tensor logits;
    absl::Status s =
        ForwardRange(**model, device, *params, x, ctx, &logits, &cache);
    auto loss = SoftmaxCrossEntropy(device, logits, labels, 1.0f / batch);
    if (!s.ok() || !loss.ok()) return 1;
    s = BackwardRange(**model, device, *params, cache, loss->dlogits, ctx,
                      nullptr, *grads, false);
    if (!s.ok() || !(*optimizer)->Step(*params, *grads).ok()) return 1;
    (void)device.CopyToHost(loss->losses, losses.data());
    double sum = 0;
    for (float l : losses) sum += l;
    last_loss = sum / batch;
  }
  const double seconds =
      std::chrono::duration<double>(Clock::now() - start).count();
  double peak_gflops = 0;
  // Worst |C - exact| / sqrt(n) over the probed entries: about 1e-7 in
  // fp32, 1e-4 in TF32 and 1e-3 in bf16 for these operands.
  double gemm_error = 0;
  if (gemm_peak > 0) {
    const int64_t n = gemm_peak;
    // Random operands (zeros run faster on some GPUs), and a few entries of
    // C checked against the host so that a GEMM that did not run shows.
    std::vector<float> ha(n * n), hb(n * n);
    for (int64_t i = 0; i < n * n; ++i) {
      ha[i] = DropoutUniform(7, i) - 0.5f;
      hb[i] = DropoutUniform(8, i) - 0.5f;
    }
    Tensor a = *device.Allocate(Shape({n, n}), DType::kF32);
    Tensor b = *device.Allocate(Shape({n, n}), DType::kF32);
    Tensor c = *device.Zeros(Shape({n, n}), DType::kF32);
    if (!device.CopyFromHost(ha.data(), a).ok() ||
        !device.CopyFromHost(hb.data(), b).ok()) {
      return 1;
    }
    auto gemm = [&] {
      device.Gemm(false, false, n, n, n, 1.0f,
                  static_cast<const float*>(a.raw()), n,
                  static_cast<const float*>(b.raw()), n, 0.0f,
                  static_cast<float*>(c.raw()), n);
    };
    gemm();
    if (!device.Synchronize().ok()) return 1;
    const int reps = 20;
    const auto t0 = Clock::now();
    for (int r = 0; r < reps; ++r) gemm();
    if (!device.Synchronize().ok()) return 1;
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    peak_gflops = reps * 2.0 * n * n * n / dt / 1e9;
    std::vector<float> hc(n * n);
    if (!device.CopyToHost(c, hc.data()).ok()) return 1;
    for (int64_t probe = 0; probe < 16; ++probe) {
      const int64_t i = (probe * 7919) % n, j = (probe * 104729) % n;
      double want = 0;
      for (int64_t k = 0; k < n; ++k) {
        want += double(ha[i * n + k]) * hb[k * n + j];
      }
      const double err = std::abs(want - hc[i * n + j]);
      gemm_error = std::max(gemm_error, err / std::sqrt(double(n)));
      if (err > 5e-2 * (1 + std::abs(want))) {
        std::fprintf(stderr, "GEMM check failed: C[%lld,%lld]=%g, want %g\n",
                     static_cast<long long>(i), static_cast<long long>(j),
                     hc[i * n + j], want);
        return 1;
      }
    }
  }
  const double step_gflops = steps * step_flops / seconds / 1e9;
  std::printf(
      "{\"impl\":\"aqueduct\",\"device\":\"%s\",\"batch\":%lld,"
      "\"threads\":%d,\"steps\":%lld,\"samples_per_second\":%.1f,"
      "\"ms_per_step\":%.3f,\"final_loss\":%.4f,\"step_gemm_gflops\":%.1f,"
      "\"gemm_peak_gflops\":%.1f,\"fraction_of_peak\":%.3f,"
      "\"gemm_error\":%.2e}\n",
      device.name().c_str(), static_cast<long long>(batch), threads,
      static_cast<long long>(steps), steps * batch / seconds,
      1000 * seconds / steps, last_loss, step_gflops, peak_gflops,
      peak_gflops > 0 ? step_gflops / peak_gflops : 0.0, gemm_error);
  return 0;
}

}  // namespace
}  // namespace aqueduct

int main(int argc, char** argv) { return aqueduct::Main(argc, argv); }
