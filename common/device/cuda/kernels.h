// Launchers for the CUDA kernels behind the elementwise, bias, activation,
// dropout and optimizer ops of the Device interface (same semantics as
// CpuDevice; see common/device/device.h). Each launch is asynchronous on
// `stream`; launch errors surface from cudaGetLastError / the next
// synchronisation. Compiled by nvcc (kernels.cu); this header is plain C++.
#ifndef AQUEDUCT_COMMON_DEVICE_CUDA_KERNELS_H_
#define AQUEDUCT_COMMON_DEVICE_CUDA_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace aqueduct {
namespace cuda {

void Fill(float* x, int64_t n, float value, cudaStream_t stream);
// y = a * x + b * y.
void Axpby(int64_t n, float a, const float* x, float b, float* y,
           cudaStream_t stream);
// y[r, c] += bias[c], then ReLU if `relu`.
void AddBias(float* y, const float* bias, int64_t rows, int64_t cols, bool relu,
             cudaStream_t stream);
void Relu(const float* x, float* y, int64_t n, cudaStream_t stream);
void ReluBackward(const float* y, const float* dy, float* dx, int64_t n,
                  cudaStream_t stream);
// Exact GELU x * Phi(x) and its derivative.
void Gelu(const float* x, float* y, int64_t n, cudaStream_t stream);
void GeluBackward(const float* x, const float* dy, float* dx, int64_t n,
                  cudaStream_t stream);
// GELU's tanh approximation and its derivative.
void GeluTanh(const float* x, float* y, int64_t n, cudaStream_t stream);
void GeluTanhBackward(const float* x, const float* dy, float* dx, int64_t n,
                      cudaStream_t stream);
void Dropout(const float* x, float* y, int64_t n, float p, uint64_t key,
             uint64_t index_offset, cudaStream_t stream);
// y[i] = x[i] rounded to the nearest bfloat16 (y: n bfloat16 values).
void FloatToBf16(const float* x, void* y, int64_t n, cudaStream_t stream);
// torch.optim.SGD semantics; see SgdParams. w = update of src (src may be
// w: in place).
void SgdStep(float* w, const float* src, const float* g, float* buf, int64_t n,
             float lr, float momentum, float dampening, float weight_decay,
             bool nesterov, bool first_step, cudaStream_t stream);
// torch.optim.Adam and AdamW semantics; step_size, inv_sqrt_bc2,
// weight_decay (AdamScales.grad_decay) and keep from AdamStepScales
// (common/device/device.h), as CpuDevice uses.
void AdamStep(float* w, const float* src, const float* g, float* m, float* v,
              int64_t n, float step_size, float inv_sqrt_bc2, float beta1,
              float beta2, float eps, float weight_decay, float keep,
              cudaStream_t stream);

// The LLaMA block's kernels, as Device's RmsNorm, RmsNormBackward, Rope,
// SwiGlu and SwiGluBackward.
void RmsNorm(const float* x, const float* gamma, int64_t rows, int64_t cols,
             float eps, float* y, float* rstd, cudaStream_t stream);
void RmsNormBackward(const float* dy, const float* x, const float* gamma,
                     const float* rstd, int64_t rows, int64_t cols, float* dx,
                     float* dgamma, bool accumulate, cudaStream_t stream);
void Rope(float* x, int64_t rows, int64_t positions, int64_t heads,
          int64_t head_dim, const float* cos, const float* sin, bool inverse,
          cudaStream_t stream);
void SwiGlu(const float* gate, const float* up, float* out, int64_t n,
            cudaStream_t stream);
void SwiGluBackward(const float* gate, const float* up, const float* dout,
                    float* dgate, float* dup, int64_t n, cudaStream_t stream);

// out[c] = sum_r x[r, c] + beta * out[c].
void SumRows(const float* x, int64_t rows, int64_t cols, float beta, float* out,
             cudaStream_t stream);
// y[b, a, p] = x[a, b, p] (+ bias[a] when bias is not null).
void SwapAxes01(const float* x, int64_t dim0, int64_t dim1, int64_t inner,
                const float* bias, float* y, cudaStream_t stream);
// out[c] = sum over (a, p) of x[a, c, p] + beta * out[c].
void SumChannels(const float* x, int64_t outer, int64_t channels, int64_t inner,
                 float beta, float* out, cudaStream_t stream);
// Window geometry as in Window2d (plain ints so this header needs no absl).
struct Window {
  int64_t channels, height, width, kernel, stride, padding, out_h, out_w;
};
void Im2Col(const float* x, int64_t batch, const Window& w, float* col,
            cudaStream_t stream);
void Col2Im(const float* col, int64_t batch, const Window& w, float* dx,
            cudaStream_t stream);
void MaxPool(const float* x, int64_t planes, const Window& w, float* y,
             int32_t* argmax, cudaStream_t stream);
void MaxPoolBackward(const float* dy, const int32_t* argmax, int64_t planes,
                     const Window& w, float* dx, cudaStream_t stream);
void LayerNorm(const float* x, const float* gamma, const float* beta,
               int64_t rows, int64_t cols, float eps, float* y, float* mean,
               float* rstd, cudaStream_t stream);
void LayerNormBackward(const float* dy, const float* x, const float* gamma,
                       const float* mean, const float* rstd, int64_t rows,
                       int64_t cols, float* dx, float* dgamma, float* dbeta,
                       bool accumulate, cudaStream_t stream);
// y[r, :] = table[ids[r], :] (zeros for ids outside [0, vocab)).
void EmbeddingForward(const float* ids, const float* table, int64_t vocab,
                      int64_t rows, int64_t dim, float* y, cudaStream_t stream);
// dtable[ids[r], :] += dy[r, :] with atomicAdd: rows sharing an id sum in an
// unspecified order, so the result is not bitwise deterministic.
void EmbeddingBackward(const float* ids, const float* dy, int64_t vocab,
                       int64_t rows, int64_t dim, float* dtable,
                       cudaStream_t stream);
// Causal softmax of scale * s over count matrices [t, t], in place, and its
// backward (d: dL/dP in, dL/dS out); one warp per row.
void CausalSoftmax(float* s, int64_t count, int64_t t, float scale,
                   cudaStream_t stream);
void CausalSoftmaxBackward(const float* p, float* d, int64_t count, int64_t t,
                           float scale, cudaStream_t stream);
void SoftmaxCrossEntropy(const float* logits, const int32_t* labels,
                         int64_t rows, int64_t classes, float grad_scale,
                         float* losses, float* dlogits, cudaStream_t stream);

}  // namespace cuda
}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_DEVICE_CUDA_KERNELS_H_
