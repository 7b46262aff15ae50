#include "common/device/cuda/cuda_device.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/device/cuda/cuda_status.h"
#include "common/device/cuda/kernels.h"
#include "common/logging.h"
#include "common/status.h"

namespace aqueduct {

namespace {

cuda::Window ToWindow(const Window2d& w) {
  return cuda::Window{w.channels, w.height,  w.width,        w.kernel,
                      w.stride,   w.padding, w.out_height(), w.out_width()};
}

}  // namespace

absl::StatusOr<int> CudaDeviceCount() {
  int count = 0;
  RETURN_IF_ERROR(Annotate(CudaStatus(cudaGetDeviceCount(&count),
                                      "cudaGetDeviceCount", __FILE__, __LINE__),
                           "no usable CUDA device"));
  if (count == 0) {
    return absl::FailedPreconditionError("no CUDA device on this machine");
  }
  return count;
}

CudaDevice::CudaDevice(const CudaDeviceOptions& options) : options_(options) {
  bf16_gemm_ = options.bf16_gemm;
}

absl::StatusOr<std::unique_ptr<CudaDevice>> CudaDevice::Create(
    const CudaDeviceOptions& options) {
  ASSIGN_OR_RETURN(const int count, CudaDeviceCount());
  if (options.ordinal < 0 || options.ordinal >= count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda:", options.ordinal, " does not exist: this machine has ", count,
        " CUDA device(s)"));
  }
  std::unique_ptr<CudaDevice> device(new CudaDevice(options));
  RETURN_IF_ERROR(device->Init());
  return device;
}

absl::Status CudaDevice::Init() {
  AQ_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.ordinal));
  cudaDeviceProp prop;
  AQ_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, options_.ordinal));
  name_ = absl::StrCat("cuda:", options_.ordinal, " (", prop.name, ", sm_",
                       prop.major, prop.minor, ")");
  AQ_CUDA_RETURN_IF_ERROR(
      cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  AQ_CUBLAS_RETURN_IF_ERROR(cublasCreate(&cublas_));
  AQ_CUBLAS_RETURN_IF_ERROR(cublasSetStream(cublas_, stream_));
  AQ_CUBLAS_RETURN_IF_ERROR(
      cublasSetMathMode(cublas_, options_.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                               : CUBLAS_PEDANTIC_MATH));
  AQ_CUDA_RETURN_IF_ERROR(cudaMallocHost(&staging_, options_.staging_bytes));
  const int ordinal = options_.ordinal;
  alloc_ = std::make_unique<CachingAllocator>(
      name_,
      [ordinal](size_t bytes) -> absl::StatusOr<void*> {
        void* p = nullptr;
        cudaSetDevice(ordinal);
        const cudaError_t e = cudaMalloc(&p, bytes);
        if (e == cudaErrorMemoryAllocation) {
          cudaGetLastError();  // clear the sticky-free error state
          return nullptr;
        }
        RETURN_IF_ERROR(CudaStatus(e, "cudaMalloc", __FILE__, __LINE__));
        return p;
      },
      [ordinal](void* p, size_t) {
        cudaSetDevice(ordinal);
        cudaFree(p);
      },
      options_.cache_bytes);
  AQ_LOG_INFO("CUDA device {}: {:.1f} GiB, {} SMs, GEMM {}", name_,
              static_cast<double>(prop.totalGlobalMem) / (1 << 30),
              prop.multiProcessorCount,
              bf16_gemm_ ? "bf16 in, fp32 accumulate"
                         : (options_.tf32 ? "tf32" : "fp32"));
  return absl::OkStatus();
}

CudaDevice::~CudaDevice() {
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  alloc_.reset();
  if (staging_ != nullptr) cudaFreeHost(staging_);
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

void CudaDevice::Record(absl::Status status) {
  if (status.ok()) return;
  absl::MutexLock lock(&error_mu_);
  if (first_error_.ok()) first_error_ = std::move(status);
}

void CudaDevice::CheckLaunch(const char* kernel, const char* file, int line) {
  Record(CudaStatus(cudaGetLastError(), kernel, file, line));
}

#define AQ_LAUNCHED(kernel) CheckLaunch(kernel, __FILE__, __LINE__)

absl::StatusOr<void*> CudaDevice::AllocateRaw(size_t bytes) {
  return alloc_->Allocate(bytes);
}

void CudaDevice::FreeRaw(void* data, size_t bytes) {
  // The block may still be read by queued kernels: the caching allocator
  // reuses it only for later work on the same stream, which is ordered after.
  alloc_->Free(data, bytes);
}

absl::Status CudaDevice::CopyFromHost(const void* src, const Tensor& dst) {
  const char* from = static_cast<const char*>(src);
  char* to = static_cast<char*>(dst.raw());
  for (size_t done = 0; done < dst.nbytes();) {
    const size_t chunk = std::min(options_.staging_bytes, dst.nbytes() - done);
    // The previous chunk's copy must finish before the staging buffer is
    // refilled.
    AQ_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    std::memcpy(staging_, from + done, chunk);
    AQ_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(to + done, staging_, chunk,
                                            cudaMemcpyHostToDevice, stream_));
    done += chunk;
  }
  return Synchronize();
}

