#include "common/device/cpu_device.h"

#include <cblas.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/device/bf16_gemm.h"
#include "common/device/cpu_math.h"
#include "common/status.h"

namespace aqueduct {

namespace {

// Size classes (CachingAllocator::RoundSize) are multiples of 512 bytes, so
// every block is a valid aligned_alloc size.
constexpr size_t kAlignment = 64;

// Elements (or rows x columns) a thread takes at the least: below, a
// kernel runs on the caller alone (waking a helper costs microseconds).
constexpr int64_t kGrain = 16384;
// A GEMM's multiply-adds below which it runs on one thread.
constexpr int64_t kGemmGrain = int64_t{1} << 18;

// One single-threaded OpenBLAS call (Bf16Gemm's fallback inside a chunk).
void OneCall(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
             float alpha, const float* a, int64_t lda, const float* b,
             int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b,
              ldb, beta, c, ldc);
}

int ThreadsOf(const CpuDeviceOptions& options) {
  if (options.threads > 0) return options.threads;
  return std::max(1u, std::thread::hardware_concurrency());
}

// out[i] = value(i) for i in [0, n), in order, with non-temporal (streaming)
// stores where the CPU has them. For an optimizer stepping out of place into
// a buffer that is not in cache (the version a stash released two steps
// ago), ordinary stores first read every destination line from memory; in
// the 2-stage benchmark pipeline (docs/benchmarks.md) stage 0's SGD step
// over 2.6M weights took 3.8 ms that way and 2.7 ms with streaming stores.
template <typename F>
inline void StreamingStore(float* out, int64_t n, F&& value) {
#if defined(__SSE2__)
  int64_t i = 0;
  for (; i < n && reinterpret_cast<uintptr_t>(out + i) % 64 != 0; ++i) {
    out[i] = value(i);
  }
  alignas(64) float chunk[16];
  for (; i + 16 <= n; i += 16) {
    for (int k = 0; k < 16; ++k) chunk[k] = value(i + k);
    for (int k = 0; k < 16; k += 4) {
      _mm_stream_ps(out + i + k, _mm_load_ps(chunk + k));
    }
  }
  for (; i < n; ++i) out[i] = value(i);
  _mm_sfence();  // order the streaming stores before later readers
#else
  for (int64_t i = 0; i < n; ++i) out[i] = value(i);
#endif
}

// w[i] = value(i): in place when w is also the source (the line is in cache
// already), streaming when it is a separate destination.
template <typename F>
inline void WriteWeights(float* w, const float* source, int64_t n, F&& value) {
  if (source != nullptr && source != w) {
    StreamingStore(w, n, value);
  } else {
    for (int64_t i = 0; i < n; ++i) w[i] = value(i);
  }
}

template <bool kFirstStep, bool kNesterov>
void SgdMomentumStep(float* w, const float* g, float* buf, int64_t n,
                     const SgdParams& p) {
  const float wd = p.weight_decay, mom = p.momentum, lr = p.lr;
  const float damp = 1.0f - p.dampening;
  const float* src = p.source != nullptr ? p.source : w;
  WriteWeights(w, p.source, n, [=](int64_t i) {
    const float d = g[i] + wd * src[i];
    const float b = kFirstStep ? d : mom * buf[i] + damp * d;
    buf[i] = b;
    return src[i] - lr * (kNesterov ? d + mom * b : b);
  });
}

}  // namespace

CpuDevice::CpuDevice(const CpuDeviceOptions& options)
    : options_(options),
      alloc_(
          "cpu",
          [](size_t bytes) -> absl::StatusOr<void*> {
            return std::aligned_alloc(kAlignment, bytes);
          },
          [](void* data, size_t) { std::free(data); }, options.cache_bytes),
      pool_(ThreadsOf(options)) {
  // The pool threads every kernel; OpenBLAS runs inside a chunk, alone.
  openblas_set_num_threads(1);
}

CpuDevice::~CpuDevice() = default;

std::string CpuDevice::name() const {
  return absl::StrCat("cpu (OpenBLAS ", pool_.threads(), " threads)");
}

