// CpuDevice's pool and kernels: every chunk runs once, a nested Run runs
// inline, the kernels give the same bits on 1 and 3 threads (their
// reductions keep one order), and the inline exp and erf are as accurate
// as their header says.
#include "common/device/cpu_device.h"

#include <atomic>
#include <cmath>
#include <random>
#include <vector>

#include "common/device/bf16_gemm.h"
#include "common/device/cpu_math.h"
#include "common/device/parallel_pool.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

TEST(ParallelPoolTest, EveryChunkOnceOverManyRuns) {
  ParallelPool pool(3);
  EXPECT_EQ(pool.threads(), 3);
  for (int run = 0; run < 200; ++run) {
    const int chunks = run % 17;
    std::vector<std::atomic<int>> hits(chunks);
    pool.Run(chunks, [&](int64_t c) { hits[c].fetch_add(1); });
    for (int c = 0; c < chunks; ++c) ASSERT_EQ(hits[c].load(), 1) << run;
  }
}

TEST(ParallelPoolTest, ANestedRunIsInlineAndForCoversTheRange) {
  ParallelPool pool(2);
  std::atomic<int64_t> sum{0};
  pool.Run(4, [&](int64_t) {
    pool.Run(3, [&](int64_t c) { sum.fetch_add(c + 1); });
  });
  EXPECT_EQ(sum.load(), 4 * 6);
  std::vector<int> covered(1000, 0);
  pool.For(1000, 10, 16, [&](int64_t b, int64_t e) {
    EXPECT_EQ(b % 16, 0);
    for (int64_t i = b; i < e; ++i) ++covered[i];
  });
  for (int v : covered) ASSERT_EQ(v, 1);
}

// A helper that slept (idle past its spin) still takes work.
TEST(ParallelPoolTest, SleepingHelpersWake) {
  ParallelPool pool(2);
  for (int run = 0; run < 3; ++run) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::atomic<int> n{0};
    pool.Run(64, [&](int64_t) { n.fetch_add(1); });
    EXPECT_EQ(n.load(), 64);
  }
}

std::vector<float> Random(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0, 1);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// Each kernel's output on `threads` threads, concatenated.
std::vector<float> Kernels(int threads) {
  CpuDeviceOptions options;
  options.threads = threads;
  CpuDevice dev(options);
  const int64_t rows = 1024, cols = 96, n = rows * cols;
  std::vector<float> x = Random(n, 1), dy = Random(n, 2),
                     gamma = Random(cols, 3), beta = Random(cols, 4), out;
  std::vector<float> y(n), mean(rows), rstd(rows), dx(n), dg(cols), db(cols);
  dev.LayerNorm(x.data(), gamma.data(), beta.data(), rows, cols, 1e-5f,
                y.data(), mean.data(), rstd.data());
  dev.LayerNormBackward(dy.data(), x.data(), gamma.data(), mean.data(),
                        rstd.data(), rows, cols, dx.data(), dg.data(),
                        db.data(), false);
  std::vector<float> sums(cols), g(n), dgelu(n), soft = x;
  dev.SumRows(dy.data(), rows, cols, 0, sums.data());
  dev.Gelu(x.data(), g.data(), n);
  dev.GeluBackward(x.data(), dy.data(), dgelu.data(), n);
  dev.CausalSoftmax(soft.data(), rows / 32, 32, 0.5f);
  std::vector<float> w = Random(n, 5), m(n, 0.1f), v(n, 0.2f);
  AdamParams adam;
  adam.lr = 1e-3f;
  adam.step = 3;
  dev.AdamStep(w.data(), dy.data(), m.data(), v.data(), n, adam);
  for (const auto* part : {&y, &dx, &dg, &db, &sums, &g, &dgelu, &soft, &w}) {
    out.insert(out.end(), part->begin(), part->end());
  }
  return out;
}

TEST(CpuDeviceTest, KernelsGiveTheSameBitsOnAnyNumberOfThreads) {
  const std::vector<float> one = Kernels(1), three = Kernels(3);
  ASSERT_EQ(one.size(), three.size());
  for (size_t i = 0; i < one.size(); ++i) {
    ASSERT_EQ(one[i], three[i]) << "element " << i;
  }
}