absl::Status CudaDevice::CopyToHost(const Tensor& src, void* dst) {
  const char* from = static_cast<const char*>(src.raw());
  char* to = static_cast<char*>(dst);
  for (size_t done = 0; done < src.nbytes();) {
    const size_t chunk = std::min(options_.staging_bytes, src.nbytes() - done);
    AQ_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(staging_, from + done, chunk,
                                            cudaMemcpyDeviceToHost, stream_));
    AQ_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    std::memcpy(to + done, staging_, chunk);
    done += chunk;
  }
  return Synchronize();
}

void CudaDevice::Copy(const Tensor& src, const Tensor& dst) {
  Record(CudaStatus(cudaMemcpyAsync(dst.raw(), src.raw(), src.nbytes(),
                                    cudaMemcpyDeviceToDevice, stream_),
                    "cudaMemcpyAsync(device to device)", __FILE__, __LINE__));
}

absl::Status CudaDevice::Synchronize() {
  Record(CudaStatus(cudaStreamSynchronize(stream_), "cudaStreamSynchronize",
                    __FILE__, __LINE__));
  absl::MutexLock lock(&error_mu_);
  return std::exchange(first_error_, absl::OkStatus());
}

void CudaDevice::Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n,
                      int64_t k, float alpha, const float* a, int64_t lda,
                      const float* b, int64_t ldb, float beta, float* c,
                      int64_t ldc) {
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the
  // operands and keep the transposes.
  if (bf16_gemm_) {
    Record(GemmBf16(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c,
                    ldc));
    return;
  }
  Record(CublasStatus(
      cublasSgemm(cublas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                  trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n),
                  static_cast<int>(m), static_cast<int>(k), &alpha, b,
                  static_cast<int>(ldb), a, static_cast<int>(lda), &beta, c,
                  static_cast<int>(ldc)),
      "cublasSgemm", __FILE__, __LINE__));
}

absl::Status CudaDevice::GemmBf16(bool trans_a, bool trans_b, int64_t m,
                                  int64_t n, int64_t k, float alpha,
                                  const float* a, int64_t lda, const float* b,
                                  int64_t ldb, float beta, float* c,
                                  int64_t ldc) {
  // The stored matrices: rows x ld elements each.
  const int64_t a_elems = (trans_a ? k : m) * lda;
  const int64_t b_elems = (trans_b ? n : k) * ldb;
  constexpr size_t kBf16Bytes = 2;
  ASSIGN_OR_RETURN(void* a16, AllocateRaw(a_elems * kBf16Bytes));
  auto a_back = absl::MakeCleanup([&] { FreeRaw(a16, a_elems * kBf16Bytes); });
  ASSIGN_OR_RETURN(void* b16, AllocateRaw(b_elems * kBf16Bytes));
  auto b_back = absl::MakeCleanup([&] { FreeRaw(b16, b_elems * kBf16Bytes); });
  // Freed scratch is reused only by later work on this same stream.
  cuda::FloatToBf16(a, a16, a_elems, stream_);
  AQ_LAUNCHED("FloatToBf16");
  cuda::FloatToBf16(b, b16, b_elems, stream_);
  AQ_LAUNCHED("FloatToBf16");
  return CublasStatus(
      cublasGemmEx(cublas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                   trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n),
                   static_cast<int>(m), static_cast<int>(k), &alpha, b16,
                   CUDA_R_16BF, static_cast<int>(ldb), a16, CUDA_R_16BF,
                   static_cast<int>(lda), &beta, c, CUDA_R_32F,
                   static_cast<int>(ldc), CUBLAS_COMPUTE_32F,
                   CUBLAS_GEMM_DEFAULT),
      "cublasGemmEx", __FILE__, __LINE__);
}

void CudaDevice::GemmStridedBatched(bool trans_a, bool trans_b, int64_t m,
                                    int64_t n, int64_t k, float alpha,
                                    const float* a, int64_t lda,
                                    int64_t stride_a, const float* b,
                                    int64_t ldb, int64_t stride_b, float beta,
                                    float* c, int64_t ldc, int64_t stride_c,
                                    int64_t batch) {
  if (batch == 0 || m == 0 || n == 0) return;
  // The row-major trick of Gemm, per matrix of the batch.
  Record(CublasStatus(
      cublasSgemmStridedBatched(
          cublas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
          trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n),
          static_cast<int>(m), static_cast<int>(k), &alpha, b,
          static_cast<int>(ldb), static_cast<long long>(stride_b), a,
          static_cast<int>(lda), static_cast<long long>(stride_a), &beta, c,
          static_cast<int>(ldc), static_cast<long long>(stride_c),
          static_cast<int>(batch)),
      "cublasSgemmStridedBatched", __FILE__, __LINE__));
}