absl::StatusOr<void*> CpuDevice::AllocateRaw(size_t bytes) {
  ASSIGN_OR_RETURN(void* block, alloc_.Allocate(bytes + kHeadroom));
  return static_cast<char*>(block) + kHeadroom;
}

void CpuDevice::FreeRaw(void* data, size_t bytes) {
  alloc_.Free(static_cast<char*>(data) - kHeadroom, bytes + kHeadroom);
}

absl::Status CpuDevice::CopyFromHost(const void* src, const Tensor& dst) {
  std::memcpy(dst.raw(), src, dst.nbytes());
  return absl::OkStatus();
}

absl::Status CpuDevice::CopyToHost(const Tensor& src, void* dst) {
  std::memcpy(dst, src.raw(), src.nbytes());
  return absl::OkStatus();
}

void CpuDevice::Copy(const Tensor& src, const Tensor& dst) {
  std::memcpy(dst.raw(), src.raw(), std::min(src.nbytes(), dst.nbytes()));
}

void CpuDevice::Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n,
                     int64_t k, float alpha, const float* a, int64_t lda,
                     const float* b, int64_t ldb, float beta, float* c,
                     int64_t ldc) {
  if (!bf16_gemm_) {
    Fp32Gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  Bf16Gemm(&pool_, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c,
           ldc,
           [this](bool ta, bool tb, int64_t m2, int64_t n2, int64_t k2,
                  float al, const float* a2, int64_t lda2, const float* b2,
                  int64_t ldb2, float be, float* c2, int64_t ldc2) {
             Fp32Gemm(ta, tb, m2, n2, k2, al, a2, lda2, b2, ldb2, be, c2, ldc2);
           });
}

void CpuDevice::Fp32Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n,
                         int64_t k, float alpha, const float* a, int64_t lda,
                         const float* b, int64_t ldb, float beta, float* c,
                         int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    // BLAS would leave C untouched when k == 0 only for beta == 1.
    for (int64_t i = 0; i < m; ++i) {
      float* row = c + i * ldc;
      for (int64_t j = 0; j < n; ++j) row[j] = beta == 0 ? 0 : beta * row[j];
    }
    return;
  }
  auto gemm = [&](int64_t rows, int64_t cols, const float* a0, const float* b0,
                  float* c0) {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, rows, cols, k, alpha, a0,
                lda, b0, ldb, beta, c0, ldc);
  };
  const int64_t grain = std::max<int64_t>(1, kGemmGrain / (n * k));
  if (m * n * k < 2 * kGemmGrain || (m < 32 && n < 32)) {
    gemm(m, n, a, b, c);
  } else if (m >= n) {  // Bands of C's rows: A's rows (columns if A^T).
    pool_.For(m, grain, 8, [&](int64_t r0, int64_t r1) {
      gemm(r1 - r0, n, a + r0 * (trans_a ? 1 : lda), b, c + r0 * ldc);
    });
  } else {  // Bands of C's columns: B's columns (rows if B^T).
    pool_.For(n, std::max<int64_t>(1, kGemmGrain / (m * k)), 16,
              [&](int64_t c0, int64_t c1) {
                gemm(m, c1 - c0, a, b + c0 * (trans_b ? ldb : 1), c + c0);
              });
  }
}

void CpuDevice::GemmStridedBatched(bool trans_a, bool trans_b, int64_t m,
                                   int64_t n, int64_t k, float alpha,
                                   const float* a, int64_t lda,
                                   int64_t stride_a, const float* b,
                                   int64_t ldb, int64_t stride_b, float beta,
                                   float* c, int64_t ldc, int64_t stride_c,
                                   int64_t batch) {
  // A matrix per chunk (each too small to split), on every thread.
  const int64_t grain = std::max<int64_t>(1, kGemmGrain / (m * n * k + 1));
  pool_.For(batch, grain, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      if (bf16_gemm_) {
        Bf16Gemm(nullptr, trans_a, trans_b, m, n, k, alpha, a + i * stride_a,
                 lda, b + i * stride_b, ldb, beta, c + i * stride_c, ldc,
                 OneCall);
        continue;
      }
      cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                  trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha,
                  a + i * stride_a, lda, b + i * stride_b, ldb, beta,
                  c + i * stride_c, ldc);
    }
  });
}

