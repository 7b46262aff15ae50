// CudaDevice against CpuDevice, op by op through the Device interface, within
// fp32 tolerance. On machines without a GPU (CUDA finds no device, or no
// driver) the comparison tests skip with the reason, and the test of
// Create()'s error still runs; any other CUDA error fails them.
#include "common/device/cuda/cuda_device.h"

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "common/device/cpu_device.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

// Whether `s`, of CudaDeviceCount, says no GPU exists here: CUDA finds no
// device, or no driver. Any other error is a failure, not a reason to skip.
bool NoGpuHere(const absl::Status& s) {
  for (const char* none :
       {"(cudaErrorNoDevice)", "(cudaErrorInsufficientDriver)",
        "no CUDA device on this machine"}) {
    if (s.message().find(none) != absl::string_view::npos) return true;
  }
  return false;
}

TEST(CudaDeviceCreateTest, FailsClearlyOrNamesTheDevice) {
  auto count = CudaDeviceCount();
  auto device = CudaDevice::Create();
  if (!count.ok()) {
    ASSERT_TRUE(NoGpuHere(count.status())) << count.status();
    ASSERT_FALSE(device.ok());
    EXPECT_EQ(device.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(device.status().message().find("CUDA"), absl::string_view::npos)
        << device.status();
    return;
  }
  ASSERT_TRUE(device.ok()) << device.status();
  EXPECT_EQ((*device)->kind(), DeviceKind::kCuda);
  EXPECT_EQ((*device)->name().rfind("cuda:0 (", 0), 0u) << (*device)->name();
  CudaDeviceOptions bad;
  bad.ordinal = *count;
  auto missing = CudaDevice::Create(bad);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
}

class CudaVsCpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto count = CudaDeviceCount();
    if (!count.ok()) {
      ASSERT_TRUE(NoGpuHere(count.status())) << count.status();
      GTEST_SKIP() << count.status().message()
                   << "; CUDA-vs-CPU comparison not run";
    }
    auto device = CudaDevice::Create();
    ASSERT_TRUE(device.ok()) << device.status();
    gpu_ = std::move(*device);
  }

  // A pair of tensors holding the same host values on both devices.
  struct Pair {
    Tensor cpu, gpu;
    float* c() const { return static_cast<float*>(cpu.raw()); }
    float* g() const { return static_cast<float*>(gpu.raw()); }
  };
  Pair Make(const std::vector<float>& host) {
    const Shape shape({static_cast<int64_t>(host.size())});
    Pair p{*cpu_.Allocate(shape, DType::kF32),
           *gpu_->Allocate(shape, DType::kF32)};
    EXPECT_TRUE(cpu_.CopyFromHost(host.data(), p.cpu).ok());
    EXPECT_TRUE(gpu_->CopyFromHost(host.data(), p.gpu).ok());
    return p;
  }
  Pair Random(int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return Make(v);
  }
  void ExpectSame(const Pair& p, float tol = 1e-4f) {
    ASSERT_TRUE(gpu_->Synchronize().ok());
    std::vector<float> got(p.gpu.numel());
    ASSERT_TRUE(gpu_->CopyToHost(p.gpu, got.data()).ok());
    const float* want = p.c();
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], tol * (1.0f + std::fabs(want[i])))
          << "element " << i;
    }
  }

  CpuDevice cpu_;
  std::unique_ptr<CudaDevice> gpu_;
};

TEST_F(CudaVsCpuTest, GemmAllTransposes) {
  const int64_t m = 33, n = 65, k = 47;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      Pair a = Random(m * k, 1), b = Random(k * n, 2), c = Random(m * n, 3);
      const int64_t lda = ta ? m : k, ldb = tb ? k : n;
      cpu_.Gemm(ta, tb, m, n, k, 0.7f, a.c(), lda, b.c(), ldb, 0.5f, c.c(), n);
      gpu_->Gemm(ta, tb, m, n, k, 0.7f, a.g(), lda, b.g(), ldb, 0.5f, c.g(), n);
      ExpectSame(c);
    }
  }
}

// bf16 GEMM inputs with fp32 accumulation: within bf16's rounding (8 bits of
// mantissa per input, k = 256 terms) of the CPU's fp32 GEMM.
TEST_F(CudaVsCpuTest, GemmWithBf16Inputs) {
  CudaDeviceOptions options;
  options.bf16_gemm = true;
  auto bf16 = CudaDevice::Create(options);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  gpu_ = std::move(*bf16);
  const int64_t m = 64, n = 96, k = 256;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      Pair a = Random(m * k, 4), b = Random(k * n, 5), c = Random(m * n, 6);
      const int64_t lda = ta ? m : k, ldb = tb ? k : n;
      cpu_.Gemm(ta, tb, m, n, k, 1.0f, a.c(), lda, b.c(), ldb, 0.5f, c.c(), n);
      gpu_->Gemm(ta, tb, m, n, k, 1.0f, a.g(), lda, b.g(), ldb, 0.5f, c.g(), n);
      // |error| <~ 2 * 2^-9 * sum |a||b| ~ 0.004 * k * E|a||b|.
      ExpectSame(c, 0.2f);
    }
  }
}

