// The CUDA kernels against CpuDevice, op by op, within fp32 tolerance. Runs
// wherever the toolkit is present; the device tests skip (GTEST_SKIP, with the
// reason) on machines without a GPU (no device, or no driver) and fail on
// any other CUDA error. The status tests need no GPU.
#include "common/device/cuda/kernels.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/device/cpu_device.h"
#include "common/device/cuda/cuda_status.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

TEST(CudaStatusTest, NamesCallFileLineAndError) {
  const absl::Status s =
      CudaStatus(cudaErrorMemoryAllocation, "cudaMalloc(&p, 8)", "x.cc", 42);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("cudaMalloc(&p, 8) failed at x.cc:42"),
            absl::string_view::npos)
      << s;
  EXPECT_NE(s.message().find("cudaErrorMemoryAllocation"),
            absl::string_view::npos)
      << s;
  EXPECT_TRUE(CudaStatus(cudaSuccess, "x", "y", 1).ok());
  const absl::Status b = CublasStatus(CUBLAS_STATUS_NOT_INITIALIZED,
                                      "cublasCreate(&h)", "y.cc", 7);
  EXPECT_NE(b.message().find("CUBLAS_STATUS_NOT_INITIALIZED"),
            absl::string_view::npos)
      << b;
  const absl::Status n =
      NcclStatus(ncclInvalidArgument, "ncclSend(...)", "z.cc", 9);
  EXPECT_EQ(n.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(n.message().find("ncclSend(...) failed at z.cc:9"),
            absl::string_view::npos)
      << n;
}

// Copies host vectors to the GPU and back.
class KernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    // Skips only where no GPU exists (no device, or no driver); any other
    // error fails.
    if (e != cudaSuccess && e != cudaErrorNoDevice &&
        e != cudaErrorInsufficientDriver) {
      FAIL() << "cudaGetDeviceCount: " << cudaGetErrorName(e) << ": "
             << cudaGetErrorString(e);
    }
    if (e != cudaSuccess || count == 0) {
      GTEST_SKIP() << "no CUDA device on this machine ("
                   << (e != cudaSuccess ? cudaGetErrorName(e) : "0 devices")
                   << "); CUDA kernels not exercised";
    }
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  }
  void TearDown() override {
    for (float* p : owned_) cudaFree(p);
  }
  float* Upload(const std::vector<float>& host) {
    float* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, host.size() * sizeof(float)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * sizeof(float),
                         cudaMemcpyHostToDevice),
              cudaSuccess);
    owned_.push_back(p);
    return p;
  }
  std::vector<float> Download(const float* p, size_t n) {
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> host(n);
    EXPECT_EQ(
        cudaMemcpy(host.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost),
        cudaSuccess);
    return host;
  }
  static std::vector<float> Random(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
  }
  static void ExpectNear(const std::vector<float>& want,
                         const std::vector<float>& got) {
    ASSERT_EQ(want.size(), got.size());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 1e-5f * (1.0f + std::fabs(want[i])))
          << "element " << i;
    }
  }

  CpuDevice cpu_;
  std::vector<float*> owned_;
};

TEST_F(KernelsTest, ElementwiseMatchCpu) {
  const int64_t rows = 37, cols = 129, n = rows * cols;
  const auto x = Random(n, 1), y0 = Random(n, 2), bias = Random(cols, 3);

  std::vector<float> want = y0;
  cpu_.Axpby(n, 0.5f, x.data(), -2.0f, want.data());
  float* dy = Upload(y0);
  cuda::Axpby(n, 0.5f, Upload(x), -2.0f, dy, nullptr);
  ExpectNear(want, Download(dy, n));

  want = y0;
  cpu_.AddBias(want.data(), bias.data(), rows, cols, /*relu=*/true);
  float* ab = Upload(y0);
  cuda::AddBias(ab, Upload(bias), rows, cols, true, nullptr);
  ExpectNear(want, Download(ab, n));

  std::vector<float> gelu(n), dgelu(n);
  cpu_.Gelu(x.data(), gelu.data(), n);
  cpu_.GeluBackward(x.data(), y0.data(), dgelu.data(), n);
  float* gx = Upload(x);
  float* gout = Upload(std::vector<float>(n));
  float* gdx = Upload(std::vector<float>(n));
  cuda::Gelu(gx, gout, n, nullptr);
  cuda::GeluBackward(gx, Upload(y0), gdx, n, nullptr);
  ExpectNear(gelu, Download(gout, n));
  ExpectNear(dgelu, Download(gdx, n));

  std::vector<float> drop(n);
  cpu_.Dropout(x.data(), drop.data(), n, 0.3f, 1234, 77);
  float* gd = Upload(std::vector<float>(n));
  cuda::Dropout(gx, gd, n, 0.3f, 1234, 77, nullptr);
  ExpectNear(drop, Download(gd, n));
}

TEST_F(KernelsTest, OptimizersMatchCpu) {
  const int64_t n = 5000;
  const auto w0 = Random(n, 4), g = Random(n, 5);
  std::vector<float> w = w0, buf(n, 0.0f);
  SgdParams sp;
  sp.lr = 0.1f;
  sp.momentum = 0.9f;
  sp.weight_decay = 1e-4f;
  sp.nesterov = true;
  sp.first_step = true;
  cpu_.SgdStep(w.data(), g.data(), buf.data(), n, sp);
  float* dw = Upload(w0);
  float* dbuf = Upload(std::vector<float>(n));
  cuda::SgdStep(dw, dw, Upload(g), dbuf, n, sp.lr, sp.momentum, sp.dampening,
                sp.weight_decay, sp.nesterov, sp.first_step, nullptr);
  ExpectNear(w, Download(dw, n));
  ExpectNear(buf, Download(dbuf, n));

  std::vector<float> aw = w0, m(n, 0.0f), v(n, 0.0f);
  AdamParams ap;
  ap.lr = 1e-3f;
  ap.weight_decay = 1e-2f;
  ap.step = 3;
  cpu_.AdamStep(aw.data(), g.data(), m.data(), v.data(), n, ap);
  const AdamScales scales = AdamStepScales(ap);
  // Out of place: the update lands in a new buffer, the source is kept.
  float* dsrc = Upload(w0);
  float* daw = Upload(std::vector<float>(n));
  float* dm = Upload(std::vector<float>(n));
  float* dv = Upload(std::vector<float>(n));
  cuda::AdamStep(daw, dsrc, Upload(g), dm, dv, n, scales.step_size,
                 scales.inv_sqrt_bc2, ap.beta1, ap.beta2, ap.eps,
                 scales.grad_decay, scales.keep, nullptr);
  ExpectNear(aw, Download(daw, n));
  ExpectNear(w0, Download(dsrc, n));
  ExpectNear(m, Download(dm, n));
  ExpectNear(v, Download(dv, n));
}

}  // namespace
}  // namespace aqueduct