void CpuDevice::Fill(float* x, int64_t n, float value) {
  Each(n, [=](int64_t i0, int64_t i1) { std::fill(x + i0, x + i1, value); });
}

void CpuDevice::Axpby(int64_t n, float a, const float* x, float b, float* y) {
  Each(n, [=](int64_t i0, int64_t i1) {
    if (b == 0) {
      for (int64_t i = i0; i < i1; ++i) y[i] = a * x[i];
    } else {
      for (int64_t i = i0; i < i1; ++i) y[i] = a * x[i] + b * y[i];
    }
  });
}

void CpuDevice::AddBias(float* y, const float* bias, int64_t rows, int64_t cols,
                        bool relu) {
  Rows(rows, cols, [=](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* row = y + r * cols;
      if (relu) {
        for (int64_t c = 0; c < cols; ++c) {
          row[c] = std::max(row[c] + bias[c], 0.0f);
        }
      } else {
        for (int64_t c = 0; c < cols; ++c) row[c] += bias[c];
      }
    }
  });
}

void CpuDevice::SumRows(const float* x, int64_t rows, int64_t cols, float beta,
                        float* out) {
  // Bands of columns, each summed over the rows in order (as one thread
  // would: the sums do not depend on the threads).
  pool_.For(cols, std::max<int64_t>(16, kGrain / std::max<int64_t>(1, rows)),
            16, [=](int64_t c0, int64_t c1) {
              if (beta == 0) {
                std::fill(out + c0, out + c1, 0.0f);
              } else if (beta != 1) {
                for (int64_t c = c0; c < c1; ++c) out[c] *= beta;
              }
              for (int64_t r = 0; r < rows; ++r) {
                const float* row = x + r * cols;
                for (int64_t c = c0; c < c1; ++c) out[c] += row[c];
              }
            });
}

void CpuDevice::Relu(const float* x, float* y, int64_t n) {
  Each(n, [=](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) y[i] = std::max(x[i], 0.0f);
  });
}

void CpuDevice::ReluBackward(const float* y, const float* dy, float* dx,
                             int64_t n) {
  // Branch-free so that it vectorises (the signs are data, not predictable).
  Each(n, [=](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float keep = y[i] > 0.0f ? 1.0f : 0.0f;
      dx[i] = dy[i] * keep;
    }
  });
}

void CpuDevice::Gelu(const float* x, float* y, int64_t n) {
  constexpr float kInvSqrt2 = 0.70710678118654752f;
  Each(n, [=](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      y[i] = 0.5f * x[i] * (1.0f + ErfF(x[i] * kInvSqrt2));
    }
  });
}

void CpuDevice::GeluBackward(const float* x, const float* dy, float* dx,
                             int64_t n) {
  constexpr float kInvSqrt2 = 0.70710678118654752f;
  constexpr float kInvSqrt2Pi = 0.39894228040143268f;
  Each(n, [=](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float cdf = 0.5f * (1.0f + ErfF(x[i] * kInvSqrt2));
      const float pdf = kInvSqrt2Pi * ExpF(-0.5f * x[i] * x[i]);
      dx[i] = dy[i] * (cdf + x[i] * pdf);
    }
  });
}

// GELU's tanh approximation, in PyTorch's order of operations (its CPU
// kernel for approximate="tanh"); libm's tanhf, as the curve is what a
// GPT-2 checkpoint was trained with.
namespace {
constexpr float kGeluTanhBeta = 0.79788456080286536f;  // sqrt(2 / pi)
constexpr float kGeluTanhKappa = 0.044715f;
}  // namespace

void CpuDevice::GeluTanh(const float* x, float* y, int64_t n) {
  Each(n, [=](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float v = x[i];
      const float inner = kGeluTanhBeta * (v + kGeluTanhKappa * v * v * v);
      y[i] = 0.5f * v * (1.0f + std::tanh(inner));
    }
  });
}

