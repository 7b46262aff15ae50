// The Device interface: memory and the compute kernels every layer, loss and
// optimizer needs, over whole arrays (no per-element virtual calls).
//
// Layouts are row-major. Pointers are device pointers obtained from
// Allocate(). Kernels may run asynchronously (CUDA streams); Synchronize()
// waits for all queued work and returns the first error raised since the last
// Synchronize() (kernels themselves return void so that hot loops stay
// simple). Implementations: CpuDevice (common/device/cpu_device.h), and
// CudaDevice where the CUDA toolkit is present.
//
// Threading: a Device is used by one owner thread at a time (the stage loop);
// Allocate/FreeRaw are thread-safe so that tensors may be released anywhere.
#ifndef AQUEDUCT_COMMON_DEVICE_DEVICE_H_
#define AQUEDUCT_COMMON_DEVICE_DEVICE_H_

#include <cmath>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/device/dropout_hash.h"
#include "common/tensor.h"

namespace aqueduct {

enum class DeviceKind { kCpu, kCuda };

// Geometry of a 2-D convolution or pooling window over NCHW input.
struct Window2d {
  int64_t channels = 0;
  int64_t height = 0;
  int64_t width = 0;
  int64_t kernel = 1;
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t out_height() const {
    return (height + 2 * padding - kernel) / stride + 1;
  }
  int64_t out_width() const {
    return (width + 2 * padding - kernel) / stride + 1;
  }
};

// Hyper-parameters of one SGD step (PyTorch torch.optim.SGD semantics).
struct SgdParams {
  float lr = 0;
  float momentum = 0;
  float dampening = 0;
  float weight_decay = 0;
  bool nesterov = false;
  // True on the first step for this parameter: the momentum buffer is set
  // to the gradient instead of being decayed.
  bool first_step = false;
  // The weights to update from; null: w itself (in place). Otherwise w
  // receives the update of `source` and source is left as it was (a
  // stashed weight version without a copy).
  const float* source = nullptr;
};

// Hyper-parameters of one Adam step (PyTorch torch.optim.Adam semantics).
struct AdamParams {
  float lr = 0;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0;
  // AdamW (torch.optim.AdamW): the decay multiplies the weights, w *= 1 -
  // lr * weight_decay, before the update, instead of joining the gradient.
  bool decoupled = false;
  // 1-based step count, for the bias corrections.
  int64_t step = 1;
  // The weights to update from; null: w itself (in place). Otherwise w
  // receives the update of `source` and source is left as it was (a
  // stashed weight version without a copy).
  const float* source = nullptr;
};

// Adam's per-step scalars: step_size = lr / (1 - beta1^t) and
// inv_sqrt_bc2 = 1 / sqrt(1 - beta2^t), computed in double on the host so
// that every device applies identical values; and the weight decay's two
// forms: grad = g + grad_decay * w, then w' = w * keep - step_size * m /
// denom (Adam: grad_decay = weight_decay, keep = 1; AdamW: grad_decay = 0,
// keep = 1 - lr * weight_decay).
struct AdamScales {
  float step_size;
  float inv_sqrt_bc2;
  float grad_decay;
  float keep;
};
inline AdamScales AdamStepScales(const AdamParams& p) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(p.beta1), p.step);
  const double bc2 = 1.0 - std::pow(static_cast<double>(p.beta2), p.step);
  const double keep =
      p.decoupled ? 1.0 - static_cast<double>(p.lr) * p.weight_decay : 1.0;
  return {static_cast<float>(p.lr / bc1),
          static_cast<float>(1.0 / std::sqrt(bc2)),
          p.decoupled ? 0.0f : p.weight_decay, static_cast<float>(keep)};
}

class Device {
 public:
  virtual ~Device() = default;

  virtual DeviceKind kind() const = 0;
  // E.g. "cpu" or "cuda:0 (NVIDIA H100)".
  virtual std::string name() const = 0;

