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
void Dropout(const float* x, float* y, int64_t n, float p, uint64_t key,
             uint64_t index_offset, cudaStream_t stream);
// torch.optim.SGD semantics; see SgdParams.
void SgdStep(float* w, const float* g, float* buf, int64_t n, float lr,
             float momentum, float dampening, float weight_decay, bool nesterov,
             bool first_step, cudaStream_t stream);
// torch.optim.Adam semantics; step_size = lr / (1 - beta1^t) and
// inv_sqrt_bc2 = 1 / sqrt(1 - beta2^t) are computed on the host in double,
// exactly as CpuDevice does.
void AdamStep(float* w, const float* g, float* m, float* v, int64_t n,
              float step_size, float inv_sqrt_bc2, float beta1, float beta2,
              float eps, float weight_decay, cudaStream_t stream);

}  // namespace cuda
}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_DEVICE_CUDA_KERNELS_H_