void CpuDevice::GeluTanhBackward(const float* x, const float* dy, float* dx,
                                 int64_t n) {
  Each(n, [=](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float v = x[i], v2 = v * v;
      const float t = std::tanh(kGeluTanhBeta * (v + kGeluTanhKappa * v2 * v));
      const float right_derivative =
          (1.0f - t * t) * kGeluTanhBeta * (1.0f + 3.0f * kGeluTanhKappa * v2);
      dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * right_derivative);
    }
  });
}

void CpuDevice::Dropout(const float* x, float* y, int64_t n, float p,
                        uint64_t key, uint64_t index_offset) {
  const float scale = 1.0f / (1.0f - p);
  Each(n, [=](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      y[i] = DropoutUniform(key, index_offset + static_cast<uint64_t>(i)) >= p
                 ? x[i] * scale
                 : 0.0f;
    }
  });
}

void CpuDevice::SwapAxes01(const float* x, int64_t dim0, int64_t dim1,
                           int64_t inner, const float* bias, float* y) {
  for (int64_t a = 0; a < dim0; ++a) {
    const float add = bias == nullptr ? 0.0f : bias[a];
    for (int64_t b = 0; b < dim1; ++b) {
      const float* src = x + (a * dim1 + b) * inner;
      float* dst = y + (b * dim0 + a) * inner;
      for (int64_t p = 0; p < inner; ++p) dst[p] = src[p] + add;
    }
  }
}

void CpuDevice::SumChannels(const float* x, int64_t outer, int64_t channels,
                            int64_t inner, float beta, float* out) {
  for (int64_t c = 0; c < channels; ++c) {
    double sum = 0;
    for (int64_t a = 0; a < outer; ++a) {
      const float* plane = x + (a * channels + c) * inner;
      float s = 0;
      for (int64_t p = 0; p < inner; ++p) s += plane[p];
      sum += s;
    }
    out[c] = static_cast<float>(sum) + (beta == 0 ? 0.0f : beta * out[c]);
  }
}

void CpuDevice::Im2Col(const float* x, int64_t batch, const Window2d& w,
                       float* col) {
  const int64_t oh = w.out_height(), ow = w.out_width();
  const int64_t plane = oh * ow;
  const int64_t row_len = batch * plane;
  for (int64_t c = 0; c < w.channels; ++c) {
    for (int64_t ki = 0; ki < w.kernel; ++ki) {
      for (int64_t kj = 0; kj < w.kernel; ++kj) {
        float* out = col + ((c * w.kernel + ki) * w.kernel + kj) * row_len;
        for (int64_t b = 0; b < batch; ++b) {
          const float* img = x + (b * w.channels + c) * w.height * w.width;
          float* dst = out + b * plane;
          for (int64_t y = 0; y < oh; ++y) {
            const int64_t iy = y * w.stride - w.padding + ki;
            float* drow = dst + y * ow;
            if (iy < 0 || iy >= w.height) {
              std::fill(drow, drow + ow, 0.0f);
              continue;
            }
            const float* srow = img + iy * w.width;
            for (int64_t xo = 0; xo < ow; ++xo) {
              const int64_t ix = xo * w.stride - w.padding + kj;
              drow[xo] = (ix >= 0 && ix < w.width) ? srow[ix] : 0.0f;
            }
          }
        }
      }
    }
  }
}

void CpuDevice::Col2Im(const float* col, int64_t batch, const Window2d& w,
                       float* dx) {
  const int64_t oh = w.out_height(), ow = w.out_width();
  const int64_t plane = oh * ow;
  const int64_t row_len = batch * plane;
  std::fill(dx, dx + batch * w.channels * w.height * w.width, 0.0f);
  for (int64_t c = 0; c < w.channels; ++c) {
    for (int64_t ki = 0; ki < w.kernel; ++ki) {
      for (int64_t kj = 0; kj < w.kernel; ++kj) {
        const float* in = col + ((c * w.kernel + ki) * w.kernel + kj) * row_len;
        for (int64_t b = 0; b < batch; ++b) {
          float* img = dx + (b * w.channels + c) * w.height * w.width;
          const float* src = in + b * plane;
          for (int64_t y = 0; y < oh; ++y) {
            const int64_t iy = y * w.stride - w.padding + ki;
            if (iy < 0 || iy >= w.height) continue;
            float* drow = img + iy * w.width;
            const float* srow = src + y * ow;
            for (int64_t xo = 0; xo < ow; ++xo) {
              const int64_t ix = xo * w.stride - w.padding + kj;
              if (ix >= 0 && ix < w.width) drow[ix] += srow[xo];
            }
          }
        }
      }
    }
  }
}