  // ---- Memory ----
  // A tensor of `shape` and `dtype`; contents undefined. RESOURCE_EXHAUSTED
  // when the device is out of memory.
  absl::StatusOr<Tensor> Allocate(const Shape& shape, DType dtype);
  // As Allocate, then zero-filled.
  absl::StatusOr<Tensor> Zeros(const Shape& shape, DType dtype);
  virtual absl::StatusOr<void*> AllocateRaw(size_t bytes) = 0;
  // Gives back memory from AllocateRaw (called by Buffer).
  virtual void FreeRaw(void* data, size_t bytes) = 0;
  // Bytes before the start of every AllocateRaw block that the block's
  // owner may write, on devices whose memory the host addresses (0: none).
  // The pipeline writes a frame's header there, so that header and tensor
  // leave in one transfer without copying the tensor.
  virtual size_t headroom() const { return 0; }

  // Copies between host memory and `tensor` (nbytes() bytes).
  virtual absl::Status CopyFromHost(const void* src, const Tensor& dst) = 0;
  virtual absl::Status CopyToHost(const Tensor& src, void* dst) = 0;
  // Device-to-device copy; src and dst must have the same nbytes().
  virtual void Copy(const Tensor& src, const Tensor& dst) = 0;

  // Waits for queued work; returns the first error since the last call.
  virtual absl::Status Synchronize() = 0;

  // ---- Dense linear algebra ----
  // Mixed precision (a job's precision.compute "bf16"): GEMMs with A and B
  // rounded to bfloat16, products and sums in fp32, C in fp32. Weights,
  // gradients, optimizer state and the other kernels stay fp32. Off: fp32
  // (or the device's own option, e.g. the worker's --gemm_precision).
  virtual void SetBf16Gemm(bool on) { bf16_gemm_ = on; }
  bool bf16_gemm() const { return bf16_gemm_; }

