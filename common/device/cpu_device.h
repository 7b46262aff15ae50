// CpuDevice: the Device on the host. Every kernel's threads come from one
// ParallelPool (CpuDeviceOptions.threads): a GEMM is cut into bands of rows
// or columns, each a single-threaded OpenBLAS call; a batched GEMM spreads
// its matrices; element-wise kernels split their range and row kernels
// (LayerNorm, softmax) their rows. Each kernel's results do not depend on
// the number of threads (reductions keep one thread's order: by bands of
// columns, each summed over the rows in order); the loops are written so
// that the compiler vectorises them (exp and erf inline: cpu_math.h). Memory
// comes from a CachingAllocator over 64-byte aligned blocks, so steady-state
// training allocates nothing.
//
// Thread-safety: kernels run synchronously on the calling thread (plus the
// device's pool); one owner thread at a time. OpenBLAS is set to one
// thread, process-wide. AllocateRaw/FreeRaw are
// thread-safe.
#ifndef AQUEDUCT_COMMON_DEVICE_CPU_DEVICE_H_
#define AQUEDUCT_COMMON_DEVICE_CPU_DEVICE_H_

#include <cstddef>

#include "absl/functional/function_ref.h"
#include "common/device/caching_allocator.h"
#include "common/device/device.h"
#include "common/device/parallel_pool.h"

namespace aqueduct {

struct CpuDeviceOptions {
  // Compute threads of the device's pool (the caller's included); 0: one
  // per core.
  int threads = 0;
  // Bytes of freed blocks kept for reuse before they go back to the system.
  size_t cache_bytes = size_t{2} << 30;
};

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(const CpuDeviceOptions& options = {});
  ~CpuDevice() override;

  DeviceKind kind() const override { return DeviceKind::kCpu; }
  // 4 KiB: a frame header with up to 996 labels fits.
  static constexpr size_t kHeadroom = 4096;
  size_t headroom() const override { return kHeadroom; }
  std::string name() const override;

  absl::StatusOr<void*> AllocateRaw(size_t bytes) override;
  void FreeRaw(void* data, size_t bytes) override;
  absl::Status CopyFromHost(const void* src, const Tensor& dst) override;
  absl::Status CopyToHost(const Tensor& src, void* dst) override;
  void Copy(const Tensor& src, const Tensor& dst) override;
  absl::Status Synchronize() override { return absl::OkStatus(); }

  void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
            float alpha, const float* a, int64_t lda, const float* b,
            int64_t ldb, float beta, float* c, int64_t ldc) override;

  // A loop of Gemm calls (OpenBLAS threads each one).
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
  // cpu_device_llama.cc
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

  // The allocator's counters (raw allocations against cache hits).
  CachingAllocator::Stats allocator_stats() const { return alloc_.stats(); }
  int threads() const { return pool_.threads(); }

 private:
  // fn(i0, i1) over [0, n) elements / [0, rows) rows of `cols`, in ranges
  // of at least a grain each, on the pool's threads.
  void Each(int64_t n, absl::FunctionRef<void(int64_t, int64_t)> fn);
  void Rows(int64_t rows, int64_t cols,
            absl::FunctionRef<void(int64_t, int64_t)> fn);
  // Gemm in fp32: bands of single-threaded OpenBLAS calls.
  void Fp32Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                float alpha, const float* a, int64_t lda, const float* b,
                int64_t ldb, float beta, float* c, int64_t ldc);
  // The optimizers' steps over one range.
  static void SgdRange(float* w, const float* g, float* buf, int64_t n,
                       const SgdParams& p);
  static void AdamRange(float* w, const float* g, float* m, float* v, int64_t n,
                        const AdamParams& p);

  const CpuDeviceOptions options_;
  CachingAllocator alloc_;
  ParallelPool pool_;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_DEVICE_CPU_DEVICE_H_