void CpuDevice::MaxPool(const float* x, int64_t planes, const Window2d& w,
                        float* y, int32_t* argmax) {
  const int64_t oh = w.out_height(), ow = w.out_width();
  for (int64_t p = 0; p < planes; ++p) {
    const float* img = x + p * w.height * w.width;
    float* out = y + p * oh * ow;
    int32_t* arg = argmax + p * oh * ow;
    for (int64_t yo = 0; yo < oh; ++yo) {
      for (int64_t xo = 0; xo < ow; ++xo) {
        float best = -std::numeric_limits<float>::infinity();
        int32_t best_index = -1;
        for (int64_t ki = 0; ki < w.kernel; ++ki) {
          const int64_t iy = yo * w.stride - w.padding + ki;
          if (iy < 0 || iy >= w.height) continue;
          for (int64_t kj = 0; kj < w.kernel; ++kj) {
            const int64_t ix = xo * w.stride - w.padding + kj;
            if (ix < 0 || ix >= w.width) continue;
            const float v = img[iy * w.width + ix];
            // NaN propagates as in PyTorch.
            if (v > best || best_index < 0 || std::isnan(v)) {
              best = v;
              best_index = static_cast<int32_t>(iy * w.width + ix);
            }
          }
        }
        out[yo * ow + xo] = best;
        arg[yo * ow + xo] = best_index;
      }
    }
  }
}

void CpuDevice::MaxPoolBackward(const float* dy, const int32_t* argmax,
                                int64_t planes, const Window2d& w, float* dx) {
  const int64_t oh = w.out_height(), ow = w.out_width();
  std::fill(dx, dx + planes * w.height * w.width, 0.0f);
  for (int64_t p = 0; p < planes; ++p) {
    float* img = dx + p * w.height * w.width;
    const float* g = dy + p * oh * ow;
    const int32_t* arg = argmax + p * oh * ow;
    for (int64_t i = 0; i < oh * ow; ++i) {
      if (arg[i] >= 0) img[arg[i]] += g[i];
    }
  }
}

void CpuDevice::LayerNorm(const float* x, const float* gamma, const float* beta,
                          int64_t rows, int64_t cols, float eps, float* y,
                          float* mean, float* rstd) {
  Rows(rows, cols, [=](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * cols;
      float* yr = y + r * cols;
      float sum = 0;
      for (int64_t c = 0; c < cols; ++c) sum += xr[c];
      const float mu = sum / static_cast<float>(cols);
      float sq = 0;
      for (int64_t c = 0; c < cols; ++c) sq += (xr[c] - mu) * (xr[c] - mu);
      const float rs = 1.0f / std::sqrt(sq / static_cast<float>(cols) + eps);
      for (int64_t c = 0; c < cols; ++c) {
        yr[c] = (xr[c] - mu) * rs * gamma[c] + beta[c];
      }
      mean[r] = mu;
      rstd[r] = rs;
    }
  });
}

