#include <cuda_bf16.h>
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

__device__ __forceinline__ float GeluTanhInner(float v) {
  return 0.79788456080286536f * (v + 0.044715f * v * v * v);
}

__global__ void GeluTanhKernel(const float* x, float* y, int64_t n) {
  AQ_GRID_STRIDE(i, n) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + tanhf(GeluTanhInner(v)));
  }
}

__global__ void GeluTanhBackwardKernel(const float* x, const float* dy,
                                       float* dx, int64_t n) {
  AQ_GRID_STRIDE(i, n) {
    const float v = x[i];
    const float t = tanhf(GeluTanhInner(v));
    const float right = (1.0f - t * t) * 0.79788456080286536f *
                        (1.0f + 3.0f * 0.044715f * v * v);
    dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * right);
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

__global__ void FloatToBf16Kernel(const float* x, __nv_bfloat16* y, int64_t n) {
  AQ_GRID_STRIDE(i, n) { y[i] = __float2bfloat16_rn(x[i]); }
}

__global__ void SgdKernel(float* w, const float* src, const float* g,
                          float* buf, int64_t n, float lr, float mom,
                          float damp, float wd, bool nesterov,
                          bool first_step) {
  AQ_GRID_STRIDE(i, n) {
    const float d = g[i] + wd * src[i];
    if (mom == 0.0f) {
      w[i] = src[i] - lr * d;
    } else {
      const float b = first_step ? d : mom * buf[i] + damp * d;
      buf[i] = b;
      w[i] = src[i] - lr * (nesterov ? d + mom * b : b);
    }
  }
}

__global__ void AdamKernel(float* w, const float* src, const float* g, float* m,
                           float* v, int64_t n, float step_size,
                           float inv_sqrt_bc2, float b1, float b2, float eps,
                           float wd, float keep) {
  AQ_GRID_STRIDE(i, n) {
    const float grad = g[i] + wd * src[i];
    const float mi = b1 * m[i] + (1.0f - b1) * grad;
    const float vi = b2 * v[i] + (1.0f - b2) * grad * grad;
    m[i] = mi;
    v[i] = vi;
    const float decayed = src[i] * keep;
    w[i] = decayed - step_size * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
  }
}

__global__ void SumRowsKernel(const float* x, int64_t rows, int64_t cols,
                              float beta, float* out) {
  AQ_GRID_STRIDE(c, cols) {
    float s = 0.0f;
    for (int64_t r = 0; r < rows; ++r) s += x[r * cols + c];
    out[c] = beta == 0.0f ? s : beta * out[c] + s;
  }
}

__global__ void SwapAxes01Kernel(const float* x, int64_t dim0, int64_t dim1,
                                 int64_t inner, const float* bias, float* y) {
  AQ_GRID_STRIDE(i, dim0 * dim1 * inner) {
    // i indexes y[b, a, p].
    const int64_t p = i % inner;
    const int64_t a = (i / inner) % dim0;
    const int64_t b = i / (inner * dim0);
    y[i] = x[(a * dim1 + b) * inner + p] + (bias == nullptr ? 0.0f : bias[a]);
  }
}

// Sum of `v` over the block (blockDim.x a power of two <= kThreads); every
// thread gets the result.
__device__ float BlockSum(float v, float* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
    __syncthreads();
  }
  const float total = shared[0];
  __syncthreads();
  return total;
}

// One block per channel.
__global__ void SumChannelsKernel(const float* x, int64_t outer,
                                  int64_t channels, int64_t inner, float beta,
                                  float* out) {
  __shared__ float shared[kThreads];
  const int64_t c = blockIdx.x;
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < outer * inner; i += blockDim.x) {
    const int64_t a = i / inner, p = i % inner;
    s += x[(a * channels + c) * inner + p];
  }
  const float total = BlockSum(s, shared);
  if (threadIdx.x == 0) out[c] = total + (beta == 0.0f ? 0.0f : beta * out[c]);
}

