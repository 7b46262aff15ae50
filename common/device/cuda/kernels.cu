#include <cuda_runtime.h>

#include "common/device/cuda/kernels.h"
#include "common/device/dropout_hash.h"

namespace aqueduct {
namespace cuda {

namespace {

constexpr int kThreads = 256;

// Grid-stride loops: a bounded grid covers any n.
inline unsigned Blocks(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 ? (blocks > 0 ? blocks : 1)
                                              : 65535);
}

#define AQ_GRID_STRIDE(i, n)                                            \
  for (int64_t i =                                                      \
           blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; \
       i < (n); i += static_cast<int64_t>(gridDim.x) * blockDim.x)

__global__ void FillKernel(float* x, int64_t n, float value) {
  AQ_GRID_STRIDE(i, n) { x[i] = value; }
}

__global__ void AxpbyKernel(int64_t n, float a, const float* x, float b,
                            float* y) {
  // b == 0 must not propagate NaN/garbage from y (BLAS semantics).
  AQ_GRID_STRIDE(i, n) { y[i] = b == 0.0f ? a * x[i] : a * x[i] + b * y[i]; }
}

__global__ void AddBiasKernel(float* y, const float* bias, int64_t rows,
                              int64_t cols, bool relu) {
  AQ_GRID_STRIDE(i, rows * cols) {
    const float v = y[i] + bias[i % cols];
    y[i] = relu ? fmaxf(v, 0.0f) : v;
  }
}

__global__ void ReluKernel(const float* x, float* y, int64_t n) {
  AQ_GRID_STRIDE(i, n) { y[i] = fmaxf(x[i], 0.0f); }
}

__global__ void ReluBackwardKernel(const float* y, const float* dy, float* dx,
                                   int64_t n) {
  AQ_GRID_STRIDE(i, n) { dx[i] = y[i] > 0.0f ? dy[i] : 0.0f; }
}

__global__ void GeluKernel(const float* x, float* y, int64_t n) {
  AQ_GRID_STRIDE(i, n) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
  }
}

__global__ void GeluBackwardKernel(const float* x, const float* dy, float* dx,
                                   int64_t n) {
  AQ_GRID_STRIDE(i, n) {
    const float v = x[i];
    const float cdf = 0.5f * (1.0f + erff(v * 0.70710678118654752f));
    const float pdf = 0.39894228040143268f * expf(-0.5f * v * v);
    dx[i] = dy[i] * (cdf + v * pdf);
  }
}

__global__ void DropoutKernel(const float* x, float* y, int64_t n, float p,
                              float scale, uint64_t key, uint64_t offset) {
  AQ_GRID_STRIDE(i, n) {
    y[i] = DropoutUniform(key, offset + static_cast<uint64_t>(i)) >= p
               ? x[i] * scale
               : 0.0f;
  }
}

__global__ void SgdKernel(float* w, const float* g, float* buf, int64_t n,
                          float lr, float mom, float damp, float wd,
                          bool nesterov, bool first_step) {
  AQ_GRID_STRIDE(i, n) {
    const float d = g[i] + wd * w[i];
    if (mom == 0.0f) {
      w[i] -= lr * d;
    } else {
      const float b = first_step ? d : mom * buf[i] + damp * d;
      buf[i] = b;
      w[i] -= lr * (nesterov ? d + mom * b : b);
    }
  }
}

__global__ void AdamKernel(float* w, const float* g, float* m, float* v,
                           int64_t n, float step_size, float inv_sqrt_bc2,
                           float b1, float b2, float eps, float wd) {
  AQ_GRID_STRIDE(i, n) {
    const float grad = g[i] + wd * w[i];
    const float mi = b1 * m[i] + (1.0f - b1) * grad;
    const float vi = b2 * v[i] + (1.0f - b2) * grad * grad;
    m[i] = mi;
    v[i] = vi;
    w[i] -= step_size * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
  }
}

}  // namespace

void Fill(float* x, int64_t n, float value, cudaStream_t s) {
  FillKernel<<<Blocks(n), kThreads, 0, s>>>(x, n, value);
}
void Axpby(int64_t n, float a, const float* x, float b, float* y,
           cudaStream_t s) {
  AxpbyKernel<<<Blocks(n), kThreads, 0, s>>>(n, a, x, b, y);
}
void AddBias(float* y, const float* bias, int64_t rows, int64_t cols, bool relu,
             cudaStream_t s) {
  AddBiasKernel<<<Blocks(rows * cols), kThreads, 0, s>>>(y, bias, rows, cols,
                                                         relu);
}
void Relu(const float* x, float* y, int64_t n, cudaStream_t s) {
  ReluKernel<<<Blocks(n), kThreads, 0, s>>>(x, y, n);
}
void ReluBackward(const float* y, const float* dy, float* dx, int64_t n,
                  cudaStream_t s) {
  ReluBackwardKernel<<<Blocks(n), kThreads, 0, s>>>(y, dy, dx, n);
}
void Gelu(const float* x, float* y, int64_t n, cudaStream_t s) {
  GeluKernel<<<Blocks(n), kThreads, 0, s>>>(x, y, n);
}
void GeluBackward(const float* x, const float* dy, float* dx, int64_t n,
                  cudaStream_t s) {
  GeluBackwardKernel<<<Blocks(n), kThreads, 0, s>>>(x, dy, dx, n);
}
void Dropout(const float* x, float* y, int64_t n, float p, uint64_t key,
             uint64_t index_offset, cudaStream_t s) {
  DropoutKernel<<<Blocks(n), kThreads, 0, s>>>(x, y, n, p, 1.0f / (1.0f - p),
                                               key, index_offset);
}
void SgdStep(float* w, const float* g, float* buf, int64_t n, float lr,
             float momentum, float dampening, float weight_decay, bool nesterov,
             bool first_step, cudaStream_t s) {
  SgdKernel<<<Blocks(n), kThreads, 0, s>>>(w, g, buf, n, lr, momentum,
                                           1.0f - dampening, weight_decay,
                                           nesterov, first_step);
}
void AdamStep(float* w, const float* g, float* m, float* v, int64_t n,
              float step_size, float inv_sqrt_bc2, float beta1, float beta2,
              float eps, float weight_decay, cudaStream_t s) {
  AdamKernel<<<Blocks(n), kThreads, 0, s>>>(
      w, g, m, v, n, step_size, inv_sqrt_bc2, beta1, beta2, eps, weight_decay);
}

}  // namespace cuda
}  // namespace aqueduct
