// CudaDevice: the Device on one NVIDIA GPU. GEMM through cuBLAS (fp32, or
// TF32 tensor-core math when asked), every other op a CUDA kernel
// (kernels.cu), memory from a CachingAllocator over cudaMalloc, host copies
// through a pinned staging buffer. All work is queued on one compute stream;
// kernels return void and the first launch error is kept and returned by the
// next Synchronize(), as the Device contract says.
//
// Never run on a GPU yet: it builds and links here (no GPU on the development
// or CI machines) and its tests skip; see docs/gpu.md.
//
// Thread-safety: one owner thread at a time (the stage loop), except
// AllocateRaw/FreeRaw, which are thread-safe.
#ifndef AQUEDUCT_COMMON_DEVICE_CUDA_CUDA_DEVICE_H_
#define AQUEDUCT_COMMON_DEVICE_CUDA_CUDA_DEVICE_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/device/caching_allocator.h"
#include "common/device/device.h"

namespace aqueduct {

struct CudaDeviceOptions {
  int ordinal = 0;
  // TF32 tensor-core GEMMs (Ampere and newer): faster, ~1e-3 relative error.
  // Off by default so results match the CPU device within fp32 tolerance.
  bool tf32 = false;
  // bf16 GEMMs: A and B rounded to bfloat16 (in scratch from the caching
  // allocator), fp32 accumulation and C (cublasGemmEx): ~1e-2 relative.
  bool bf16_gemm = false;
  // Freed device memory kept for reuse before it goes back to cudaFree.
  size_t cache_bytes = size_t{8} << 30;
  // Pinned host buffer for host<->device copies (copied through in chunks).
  size_t staging_bytes = size_t{16} << 20;
};

// The number of CUDA devices, or FAILED_PRECONDITION naming why there are
// none usable (no driver, no device).
absl::StatusOr<int> CudaDeviceCount();

class CudaDevice final : public Device {
 public:
  static absl::StatusOr<std::unique_ptr<CudaDevice>> Create(
      const CudaDeviceOptions& options = {});
  ~CudaDevice() override;

  DeviceKind kind() const override { return DeviceKind::kCuda; }
  std::string name() const override { return name_; }
  int ordinal() const { return options_.ordinal; }
  cudaStream_t stream() const { return stream_; }
  CachingAllocator::Stats allocator_stats() const { return alloc_->stats(); }

  absl::StatusOr<void*> AllocateRaw(size_t bytes) override;
  void FreeRaw(void* data, size_t bytes) override;
  absl::Status CopyFromHost(const void* src, const Tensor& dst) override;
  absl::Status CopyToHost(const Tensor& src, void* dst) override;
  void Copy(const Tensor& src, const Tensor& dst) override;
  absl::Status Synchronize() override;