TEST_F(CudaVsCpuTest, ReductionsAndLayout) {
  const int64_t rows = 50, cols = 70;
  Pair x = Random(rows * cols, 4), out = Random(cols, 5);
  cpu_.SumRows(x.c(), rows, cols, 0.5f, out.c());
  gpu_->SumRows(x.g(), rows, cols, 0.5f, out.g());
  ExpectSame(out);
  Pair bias = Random(5, 6), y = Random(rows * cols, 7);
  cpu_.SwapAxes01(x.c(), 5, 10, 70, bias.c(), y.c());
  gpu_->SwapAxes01(x.g(), 5, 10, 70, bias.g(), y.g());
  ExpectSame(y);
  Pair ch = Random(10, 8);
  cpu_.SumChannels(x.c(), 5, 10, 70, 1.0f, ch.c());
  gpu_->SumChannels(x.g(), 5, 10, 70, 1.0f, ch.g());
  ExpectSame(ch);
}

TEST_F(CudaVsCpuTest, ConvolutionHelpersAndPooling) {
  Window2d w;
  w.channels = 3;
  w.height = 11;
  w.width = 9;
  w.kernel = 3;
  w.stride = 2;
  w.padding = 1;
  const int64_t batch = 4;
  const int64_t col_n =
      w.channels * w.kernel * w.kernel * batch * w.out_height() * w.out_width();
  Pair x = Random(batch * w.channels * w.height * w.width, 9);
  Pair col = Random(col_n, 10), dx = Random(x.cpu.numel(), 11);
  cpu_.Im2Col(x.c(), batch, w, col.c());
  gpu_->Im2Col(x.g(), batch, w, col.g());
  ExpectSame(col);
  cpu_.Col2Im(col.c(), batch, w, dx.c());
  gpu_->Col2Im(col.g(), batch, w, dx.g());
  ExpectSame(dx);

  Window2d pool = w;
  pool.kernel = 2;
  pool.stride = 2;
  pool.padding = 0;
  const int64_t planes = batch * w.channels;
  const int64_t out_n = planes * pool.out_height() * pool.out_width();
  Pair y = Random(out_n, 12), dy = Random(out_n, 13);
  Tensor arg_c = *cpu_.Allocate(Shape({out_n}), DType::kI32);
  Tensor arg_g = *gpu_->Allocate(Shape({out_n}), DType::kI32);
  cpu_.MaxPool(x.c(), planes, pool, y.c(), static_cast<int32_t*>(arg_c.raw()));
  gpu_->MaxPool(x.g(), planes, pool, y.g(), static_cast<int32_t*>(arg_g.raw()));
  ExpectSame(y);
  cpu_.MaxPoolBackward(dy.c(), static_cast<int32_t*>(arg_c.raw()), planes, pool,
                       dx.c());
  gpu_->MaxPoolBackward(dy.g(), static_cast<int32_t*>(arg_g.raw()), planes,
                        pool, dx.g());
  ExpectSame(dx);
}

TEST_F(CudaVsCpuTest, LayerNormForwardBackward) {
  const int64_t rows = 17, cols = 300;
  Pair x = Random(rows * cols, 14), gamma = Random(cols, 15),
       beta = Random(cols, 16), y = Random(rows * cols, 17),
       mean = Random(rows, 18), rstd = Random(rows, 19),
       dy = Random(rows * cols, 20), dx = Random(rows * cols, 21),
       dg = Random(cols, 22), db = Random(cols, 23);
  cpu_.LayerNorm(x.c(), gamma.c(), beta.c(), rows, cols, 1e-5f, y.c(), mean.c(),
                 rstd.c());
  gpu_->LayerNorm(x.g(), gamma.g(), beta.g(), rows, cols, 1e-5f, y.g(),
                  mean.g(), rstd.g());
  ExpectSame(y);
  ExpectSame(rstd);
  cpu_.LayerNormBackward(dy.c(), x.c(), gamma.c(), mean.c(), rstd.c(), rows,
                         cols, dx.c(), dg.c(), db.c(), true);
  gpu_->LayerNormBackward(dy.g(), x.g(), gamma.g(), mean.g(), rstd.g(), rows,
                          cols, dx.g(), dg.g(), db.g(), true);
  ExpectSame(dx);
  ExpectSame(dg);
  ExpectSame(db);
}

TEST_F(CudaVsCpuTest, SoftmaxCrossEntropyInPlace) {
  const int64_t rows = 64, classes = 10;
  std::vector<int32_t> labels(rows);
  for (int64_t r = 0; r < rows; ++r) labels[r] = static_cast<int32_t>(r % 10);
  Tensor lc = *cpu_.Allocate(Shape({rows}), DType::kI32);
  Tensor lg = *gpu_->Allocate(Shape({rows}), DType::kI32);
  ASSERT_TRUE(cpu_.CopyFromHost(labels.data(), lc).ok());
  ASSERT_TRUE(gpu_->CopyFromHost(labels.data(), lg).ok());
  Pair logits = Random(rows * classes, 24), losses = Random(rows, 25);
  cpu_.SoftmaxCrossEntropy(logits.c(), static_cast<int32_t*>(lc.raw()), rows,
                           classes, 1.0f / rows, losses.c(), logits.c());
  gpu_->SoftmaxCrossEntropy(logits.g(), static_cast<int32_t*>(lg.raw()), rows,
                            classes, 1.0f / rows, losses.g(), logits.g());
  ExpectSame(losses);
  ExpectSame(logits);
}

TEST_F(CudaVsCpuTest, SteadyStateAllocatesNothing) {
  for (int i = 0; i < 5; ++i) {
    auto t = gpu_->Allocate(Shape({1024, 1024}), DType::kF32);
    ASSERT_TRUE(t.ok());
  }
  EXPECT_EQ(gpu_->allocator_stats().raw_allocs, 1);
}

}  // namespace
}  // namespace aqueduct