__global__ void Im2ColKernel(const float* x, int64_t batch, Window w,
                             float* col) {
  const int64_t plane = w.out_h * w.out_w;
  const int64_t row_len = batch * plane;
  AQ_GRID_STRIDE(i, w.channels * w.kernel * w.kernel * row_len) {
    const int64_t pos = i % row_len, row = i / row_len;
    const int64_t kj = row % w.kernel, ki = (row / w.kernel) % w.kernel;
    const int64_t c = row / (w.kernel * w.kernel);
    const int64_t b = pos / plane, xo = pos % w.out_w,
                  yo = (pos % plane) / w.out_w;
    const int64_t iy = yo * w.stride - w.padding + ki;
    const int64_t ix = xo * w.stride - w.padding + kj;
    col[i] = (iy >= 0 && iy < w.height && ix >= 0 && ix < w.width)
                 ? x[((b * w.channels + c) * w.height + iy) * w.width + ix]
                 : 0.0f;
  }
}

// Gather form of the adjoint: each input pixel sums the columns that read it.
__global__ void Col2ImKernel(const float* col, int64_t batch, Window w,
                             float* dx) {
  const int64_t plane = w.out_h * w.out_w;
  const int64_t row_len = batch * plane;
  AQ_GRID_STRIDE(i, batch * w.channels * w.height * w.width) {
    const int64_t ix = i % w.width, iy = (i / w.width) % w.height;
    const int64_t c = (i / (w.width * w.height)) % w.channels;
    const int64_t b = i / (w.width * w.height * w.channels);
    float s = 0.0f;
    for (int64_t ki = 0; ki < w.kernel; ++ki) {
      const int64_t ty = iy + w.padding - ki;
      if (ty < 0 || ty % w.stride != 0 || ty / w.stride >= w.out_h) continue;
      for (int64_t kj = 0; kj < w.kernel; ++kj) {
        const int64_t tx = ix + w.padding - kj;
        if (tx < 0 || tx % w.stride != 0 || tx / w.stride >= w.out_w) continue;
        const int64_t row = (c * w.kernel + ki) * w.kernel + kj;
        s += col[row * row_len + b * plane + (ty / w.stride) * w.out_w +
                 tx / w.stride];
      }
    }
    dx[i] = s;
  }
}

__global__ void MaxPoolKernel(const float* x, int64_t planes, Window w,
                              float* y, int32_t* argmax) {
  const int64_t out_plane = w.out_h * w.out_w;
  AQ_GRID_STRIDE(i, planes * out_plane) {
    const int64_t p = i / out_plane, xo = i % w.out_w,
                  yo = (i % out_plane) / w.out_w;
    const float* img = x + p * w.height * w.width;
    float best = -INFINITY;
    int32_t best_index = -1;
    for (int64_t ki = 0; ki < w.kernel; ++ki) {
      const int64_t iy = yo * w.stride - w.padding + ki;
      if (iy < 0 || iy >= w.height) continue;
      for (int64_t kj = 0; kj < w.kernel; ++kj) {
        const int64_t ix = xo * w.stride - w.padding + kj;
        if (ix < 0 || ix >= w.width) continue;
        const float v = img[iy * w.width + ix];
        if (v > best || best_index < 0 || isnan(v)) {
          best = v;
          best_index = static_cast<int32_t>(iy * w.width + ix);
        }
      }
    }
    y[i] = best;
    argmax[i] = best_index;
  }
}

__global__ void MaxPoolBackwardKernel(const float* dy, const int32_t* argmax,
                                      int64_t planes, Window w, float* dx) {
  const int64_t out_plane = w.out_h * w.out_w;
  AQ_GRID_STRIDE(i, planes * out_plane) {
    if (argmax[i] >= 0) {
      atomicAdd(dx + (i / out_plane) * w.height * w.width + argmax[i], dy[i]);
    }
  }
}

// One block per row.
__global__ void LayerNormKernel(const float* x, const float* gamma,
                                const float* beta, int64_t cols, float eps,
                                float* y, float* mean, float* rstd) {
  __shared__ float shared[kThreads];
  const int64_t r = blockIdx.x;
  const float* xr = x + r * cols;
  float s = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += xr[c];
  const float mu = BlockSum(s, shared) / static_cast<float>(cols);
  float sq = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    sq += (xr[c] - mu) * (xr[c] - mu);
  }
  const float rs =
      rsqrtf(BlockSum(sq, shared) / static_cast<float>(cols) + eps);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    y[r * cols + c] = (xr[c] - mu) * rs * gamma[c] + beta[c];
  }
  if (threadIdx.x == 0) {
    mean[r] = mu;
    rstd[r] = rs;
  }
}