  void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
            float alpha, const float* a, int64_t lda, const float* b,
            int64_t ldb, float beta, float* c, int64_t ldc) override;
  // cublasSgemmStridedBatched (fp32, or TF32 when asked). bf16_gemm does not
  // apply: the batched operands are strided views (attention heads) that
  // would each need a converted copy of most of their tensor.
  void GemmStridedBatched(bool trans_a, bool trans_b, int64_t m, int64_t n,
                          int64_t k, float alpha, const float* a, int64_t lda,
                          int64_t stride_a, const float* b, int64_t ldb,
                          int64_t stride_b, float beta, float* c, int64_t ldc,
                          int64_t stride_c, int64_t batch) override;
  void Fill(float* x, int64_t n, float value) override;
  void Axpby(int64_t n, float a, const float* x, float b, float* y) override;
  void AddBias(float* y, const float* bias, int64_t rows, int64_t cols,
               bool relu) override;
  void SumRows(const float* x, int64_t rows, int64_t cols, float beta,
               float* out) override;
  void Relu(const float* x, float* y, int64_t n) override;
  void ReluBackward(const float* y, const float* dy, float* dx,
                    int64_t n) override;
  void Gelu(const float* x, float* y, int64_t n) override;
  void GeluBackward(const float* x, const float* dy, float* dx,
                    int64_t n) override;
  void GeluTanh(const float* x, float* y, int64_t n) override;
  void GeluTanhBackward(const float* x, const float* dy, float* dx,
                        int64_t n) override;
  void Dropout(const float* x, float* y, int64_t n, float p, uint64_t key,
               uint64_t index_offset) override;
  void SwapAxes01(const float* x, int64_t dim0, int64_t dim1, int64_t inner,
                  const float* bias, float* y) override;
  void SumChannels(const float* x, int64_t outer, int64_t channels,
                   int64_t inner, float beta, float* out) override;
  void Im2Col(const float* x, int64_t batch, const Window2d& w,
              float* col) override;
  void Col2Im(const float* col, int64_t batch, const Window2d& w,
              float* dx) override;
  void MaxPool(const float* x, int64_t planes, const Window2d& w, float* y,
               int32_t* argmax) override;
  void MaxPoolBackward(const float* dy, const int32_t* argmax, int64_t planes,
                       const Window2d& w, float* dx) override;
  void LayerNorm(const float* x, const float* gamma, const float* beta,
                 int64_t rows, int64_t cols, float eps, float* y, float* mean,
                 float* rstd) override;
  void LayerNormBackward(const float* dy, const float* x, const float* gamma,
                         const float* mean, const float* rstd, int64_t rows,
                         int64_t cols, float* dx, float* dgamma, float* dbeta,
                         bool accumulate) override;
  void EmbeddingForward(const float* ids, const float* table, int64_t vocab,
                        int64_t rows, int64_t dim, float* y) override;
  // atomicAdd: not bitwise deterministic when ids repeat.
  void EmbeddingBackward(const float* ids, const float* dy, int64_t vocab,
                         int64_t rows, int64_t dim, float* dtable) override;
  void CausalSoftmax(float* s, int64_t count, int64_t t, float scale) override;
  void CausalSoftmaxBackward(const float* p, float* d, int64_t count, int64_t t,
                             float scale) override;
  void SoftmaxCrossEntropy(const float* logits, const int32_t* labels,
                           int64_t rows, int64_t classes, float grad_scale,
                           float* losses, float* dlogits) override;
  void SgdStep(float* w, const float* g, float* momentum_buf, int64_t n,
               const SgdParams& p) override;
  void AdamStep(float* w, const float* g, float* m, float* v, int64_t n,
                const AdamParams& p) override;
  void RmsNorm(const float* x, const float* gamma, int64_t rows, int64_t cols,
               float eps, float* y, float* rstd) override;
  void RmsNormBackward(const float* dy, const float* x, const float* gamma,
                       const float* rstd, int64_t rows, int64_t cols, float* dx,
                       float* dgamma, bool accumulate) override;
  void Rope(float* x, int64_t rows, int64_t positions, int64_t heads,
            int64_t head_dim, const float* cos, const float* sin,
            bool inverse) override;
  void SwiGlu(const float* gate, const float* up, float* out,
              int64_t n) override;
  void SwiGluBackward(const float* gate, const float* up, const float* dout,
                      float* dgate, float* dup, int64_t n) override;

 private:
  explicit CudaDevice(const CudaDeviceOptions& options);
  absl::Status Init();
  // Keeps the first error of an asynchronous call (launch or cuBLAS) for the
  // next Synchronize().
  void Record(absl::Status status);
  // Gemm with bf16 inputs and fp32 accumulation (options_.bf16_gemm).
  absl::Status GemmBf16(bool trans_a, bool trans_b, int64_t m, int64_t n,
                        int64_t k, float alpha, const float* a, int64_t lda,
                        const float* b, int64_t ldb, float beta, float* c,
                        int64_t ldc);
  void CheckLaunch(const char* kernel, const char* file, int line);

  const CudaDeviceOptions options_;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  void* staging_ = nullptr;  // pinned, options_.staging_bytes
  std::unique_ptr<CachingAllocator> alloc_;
  absl::Mutex error_mu_;
  absl::Status first_error_ ABSL_GUARDED_BY(error_mu_);
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_DEVICE_CUDA_CUDA_DEVICE_H_