void CpuDevice::LayerNormBackward(const float* dy, const float* x,
                                  const float* gamma, const float* mean,
                                  const float* rstd, int64_t rows, int64_t cols,
                                  float* dx, float* dgamma, float* dbeta,
                                  bool accumulate) {
  // Two passes, each thread-count independent: dx by rows, then dgamma
  // and dbeta by bands of columns, each summed over the rows in order.
  const float inv_cols = 1.0f / static_cast<float>(cols);
  if (dx != nullptr) {
    Rows(rows, cols, [=](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const float* xr = x + r * cols;
        const float* dyr = dy + r * cols;
        const float mu = mean[r], rs = rstd[r];
        float sum_g = 0, sum_gx = 0;
        for (int64_t c = 0; c < cols; ++c) {
          const float g = dyr[c] * gamma[c];
          sum_g += g;
          sum_gx += g * ((xr[c] - mu) * rs);
        }
        float* dxr = dx + r * cols;
        const float mean_g = sum_g * inv_cols, mean_gx = sum_gx * inv_cols;
        for (int64_t c = 0; c < cols; ++c) {
          const float xhat = (xr[c] - mu) * rs;
          dxr[c] = rs * (dyr[c] * gamma[c] - mean_g - xhat * mean_gx);
        }
      }
    });
  }
  pool_.For(cols, std::max<int64_t>(16, kGrain / std::max<int64_t>(1, rows)),
            16, [=](int64_t c0, int64_t c1) {
              if (!accumulate) {
                std::fill(dgamma + c0, dgamma + c1, 0.0f);
                std::fill(dbeta + c0, dbeta + c1, 0.0f);
              }
              for (int64_t r = 0; r < rows; ++r) {
                const float* xr = x + r * cols;
                const float* dyr = dy + r * cols;
                const float mu = mean[r], rs = rstd[r];
                for (int64_t c = c0; c < c1; ++c) {
                  dgamma[c] += dyr[c] * ((xr[c] - mu) * rs);
                  dbeta[c] += dyr[c];
                }
              }
            });
}

void CpuDevice::EmbeddingForward(const float* ids, const float* table,
                                 int64_t vocab, int64_t rows, int64_t dim,
                                 float* y) {
  const float limit = static_cast<float>(vocab);
  for (int64_t r = 0; r < rows; ++r) {
    const float id = ids[r];
    float* out = y + r * dim;
    if (id >= 0 && id < limit) {
      std::memcpy(out, table + static_cast<int64_t>(id) * dim,
                  static_cast<size_t>(dim) * sizeof(float));
    } else {
      std::fill(out, out + dim, 0.0f);
    }
  }
}

void CpuDevice::EmbeddingBackward(const float* ids, const float* dy,
                                  int64_t vocab, int64_t rows, int64_t dim,
                                  float* dtable) {
  const float limit = static_cast<float>(vocab);
  for (int64_t r = 0; r < rows; ++r) {
    const float id = ids[r];
    if (!(id >= 0 && id < limit)) continue;
    float* out = dtable + static_cast<int64_t>(id) * dim;
    const float* g = dy + r * dim;
    for (int64_t c = 0; c < dim; ++c) out[c] += g[c];
  }
}

void CpuDevice::CausalSoftmax(float* s, int64_t count, int64_t t, float scale) {
  Rows(count * t, t, [=](int64_t r0, int64_t r1) {
    for (int64_t row_index = r0; row_index < r1; ++row_index) {
      float* row = s + row_index * t;
      const int64_t n = row_index % t + 1;  // positions 0..i
      float max = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < n; ++j) max = std::max(max, scale * row[j]);
      for (int64_t j = 0; j < n; ++j) row[j] = ExpF(scale * row[j] - max);
      float sum = 0;
      for (int64_t j = 0; j < n; ++j) sum += row[j];
      const float inv_sum = 1.0f / sum;
      for (int64_t j = 0; j < n; ++j) row[j] *= inv_sum;
      std::fill(row + n, row + t, 0.0f);
    }
  });
}

void CpuDevice::CausalSoftmaxBackward(const float* p, float* d, int64_t count,
                                      int64_t t, float scale) {
  Rows(count * t, t, [=](int64_t r0, int64_t r1) {
    for (int64_t row_index = r0; row_index < r1; ++row_index) {
      const float* pr = p + row_index * t;
      float* dr = d + row_index * t;
      const int64_t n = row_index % t + 1;
      float dot = 0;
      for (int64_t j = 0; j < n; ++j) dot += pr[j] * dr[j];
      for (int64_t j = 0; j < n; ++j) dr[j] = scale * pr[j] * (dr[j] - dot);
      std::fill(dr + n, dr + t, 0.0f);
    }
  });
}