// dx: one block per row.
__global__ void LayerNormDxKernel(const float* dy, const float* x,
                                  const float* gamma, const float* mean,
                                  const float* rstd, int64_t cols, float* dx) {
  __shared__ float shared[kThreads];
  const int64_t r = blockIdx.x;
  const float mu = mean[r], rs = rstd[r];
  float sg = 0.0f, sgx = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float g = dy[r * cols + c] * gamma[c];
    sg += g;
    sgx += g * (x[r * cols + c] - mu) * rs;
  }
  const float mean_g = BlockSum(sg, shared) / static_cast<float>(cols);
  const float mean_gx = BlockSum(sgx, shared) / static_cast<float>(cols);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float xhat = (x[r * cols + c] - mu) * rs;
    dx[r * cols + c] =
        rs * (dy[r * cols + c] * gamma[c] - mean_g - xhat * mean_gx);
  }
}

// dgamma, dbeta: one thread per column.
__global__ void LayerNormDparamsKernel(const float* dy, const float* x,
                                       const float* mean, const float* rstd,
                                       int64_t rows, int64_t cols,
                                       float* dgamma, float* dbeta,
                                       bool accumulate) {
  AQ_GRID_STRIDE(c, cols) {
    float g = 0.0f, b = 0.0f;
    for (int64_t r = 0; r < rows; ++r) {
      const float d = dy[r * cols + c];
      g += d * (x[r * cols + c] - mean[r]) * rstd[r];
      b += d;
    }
    dgamma[c] = accumulate ? dgamma[c] + g : g;
    dbeta[c] = accumulate ? dbeta[c] + b : b;
  }
}

__global__ void RmsNormKernel(const float* x, const float* gamma, int64_t cols,
                              float eps, float* y, float* rstd) {
  __shared__ float shared[kThreads];
  const int64_t r = blockIdx.x;
  const float* xr = x + r * cols;
  float sq = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sq += xr[c] * xr[c];
  const float rs =
      rsqrtf(BlockSum(sq, shared) / static_cast<float>(cols) + eps);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    y[r * cols + c] = xr[c] * rs * gamma[c];
  }
  if (threadIdx.x == 0) rstd[r] = rs;
}

// dx: one block per row.
__global__ void RmsNormDxKernel(const float* dy, const float* x,
                                const float* gamma, const float* rstd,
                                int64_t cols, float* dx) {
  __shared__ float shared[kThreads];
  const int64_t r = blockIdx.x;
  const float rs = rstd[r];
  float dot = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    dot += dy[r * cols + c] * gamma[c] * x[r * cols + c];
  }
  const float k = BlockSum(dot, shared) / static_cast<float>(cols) * rs * rs;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    dx[r * cols + c] = rs * (dy[r * cols + c] * gamma[c] - x[r * cols + c] * k);
  }
}

// dgamma: one thread per column.
__global__ void RmsNormDgammaKernel(const float* dy, const float* x,
                                    const float* rstd, int64_t rows,
                                    int64_t cols, float* dgamma,
                                    bool accumulate) {
  AQ_GRID_STRIDE(c, cols) {
    float g = 0.0f;
    for (int64_t r = 0; r < rows; ++r) {
      g += dy[r * cols + c] * (x[r * cols + c] * rstd[r]);
    }
    dgamma[c] = accumulate ? dgamma[c] + g : g;
  }
}

// One thread per rotated pair.
__global__ void RopeKernel(float* x, int64_t rows, int64_t positions,
                           int64_t heads, int64_t head_dim, const float* cos,
                           const float* sin, float sign) {
  const int64_t half = head_dim / 2;
  AQ_GRID_STRIDE(j, rows * heads * half) {
    const int64_t i = j % half;
    const int64_t rh = j / half;  // row * heads + head
    const int64_t p = (rh / heads) % positions;
    float* v = x + rh * head_dim;
    const float a = v[i], b = v[i + half];
    const float c = cos[p * half + i], s = sign * sin[p * half + i];
    v[i] = a * c - b * s;
    v[i + half] = b * c + a * s;
  }
}