// GEMM in bands of rows and of columns, against one call.
TEST(CpuDeviceTest, BandedGemmEqualsOneThreadsWithinRounding) {
  for (const auto& [m, n, k] :
       {std::tuple{512, 96, 128}, std::tuple{64, 700, 256}}) {
    const std::vector<float> a = Random(m * k, 6), b = Random(k * n, 7);
    std::vector<float> c1(m * n), c3(m * n);
    CpuDeviceOptions o1, o3;
    o1.threads = 1;
    o3.threads = 3;
    CpuDevice(o1).Gemm(false, true, m, n, k, 1, a.data(), k, b.data(), k, 0,
                       c1.data(), n);
    CpuDevice(o3).Gemm(false, true, m, n, k, 1, a.data(), k, b.data(), k, 0,
                       c3.data(), n);
    for (int i = 0; i < m * n; ++i) {
      ASSERT_NEAR(c1[i], c3[i], 1e-4f * (1 + std::fabs(c1[i]))) << i;
    }
  }
}

// bf16 GEMM, the AVX512-BF16 kernel (where the CPU has it) and the
// rounded fallback, against double sums of the rounded inputs: odd k, n
// not a multiple of 32, m not of 8, every transpose, beta != 0.
TEST(Bf16GemmTest, EqualsTheRoundedProductInEveryLayout) {
  CpuDeviceOptions options;
  options.threads = 2;
  CpuDevice dev(options);
  dev.SetBf16Gemm(true);
  const int64_t m = 37, n = 45, k = 19;
  const std::vector<float> a = Random(m * k, 8), b = Random(k * n, 9),
                           c0 = Random(m * n, 10);
  for (int layout = 0; layout < 4; ++layout) {
    const bool ta = layout & 1, tb = layout & 2;
    const int64_t lda = ta ? m : k, ldb = tb ? k : n;
    std::vector<double> want(m * n);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) {
          const float x = ta ? a[p * lda + i] : a[i * lda + p];
          const float y = tb ? b[j * ldb + p] : b[p * ldb + j];
          s += double{FromBf16(ToBf16(x))} * FromBf16(ToBf16(y));
        }
        want[i * n + j] = 1.5 * s + 0.5 * c0[i * n + j];
      }
    }
    std::vector<float> c = c0, r = c0;
    dev.Gemm(ta, tb, m, n, k, 1.5f, a.data(), lda, b.data(), ldb, 0.5f,
             c.data(), n);
    Bf16GemmRounded(ta, tb, m, n, k, 1.5f, a.data(), lda, b.data(), ldb, 0.5f,
                    r.data(), n,
                    [](bool ta2, bool tb2, int64_t m2, int64_t n2, int64_t k2,
                       float al, const float* a2, int64_t lda2, const float* b2,
                       int64_t ldb2, float be, float* c2, int64_t ldc2) {
                      CpuDevice plain;
                      plain.Gemm(ta2, tb2, m2, n2, k2, al, a2, lda2, b2, ldb2,
                                 be, c2, ldc2);
                    });
    for (int64_t i = 0; i < m * n; ++i) {
      ASSERT_NEAR(c[i], want[i], 1e-5 * (1 + std::fabs(want[i])))
          << "layout " << layout << " element " << i;
      ASSERT_NEAR(r[i], want[i], 1e-5 * (1 + std::fabs(want[i])));
    }
  }
  EXPECT_EQ(ToBf16(1.0f), 0x3f80);
  EXPECT_EQ(FromBf16(ToBf16(1.0f + 1.0f / 256)), 1.0f);  // A tie: to even.
  EXPECT_TRUE(std::isnan(FromBf16(ToBf16(std::nanf("")))));
}

TEST(CpuMathTest, ExpAndErfAsAccurateAsDocumented) {
  double exp_rel = 0, erf_abs = 0;
  for (float x = -87; x <= 88; x += 1e-3f) {
    exp_rel = std::max(exp_rel, std::fabs(ExpF(x) / std::exp(double{x}) - 1));
  }
  for (float x = -8; x <= 8; x += 1e-4f) {
    erf_abs = std::max(erf_abs, std::fabs(ErfF(x) - std::erf(double{x})));
  }
  EXPECT_LT(exp_rel, 1e-7);
  EXPECT_LT(erf_abs, 5e-7);
  EXPECT_LT(ExpF(-1000), 1.3e-38f);
  EXPECT_TRUE(std::isnan(ExpF(std::nanf(""))));  // (UBSan: no NaN to int)
  EXPECT_TRUE(std::isnan(ErfF(std::nanf(""))));
  EXPECT_EQ(ErfF(100), 1.0f);
}

}  // namespace
}  // namespace aqueduct