void CpuDevice::SoftmaxCrossEntropy(const float* logits, const int32_t* labels,
                                    int64_t rows, int64_t classes,
                                    float grad_scale, float* losses,
                                    float* dlogits) {
  Rows(rows, classes, [=](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* l = logits + r * classes;
      float* d = dlogits + r * classes;
      float m = l[0];
      for (int64_t c = 1; c < classes; ++c) m = std::max(m, l[c]);
      float sum = 0;
      for (int64_t c = 0; c < classes; ++c) sum += ExpF(l[c] - m);
      const float log_sum = std::log(sum);
      const int32_t label = labels[r];
      losses[r] = m + log_sum - l[label];
      const float inv_sum = 1.0f / sum;
      // Read l[c] before writing d[c]: they may alias.
      for (int64_t c = 0; c < classes; ++c) {
        const float softmax = ExpF(l[c] - m) * inv_sum;
        d[c] = (softmax - (c == label ? 1.0f : 0.0f)) * grad_scale;
      }
    }
  });
}

void CpuDevice::SgdStep(float* w, const float* g, float* buf, int64_t n,
                        const SgdParams& p) {
  Each(n, [&](int64_t i0, int64_t i1) {
    SgdParams range = p;
    if (p.source != nullptr) range.source = p.source + i0;
    SgdRange(w + i0, g + i0, buf == nullptr ? nullptr : buf + i0, i1 - i0,
             range);
  });
}

void CpuDevice::SgdRange(float* w, const float* g, float* buf, int64_t n,
                         const SgdParams& p) {
  if (p.momentum == 0) {
    const float wd = p.weight_decay, lr = p.lr;
    const float* src = p.source != nullptr ? p.source : w;
    WriteWeights(w, p.source, n,
                 [=](int64_t i) { return src[i] - lr * (g[i] + wd * src[i]); });
  } else if (p.first_step) {
    p.nesterov ? SgdMomentumStep<true, true>(w, g, buf, n, p)
               : SgdMomentumStep<true, false>(w, g, buf, n, p);
  } else {
    p.nesterov ? SgdMomentumStep<false, true>(w, g, buf, n, p)
               : SgdMomentumStep<false, false>(w, g, buf, n, p);
  }
}

void CpuDevice::AdamStep(float* w, const float* g, float* m, float* v,
                         int64_t n, const AdamParams& p) {
  Each(n, [&](int64_t i0, int64_t i1) {
    AdamParams range = p;
    if (p.source != nullptr) range.source = p.source + i0;
    AdamRange(w + i0, g + i0, m + i0, v + i0, i1 - i0, range);
  });
}

void CpuDevice::AdamRange(float* w, const float* g, float* m, float* v,
                          int64_t n, const AdamParams& p) {
  const AdamScales scales = AdamStepScales(p);
  const float step_size = scales.step_size;
  const float inv_sqrt_bc2 = scales.inv_sqrt_bc2;
  const float b1 = p.beta1, b2 = p.beta2, eps = p.eps;
  const float wd = scales.grad_decay, keep = scales.keep;
  const float* src = p.source != nullptr ? p.source : w;
  WriteWeights(w, p.source, n, [=](int64_t i) {
    const float grad = g[i] + wd * src[i];
    m[i] = b1 * m[i] + (1.0f - b1) * grad;
    v[i] = b2 * v[i] + (1.0f - b2) * grad * grad;
    const float denom = std::sqrt(v[i]) * inv_sqrt_bc2 + eps;
    const float decayed = src[i] * keep;
    return decayed - step_size * m[i] / denom;
  });
}

void CpuDevice::Each(int64_t n, absl::FunctionRef<void(int64_t, int64_t)> fn) {
  pool_.For(n, kGrain, 16, fn);
}

void CpuDevice::Rows(int64_t rows, int64_t cols,
                     absl::FunctionRef<void(int64_t, int64_t)> fn) {
  pool_.For(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, cols)), 1,
            fn);
}

}  // namespace aqueduct