__global__ void SwiGluKernel(const float* gate, const float* up, float* out,
                             int64_t n) {
  AQ_GRID_STRIDE(i, n) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

__global__ void SwiGluBackwardKernel(const float* gate, const float* up,
                                     const float* dout, float* dgate,
                                     float* dup, int64_t n) {
  AQ_GRID_STRIDE(i, n) {
    const float g = gate[i], u = up[i], d = dout[i];
    const float sig = 1.0f / (1.0f + expf(-g));
    dgate[i] = d * u * (sig * (1.0f + g * (1.0f - sig)));
    dup[i] = d * g * sig;
  }
}

// One block per row; logits and dlogits may alias.
__global__ void SoftmaxCrossEntropyKernel(const float* logits,
                                          const int32_t* labels,
                                          int64_t classes, float grad_scale,
                                          float* losses, float* dlogits) {
  __shared__ float shared[kThreads];
  const int64_t r = blockIdx.x;
  const float* l = logits + r * classes;
  float m = -INFINITY;
  for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) {
    m = fmaxf(m, l[c]);
  }
  shared[threadIdx.x] = m;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      shared[threadIdx.x] = fmaxf(shared[threadIdx.x], shared[threadIdx.x + s]);
    }
    __syncthreads();
  }
  m = shared[0];
  __syncthreads();
  float s = 0.0f;
  for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) {
    s += expf(l[c] - m);
  }
  const float sum = BlockSum(s, shared);
  const int32_t label = labels[r];
  // Every thread has read what it needs of l before any write below, except
  // l[label]: read it first, then synchronise.
  const float l_label = l[label];
  __syncthreads();
  if (threadIdx.x == 0) losses[r] = m + logf(sum) - l_label;
  const float inv_sum = 1.0f / sum;
  for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) {
    const float softmax = expf(l[c] - m) * inv_sum;
    dlogits[r * classes + c] =
        (softmax - (c == label ? 1.0f : 0.0f)) * grad_scale;
  }
}

__global__ void EmbeddingForwardKernel(const float* ids, const float* table,
                                       int64_t vocab, int64_t rows, int64_t dim,
                                       float* y) {
  const float limit = static_cast<float>(vocab);
  AQ_GRID_STRIDE(i, rows * dim) {
    const float id = ids[i / dim];
    y[i] = (id >= 0.0f && id < limit)
               ? table[static_cast<int64_t>(id) * dim + i % dim]
               : 0.0f;
  }
}

// Atomic adds: rows with the same id land in the same table row.
__global__ void EmbeddingBackwardKernel(const float* ids, const float* dy,
                                        int64_t vocab, int64_t rows,
                                        int64_t dim, float* dtable) {
  const float limit = static_cast<float>(vocab);
  AQ_GRID_STRIDE(i, rows * dim) {
    const float id = ids[i / dim];
    if (id >= 0.0f && id < limit) {
      atomicAdd(dtable + static_cast<int64_t>(id) * dim + i % dim, dy[i]);
    }
  }
}

constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = kThreads / kWarp;

__device__ float WarpMax(float v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  }
  return v;
}

__device__ float WarpSum(float v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) {
    v += __shfl_xor_sync(0xffffffffu, v, o);
  }
  return v;
}

// Blocks for one warp per row (grid-stride beyond 65535 blocks).
inline unsigned WarpBlocks(int64_t rows) {
  const int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  return static_cast<unsigned>(blocks < 65535 ? (blocks > 0 ? blocks : 1)
                                              : 65535);
}

// Row r of the count * t rows is row r % t of its matrix; the loop bound is
// the same for every lane of a warp, so the shuffles see full warps.
#define AQ_WARP_ROWS(r, rows)                                          \
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + \
                   threadIdx.x / kWarp;                                \
       r < (rows); r += static_cast<int64_t>(gridDim.x) * kWarpsPerBlock)

__global__ void CausalSoftmaxKernel(float* s, int64_t rows, int64_t t,
                                    float scale) {
  const int lane = threadIdx.x % kWarp;
  AQ_WARP_ROWS(r, rows) {
    float* row = s + r * t;
    const int64_t n = r % t + 1;
    float m = -INFINITY;
    for (int64_t j = lane; j < n; j += kWarp) m = fmaxf(m, scale * row[j]);
    m = WarpMax(m);
    float sum = 0.0f;
    for (int64_t j = lane; j < n; j += kWarp) sum += expf(scale * row[j] - m);
    const float inv_sum = 1.0f / WarpSum(sum);
    for (int64_t j = lane; j < t; j += kWarp) {
      row[j] = j < n ? expf(scale * row[j] - m) * inv_sum : 0.0f;
    }
  }
}

