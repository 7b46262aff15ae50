// CUDA, cuBLAS and NCCL errors as absl::Status naming the call, file and
// line, e.g. "cudaMalloc(&p, 1024) failed at common/device/cuda/x.cc:42:
// out of memory (cudaErrorMemoryAllocation)". Only built where the CUDA
// toolkit is present (third_party/cuda). Thread-safe (stateless).
#ifndef AQUEDUCT_COMMON_DEVICE_CUDA_CUDA_STATUS_H_
#define AQUEDUCT_COMMON_DEVICE_CUDA_CUDA_STATUS_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "absl/status/status.h"

namespace aqueduct {

absl::Status CudaStatus(cudaError_t error, const char* call, const char* file,
                        int line);
absl::Status CublasStatus(cublasStatus_t error, const char* call,
                          const char* file, int line);
absl::Status NcclStatus(ncclResult_t error, const char* call, const char* file,
                        int line);

}  // namespace aqueduct

// Evaluates a CUDA runtime / cuBLAS / NCCL call and returns a Status naming
// it from the enclosing function when it fails.
#define AQ_CUDA_RETURN_IF_ERROR(call) \
  AQ_GPU_RETURN_IF_ERROR_(::aqueduct::CudaStatus, call)
#define AQ_CUBLAS_RETURN_IF_ERROR(call) \
  AQ_GPU_RETURN_IF_ERROR_(::aqueduct::CublasStatus, call)
#define AQ_NCCL_RETURN_IF_ERROR(call) \
  AQ_GPU_RETURN_IF_ERROR_(::aqueduct::NcclStatus, call)

#define AQ_GPU_RETURN_IF_ERROR_(to_status, call)      \
  do {                                                \
    ::absl::Status aq_gpu_status_ =                   \
        to_status((call), #call, __FILE__, __LINE__); \
    if (!aq_gpu_status_.ok()) return aq_gpu_status_;  \
  } while (0)

#endif  // AQUEDUCT_COMMON_DEVICE_CUDA_CUDA_STATUS_H_