void CudaDevice::Fill(float* x, int64_t n, float value) {
  cuda::Fill(x, n, value, stream_);
  AQ_LAUNCHED("Fill");
}
void CudaDevice::Axpby(int64_t n, float a, const float* x, float b, float* y) {
  cuda::Axpby(n, a, x, b, y, stream_);
  AQ_LAUNCHED("Axpby");
}
void CudaDevice::AddBias(float* y, const float* bias, int64_t rows,
                         int64_t cols, bool relu) {
  cuda::AddBias(y, bias, rows, cols, relu, stream_);
  AQ_LAUNCHED("AddBias");
}
void CudaDevice::SumRows(const float* x, int64_t rows, int64_t cols, float beta,
                         float* out) {
  cuda::SumRows(x, rows, cols, beta, out, stream_);
  AQ_LAUNCHED("SumRows");
}
void CudaDevice::Relu(const float* x, float* y, int64_t n) {
  cuda::Relu(x, y, n, stream_);
  AQ_LAUNCHED("Relu");
}
void CudaDevice::ReluBackward(const float* y, const float* dy, float* dx,
                              int64_t n) {
  cuda::ReluBackward(y, dy, dx, n, stream_);
  AQ_LAUNCHED("ReluBackward");
}
void CudaDevice::Gelu(const float* x, float* y, int64_t n) {
  cuda::Gelu(x, y, n, stream_);
  AQ_LAUNCHED("Gelu");
}
void CudaDevice::GeluBackward(const float* x, const float* dy, float* dx,
                              int64_t n) {
  cuda::GeluBackward(x, dy, dx, n, stream_);
  AQ_LAUNCHED("GeluBackward");
}
void CudaDevice::GeluTanh(const float* x, float* y, int64_t n) {
  cuda::GeluTanh(x, y, n, stream_);
  AQ_LAUNCHED("GeluTanh");
}
void CudaDevice::GeluTanhBackward(const float* x, const float* dy, float* dx,
                                  int64_t n) {
  cuda::GeluTanhBackward(x, dy, dx, n, stream_);
  AQ_LAUNCHED("GeluTanhBackward");
}
void CudaDevice::Dropout(const float* x, float* y, int64_t n, float p,
                         uint64_t key, uint64_t index_offset) {
  cuda::Dropout(x, y, n, p, key, index_offset, stream_);
  AQ_LAUNCHED("Dropout");
}
void CudaDevice::SwapAxes01(const float* x, int64_t dim0, int64_t dim1,
                            int64_t inner, const float* bias, float* y) {
  cuda::SwapAxes01(x, dim0, dim1, inner, bias, y, stream_);
  AQ_LAUNCHED("SwapAxes01");
}
void CudaDevice::SumChannels(const float* x, int64_t outer, int64_t channels,
                             int64_t inner, float beta, float* out) {
  cuda::SumChannels(x, outer, channels, inner, beta, out, stream_);
  AQ_LAUNCHED("SumChannels");
}
void CudaDevice::Im2Col(const float* x, int64_t batch, const Window2d& w,
                        float* col) {
  cuda::Im2Col(x, batch, ToWindow(w), col, stream_);
  AQ_LAUNCHED("Im2Col");
}
void CudaDevice::Col2Im(const float* col, int64_t batch, const Window2d& w,
                        float* dx) {
  cuda::Col2Im(col, batch, ToWindow(w), dx, stream_);
  AQ_LAUNCHED("Col2Im");
}
void CudaDevice::MaxPool(const float* x, int64_t planes, const Window2d& w,
                         float* y, int32_t* argmax) {
  cuda::MaxPool(x, planes, ToWindow(w), y, argmax, stream_);
  AQ_LAUNCHED("MaxPool");
}
void CudaDevice::MaxPoolBackward(const float* dy, const int32_t* argmax,
                                 int64_t planes, const Window2d& w, float* dx) {
  cuda::MaxPoolBackward(dy, argmax, planes, ToWindow(w), dx, stream_);
  AQ_LAUNCHED("MaxPoolBackward");
}
void CudaDevice::LayerNorm(const float* x, const float* gamma,
                           const float* beta, int64_t rows, int64_t cols,
                           float eps, float* y, float* mean, float* rstd) {
  cuda::LayerNorm(x, gamma, beta, rows, cols, eps, y, mean, rstd, stream_);
  AQ_LAUNCHED("LayerNorm");
}
void CudaDevice::LayerNormBackward(const float* dy, const float* x,
                                   const float* gamma, const float* mean,
                                   const float* rstd, int64_t rows,
                                   int64_t cols, float* dx, float* dgamma,
                                   float* dbeta, bool accumulate) {
  cuda::LayerNormBackward(dy, x, gamma, mean, rstd, rows, cols, dx, dgamma,
                          dbeta, accumulate, stream_);
  AQ_LAUNCHED("LayerNormBackward");
}
void CudaDevice::RmsNorm(const float* x, const float* gamma, int64_t rows,
                         int64_t cols, float eps, float* y, float* rstd) {
  cuda::RmsNorm(x, gamma, rows, cols, eps, y, rstd, stream_);
  AQ_LAUNCHED("RmsNorm");
}
void CudaDevice::RmsNormBackward(const float* dy, const float* x,
                                 const float* gamma, const float* rstd,
                                 int64_t rows, int64_t cols, float* dx,
                                 float* dgamma, bool accumulate) {
  cuda::RmsNormBackward(dy, x, gamma, rstd, rows, cols, dx, dgamma, accumulate,
                        stream_);
  AQ_LAUNCHED("RmsNormBackward");
}
void CudaDevice::Rope(float* x, int64_t rows, int64_t positions, int64_t heads,
                      int64_t head_dim, const float* cos, const float* sin,
                      bool inverse) {
  cuda::Rope(x, rows, positions, heads, head_dim, cos, sin, inverse, stream_);
  AQ_LAUNCHED("Rope");
}
void CudaDevice::SwiGlu(const float* gate, const float* up, float* out,
                        int64_t n) {
  cuda::SwiGlu(gate, up, out, n, stream_);
  AQ_LAUNCHED("SwiGlu");
}
void CudaDevice::SwiGluBackward(const float* gate, const float* up,
                                const float* dout, float* dgate, float* dup,
                                int64_t n) {
  cuda::SwiGluBackward(gate, up, dout, dgate, dup, n, stream_);
  AQ_LAUNCHED("SwiGluBackward");
}
void CudaDevice::EmbeddingForward(const float* ids, const float* table,
                                  int64_t vocab, int64_t rows, int64_t dim,
                                  float* y) {
  cuda::EmbeddingForward(ids, table, vocab, rows, dim, y, stream_);
  AQ_LAUNCHED("EmbeddingForward");
}
void CudaDevice::EmbeddingBackward(const float* ids, const float* dy,
                                   int64_t vocab, int64_t rows, int64_t dim,
                                   float* dtable) {
  cuda::EmbeddingBackward(ids, dy, vocab, rows, dim, dtable, stream_);
  AQ_LAUNCHED("EmbeddingBackward");
}
void CudaDevice::CausalSoftmax(float* s, int64_t count, int64_t t,
                               float scale) {
  cuda::CausalSoftmax(s, count, t, scale, stream_);
  AQ_LAUNCHED("CausalSoftmax");
}
void CudaDevice::CausalSoftmaxBackward(const float* p, float* d, int64_t count,
                                       int64_t t, float scale) {
  cuda::CausalSoftmaxBackward(p, d, count, t, scale, stream_);
  AQ_LAUNCHED("CausalSoftmaxBackward");
}
void CudaDevice::SoftmaxCrossEntropy(const float* logits, const int32_t* labels,
                                     int64_t rows, int64_t classes,
                                     float grad_scale, float* losses,
                                     float* dlogits) {
  cuda::SoftmaxCrossEntropy(logits, labels, rows, classes, grad_scale, losses,
                            dlogits, stream_);
  AQ_LAUNCHED("SoftmaxCrossEntropy");
}
void CudaDevice::SgdStep(float* w, const float* g, float* momentum_buf,
                         int64_t n, const SgdParams& p) {
  cuda::SgdStep(w, p.source != nullptr ? p.source : w, g, momentum_buf, n, p.lr,
                p.momentum, p.dampening, p.weight_decay, p.nesterov,
                p.first_step, stream_);
  AQ_LAUNCHED("SgdStep");
}
void CudaDevice::AdamStep(float* w, const float* g, float* m, float* v,
                          int64_t n, const AdamParams& p) {
  const AdamScales scales = AdamStepScales(p);
  cuda::AdamStep(w, p.source != nullptr ? p.source : w, g, m, v, n,
                 scales.step_size, scales.inv_sqrt_bc2, p.beta1, p.beta2, p.eps,
                 scales.grad_decay, scales.keep, stream_);
  AQ_LAUNCHED("AdamStep");
}

}  // namespace aqueduct