__global__ void CausalSoftmaxBackwardKernel(const float* p, float* d,
                                            int64_t rows, int64_t t,
                                            float scale) {
  const int lane = threadIdx.x % kWarp;
  AQ_WARP_ROWS(r, rows) {
    const float* pr = p + r * t;
    float* dr = d + r * t;
    const int64_t n = r % t + 1;
    float dot = 0.0f;
    for (int64_t j = lane; j < n; j += kWarp) dot += pr[j] * dr[j];
    dot = WarpSum(dot);
    for (int64_t j = lane; j < t; j += kWarp) {
      dr[j] = j < n ? scale * pr[j] * (dr[j] - dot) : 0.0f;
    }
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
void GeluTanh(const float* x, float* y, int64_t n, cudaStream_t s) {
  GeluTanhKernel<<<Blocks(n), kThreads, 0, s>>>(x, y, n);
}
void GeluTanhBackward(const float* x, const float* dy, float* dx, int64_t n,
                      cudaStream_t s) {
  GeluTanhBackwardKernel<<<Blocks(n), kThreads, 0, s>>>(x, dy, dx, n);
}
void Dropout(const float* x, float* y, int64_t n, float p, uint64_t key,
             uint64_t index_offset, cudaStream_t s) {
  DropoutKernel<<<Blocks(n), kThreads, 0, s>>>(x, y, n, p, 1.0f / (1.0f - p),
                                               key, index_offset);
}
void FloatToBf16(const float* x, void* y, int64_t n, cudaStream_t s) {
  FloatToBf16Kernel<<<Blocks(n), kThreads, 0, s>>>(
      x, static_cast<__nv_bfloat16*>(y), n);
}
void SgdStep(float* w, const float* src, const float* g, float* buf, int64_t n,
             float lr, float momentum, float dampening, float weight_decay,
             bool nesterov, bool first_step, cudaStream_t s) {
  SgdKernel<<<Blocks(n), kThreads, 0, s>>>(w, src, g, buf, n, lr, momentum,
                                           1.0f - dampening, weight_decay,
                                           nesterov, first_step);
}
void AdamStep(float* w, const float* src, const float* g, float* m, float* v,
              int64_t n, float step_size, float inv_sqrt_bc2, float beta1,
              float beta2, float eps, float weight_decay, float keep,
              cudaStream_t s) {
  AdamKernel<<<Blocks(n), kThreads, 0, s>>>(w, src, g, m, v, n, step_size,
                                            inv_sqrt_bc2, beta1, beta2, eps,
                                            weight_decay, keep);
}

void SumRows(const float* x, int64_t rows, int64_t cols, float beta, float* out,
             cudaStream_t s) {
  SumRowsKernel<<<Blocks(cols), kThreads, 0, s>>>(x, rows, cols, beta, out);
}
void SwapAxes01(const float* x, int64_t dim0, int64_t dim1, int64_t inner,
                const float* bias, float* y, cudaStream_t s) {
  SwapAxes01Kernel<<<Blocks(dim0 * dim1 * inner), kThreads, 0, s>>>(
      x, dim0, dim1, inner, bias, y);
}
void SumChannels(const float* x, int64_t outer, int64_t channels, int64_t inner,
                 float beta, float* out, cudaStream_t s) {
  if (channels == 0) return;
  SumChannelsKernel<<<static_cast<unsigned>(channels), kThreads, 0, s>>>(
      x, outer, channels, inner, beta, out);
}
void Im2Col(const float* x, int64_t batch, const Window& w, float* col,
            cudaStream_t s) {
  const int64_t n =
      w.channels * w.kernel * w.kernel * batch * w.out_h * w.out_w;
  Im2ColKernel<<<Blocks(n), kThreads, 0, s>>>(x, batch, w, col);
}
void Col2Im(const float* col, int64_t batch, const Window& w, float* dx,
            cudaStream_t s) {
  const int64_t n = batch * w.channels * w.height * w.width;
  Col2ImKernel<<<Blocks(n), kThreads, 0, s>>>(col, batch, w, dx);
}
void MaxPool(const float* x, int64_t planes, const Window& w, float* y,
             int32_t* argmax, cudaStream_t s) {
  MaxPoolKernel<<<Blocks(planes * w.out_h * w.out_w), kThreads, 0, s>>>(
      x, planes, w, y, argmax);
}
void MaxPoolBackward(const float* dy, const int32_t* argmax, int64_t planes,
                     const Window& w, float* dx, cudaStream_t s) {
  const int64_t n = planes * w.height * w.width;
  FillKernel<<<Blocks(n), kThreads, 0, s>>>(dx, n, 0.0f);
  MaxPoolBackwardKernel<<<Blocks(planes * w.out_h * w.out_w), kThreads, 0, s>>>(
      dy, argmax, planes, w, dx);
}
void LayerNorm(const float* x, const float* gamma, const float* beta,
               int64_t rows, int64_t cols, float eps, float* y, float* mean,
               float* rstd, cudaStream_t s) {
  if (rows == 0) return;
  LayerNormKernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(
      x, gamma, beta, cols, eps, y, mean, rstd);
}
void LayerNormBackward(const float* dy, const float* x, const float* gamma,
                       const float* mean, const float* rstd, int64_t rows,
                       int64_t cols, float* dx, float* dgamma, float* dbeta,
                       bool accumulate, cudaStream_t s) {
  LayerNormDparamsKernel<<<Blocks(cols), kThreads, 0, s>>>(
      dy, x, mean, rstd, rows, cols, dgamma, dbeta, accumulate);
  if (dx == nullptr || rows == 0) return;
  LayerNormDxKernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(
      dy, x, gamma, mean, rstd, cols, dx);
}
void RmsNorm(const float* x, const float* gamma, int64_t rows, int64_t cols,
             float eps, float* y, float* rstd, cudaStream_t s) {
  if (rows == 0) return;
  RmsNormKernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(x, gamma, cols,
                                                                 eps, y, rstd);
}
void RmsNormBackward(const float* dy, const float* x, const float* gamma,
                     const float* rstd, int64_t rows, int64_t cols, float* dx,
                     float* dgamma, bool accumulate, cudaStream_t s) {
  RmsNormDgammaKernel<<<Blocks(cols), kThreads, 0, s>>>(dy, x, rstd, rows, cols,
                                                        dgamma, accumulate);
  if (dx == nullptr || rows == 0) return;
  RmsNormDxKernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(
      dy, x, gamma, rstd, cols, dx);
}
void Rope(float* x, int64_t rows, int64_t positions, int64_t heads,
          int64_t head_dim, const float* cos, const float* sin, bool inverse,
          cudaStream_t s) {
  RopeKernel<<<Blocks(rows * heads * (head_dim / 2)), kThreads, 0, s>>>(
      x, rows, positions, heads, head_dim, cos, sin, inverse ? -1.0f : 1.0f);
}
void SwiGlu(const float* gate, const float* up, float* out, int64_t n,
            cudaStream_t s) {
  SwiGluKernel<<<Blocks(n), kThreads, 0, s>>>(gate, up, out, n);
}
void SwiGluBackward(const float* gate, const float* up, const float* dout,
                    float* dgate, float* dup, int64_t n, cudaStream_t s) {
  SwiGluBackwardKernel<<<Blocks(n), kThreads, 0, s>>>(gate, up, dout, dgate,
                                                      dup, n);
}

void SoftmaxCrossEntropy(const float* logits, const int32_t* labels,
                         int64_t rows, int64_t classes, float grad_scale,
                         float* losses, float* dlogits, cudaStream_t s) {
  if (rows == 0) return;
  SoftmaxCrossEntropyKernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(
      logits, labels, classes, grad_scale, losses, dlogits);
}

void EmbeddingForward(const float* ids, const float* table, int64_t vocab,
                      int64_t rows, int64_t dim, float* y, cudaStream_t s) {
  EmbeddingForwardKernel<<<Blocks(rows * dim), kThreads, 0, s>>>(
      ids, table, vocab, rows, dim, y);
}
void EmbeddingBackward(const float* ids, const float* dy, int64_t vocab,
                       int64_t rows, int64_t dim, float* dtable,
                       cudaStream_t s) {
  EmbeddingBackwardKernel<<<Blocks(rows * dim), kThreads, 0, s>>>(
      ids, dy, vocab, rows, dim, dtable);
}
void CausalSoftmax(float* x, int64_t count, int64_t t, float scale,
                   cudaStream_t s) {
  CausalSoftmaxKernel<<<WarpBlocks(count * t), kThreads, 0, s>>>(x, count * t,
                                                                 t, scale);
}
void CausalSoftmaxBackward(const float* p, float* d, int64_t count, int64_t t,
                           float scale, cudaStream_t s) {
  CausalSoftmaxBackwardKernel<<<WarpBlocks(count * t), kThreads, 0, s>>>(
      p, d, count * t, t, scale);
}

}  // namespace cuda
}  // namespace aqueduct