  // C[m,n] = alpha * op(A) op(B) + beta * C, row-major; op(A) is m x k and
  // op(B) is k x n. lda/ldb/ldc are row strides of the stored matrices.
  virtual void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                    float alpha, const float* a, int64_t lda, const float* b,
                    int64_t ldb, float beta, float* c, int64_t ldc) = 0;

  // Batched GEMM over `batch` triples of matrices at fixed strides:
  // C_i = alpha * op(A_i) op(B_i) + beta * C_i with A_i = a + i * stride_a
  // (likewise B_i, C_i), each as in Gemm. Strides are in elements; the
  // matrices may be strided views into larger tensors (e.g. one attention
  // head's columns of a [batch, T, 3 * dim] tensor: lda = 3 * dim,
  // stride_a = T * 3 * dim). The C_i must not overlap.
  virtual void GemmStridedBatched(bool trans_a, bool trans_b, int64_t m,
                                  int64_t n, int64_t k, float alpha,
                                  const float* a, int64_t lda, int64_t stride_a,
                                  const float* b, int64_t ldb, int64_t stride_b,
                                  float beta, float* c, int64_t ldc,
                                  int64_t stride_c, int64_t batch) = 0;

  // ---- Elementwise and reductions ----
  virtual void Fill(float* x, int64_t n, float value) = 0;
  // y = a * x + b * y.
  virtual void Axpby(int64_t n, float a, const float* x, float b, float* y) = 0;
  // y[r, c] += bias[c] for a rows x cols matrix; if relu, then y = max(y, 0).
  virtual void AddBias(float* y, const float* bias, int64_t rows, int64_t cols,
                       bool relu) = 0;
  // out[c] = sum_r x[r, c] + beta * out[c].
  virtual void SumRows(const float* x, int64_t rows, int64_t cols, float beta,
                       float* out) = 0;
  // y = max(x, 0); dx = dy * (y > 0). In-place (y == x, dx == dy) allowed.
  virtual void Relu(const float* x, float* y, int64_t n) = 0;
  virtual void ReluBackward(const float* y, const float* dy, float* dx,
                            int64_t n) = 0;
  // Exact GELU: x * Phi(x). Backward needs the forward input.
  virtual void Gelu(const float* x, float* y, int64_t n) = 0;
  virtual void GeluBackward(const float* x, const float* dy, float* dx,
                            int64_t n) = 0;
  // GELU's tanh approximation (GPT-2's; PyTorch's F.gelu(x, approximate=
  // "tanh")): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). Backward
  // needs the forward input. In place (y == x, dx == dy) allowed.
  virtual void GeluTanh(const float* x, float* y, int64_t n) = 0;
  virtual void GeluTanhBackward(const float* x, const float* dy, float* dx,
                                int64_t n) = 0;
  // Inverted dropout with a counter-based mask: element i is kept iff
  // DropoutUniform(key, i) >= p, and kept elements are scaled by 1/(1-p).
  // The same key gives the same mask, so backward regenerates it.
  // Element i of this call is element index_offset + i of the mask (so a
  // microbatch draws its rows' share of the whole minibatch's mask).
  virtual void Dropout(const float* x, float* y, int64_t n, float p,
                       uint64_t key, uint64_t index_offset) = 0;
  // y[b, a, p] = x[a, b, p] (+ bias[a] when bias is not null): swaps the
  // first two of three axes (x is [dim0, dim1, inner]; y is
  // [dim1, dim0, inner]).
  virtual void SwapAxes01(const float* x, int64_t dim0, int64_t dim1,
                          int64_t inner, const float* bias, float* y) = 0;
  // out[c] = sum over (a, p) of x[a, c, p] + beta * out[c] for x of shape
  // [outer, channels, inner] (the bias gradient of a convolution).
  virtual void SumChannels(const float* x, int64_t outer, int64_t channels,
                           int64_t inner, float beta, float* out) = 0;

  // ---- Convolution helpers (NCHW) ----
  // col[(c*k + i)*k + j, b*P + p] for a batch of `batch` images x[b, c, h, w]
  // where P = out_height * out_width: im2col over the whole batch, so one
  // GEMM computes the convolution of the batch.
  virtual void Im2Col(const float* x, int64_t batch, const Window2d& w,
                      float* col) = 0;
  // The adjoint of Im2Col: dx = sum of col entries into image positions
  // (dx is overwritten).
  virtual void Col2Im(const float* col, int64_t batch, const Window2d& w,
                      float* dx) = 0;
  // Max pooling of x[planes, h, w] (planes = batch * channels; w.channels
  // ignored) into y[planes, oh, ow]; argmax holds the input index within the
  // plane of each maximum (for backward).
  virtual void MaxPool(const float* x, int64_t planes, const Window2d& w,
                       float* y, int32_t* argmax) = 0;
  // dx (overwritten) from dy and the argmax of the forward.
  virtual void MaxPoolBackward(const float* dy, const int32_t* argmax,
                               int64_t planes, const Window2d& w,
                               float* dx) = 0;

  // ---- Normalisation ----
  // Layer norm over rows of x[rows, cols]; writes y, and mean and rstd
  // (1/sqrt(var + eps)) per row for backward.
  virtual void LayerNorm(const float* x, const float* gamma, const float* beta,
                         int64_t rows, int64_t cols, float eps, float* y,
                         float* mean, float* rstd) = 0;
  // dx (may be null: not needed) overwritten; dgamma and dbeta are written
  // (accumulate false) or added to (accumulate true).
  virtual void LayerNormBackward(const float* dy, const float* x,
                                 const float* gamma, const float* mean,
                                 const float* rstd, int64_t rows, int64_t cols,
                                 float* dx, float* dgamma, float* dbeta,
                                 bool accumulate) = 0;

  // ---- Embeddings and attention ----
  // y[r, :] = table[ids[r], :] for r in [0, rows): a lookup in a table of
  // [vocab, dim]. Ids are integers carried as floats; a row whose id is not
  // in [0, vocab) (the data loader refuses those) reads as zeros rather
  // than out of bounds.
  virtual void EmbeddingForward(const float* ids, const float* table,
                                int64_t vocab, int64_t rows, int64_t dim,
                                float* y) = 0;
  // dtable[ids[r], :] += dy[r, :] for every r (ids out of range skipped).
  // Adds: the caller zeroes dtable first unless accumulating. CPU: in row
  // order, deterministic; CUDA: atomic adds, so rows sharing an id sum in an
  // unspecified order (run-to-run differences of float rounding).
  virtual void EmbeddingBackward(const float* ids, const float* dy,
                                 int64_t vocab, int64_t rows, int64_t dim,
                                 float* dtable) = 0;
  // In place over `count` score matrices s[count, t, t]: row i becomes the
  // softmax of scale * s[i, 0..i], and its entries j > i become 0 (causal
  // masking; the masked inputs are never read, so they may be garbage).
  virtual void CausalSoftmax(float* s, int64_t count, int64_t t,
                             float scale) = 0;
  // The backward of CausalSoftmax, in place: from the probabilities p and
  // d = dL/dP, d becomes dL/dS = scale * p * (d - rowsum(p * d)), 0 above
  // the diagonal.
  virtual void CausalSoftmaxBackward(const float* p, float* d, int64_t count,
                                     int64_t t, float scale) = 0;

  // ---- LLaMA ----
  // RMS norm over rows of x[rows, cols]: y = x * rstd * gamma with rstd =
  // 1 / sqrt(mean(x^2) + eps) per row (written for backward).
  virtual void RmsNorm(const float* x, const float* gamma, int64_t rows,
                       int64_t cols, float eps, float* y, float* rstd) = 0;
  // dx (may be null: not needed) overwritten; dgamma written (accumulate
  // false) or added to.
  virtual void RmsNormBackward(const float* dy, const float* x,
                               const float* gamma, const float* rstd,
                               int64_t rows, int64_t cols, float* dx,
                               float* dgamma, bool accumulate) = 0;
  // Rotary embeddings in place over x[rows, heads, head_dim] (row r at
  // position r % positions), the rotate-half form: for i < head_dim / 2,
  // (x_i, x_{i+half}) becomes (x_i c - x_{i+half} s, x_{i+half} c + x_i s)
  // with c, s = cos[p, i], sin[p, i] ([positions, half] tables); `inverse`
  // rotates by the opposite angle (the backward).
  virtual void Rope(float* x, int64_t rows, int64_t positions, int64_t heads,
                    int64_t head_dim, const float* cos, const float* sin,
                    bool inverse) = 0;
  // SwiGLU: out = silu(gate) * up over n elements (silu(g) = g /
  // (1 + exp(-g))); and its backward: dgate and dup from dout.
  virtual void SwiGlu(const float* gate, const float* up, float* out,
                      int64_t n) = 0;
  virtual void SwiGluBackward(const float* gate, const float* up,
                              const float* dout, float* dgate, float* dup,
                              int64_t n) = 0;

  // ---- Loss ----
  // Softmax cross-entropy of logits[rows, classes] against labels[rows]
  // (each in [0, classes)): losses[r] = logsumexp(logits[r]) -
  // logits[r, label], computed stably; dlogits (may alias logits) =
  // (softmax - onehot) * grad_scale.
  virtual void SoftmaxCrossEntropy(const float* logits, const int32_t* labels,
                                   int64_t rows, int64_t classes,
                                   float grad_scale, float* losses,
                                   float* dlogits) = 0;

  // ---- Optimizers (fused per parameter tensor) ----
  virtual void SgdStep(float* w, const float* g, float* momentum_buf, int64_t n,
                       const SgdParams& p) = 0;
  virtual void AdamStep(float* w, const float* g, float* m, float* v, int64_t n,
                        const AdamParams& p) = 0;

 protected:
  bool bf16_gemm_ = false;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_DEVICE_DEVICE_H_
