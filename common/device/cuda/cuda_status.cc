#include "common/device/cuda/cuda_status.h"

#include "absl/strings/str_cat.h"

namespace aqueduct {

namespace {

absl::StatusCode CodeForCuda(cudaError_t error) {
  switch (error) {
    case cudaErrorMemoryAllocation:
      return absl::StatusCode::kResourceExhausted;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
      return absl::StatusCode::kFailedPrecondition;
    case cudaErrorInvalidValue:
      return absl::StatusCode::kInvalidArgument;
    default:
      return absl::StatusCode::kInternal;
  }
}

}  // namespace

absl::Status CudaStatus(cudaError_t error, const char* call, const char* file,
                        int line) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::Status(CodeForCuda(error),
                      absl::StrCat(call, " failed at ", file, ":", line, ": ",
                                   cudaGetErrorString(error), " (",
                                   cudaGetErrorName(error), ")"));
}

absl::Status CublasStatus(cublasStatus_t error, const char* call,
                          const char* file, int line) {
  if (error == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const absl::StatusCode code = error == CUBLAS_STATUS_ALLOC_FAILED
                                    ? absl::StatusCode::kResourceExhausted
                                    : absl::StatusCode::kInternal;
  return absl::Status(code,
                      absl::StrCat(call, " failed at ", file, ":", line, ": ",
                                   cublasGetStatusString(error), " (",
                                   cublasGetStatusName(error), ")"));
}

absl::Status NcclStatus(ncclResult_t error, const char* call, const char* file,
                        int line) {
  if (error == ncclSuccess) return absl::OkStatus();
  absl::StatusCode code = absl::StatusCode::kInternal;
  if (error == ncclInvalidArgument || error == ncclInvalidUsage) {
    code = absl::StatusCode::kInvalidArgument;
  } else if (error == ncclRemoteError || error == ncclSystemError) {
    code = absl::StatusCode::kUnavailable;
  }
  return absl::Status(code,
                      absl::StrCat(call, " failed at ", file, ":", line, ": ",
                                   ncclGetErrorString(error), " (ncclResult ",
                                   static_cast<int>(error), ")"));
}

}  // namespace aqueduct
