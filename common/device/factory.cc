#include "common/device/factory.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/device/cpu_device.h"
#include "common/status.h"

#ifdef AQ_HAVE_CUDA
#include "common/device/cuda/cuda_device.h"
#endif

namespace aqueduct {

absl::StatusOr<DeviceSpec> ParseDeviceSpec(absl::string_view text) {
  DeviceSpec spec;
  if (text == "cpu") return spec;
  int ordinal = -1;
  if (absl::ConsumePrefix(&text, "cuda:") && absl::SimpleAtoi(text, &ordinal) &&
      ordinal >= 0) {
    spec.kind = DeviceKind::kCuda;
    spec.ordinal = ordinal;
    return spec;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "bad device \"", text, "\": expected \"cpu\" or \"cuda:N\" (N >= 0)"));
}

bool BuiltWithCuda() {
#ifdef AQ_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

absl::StatusOr<GemmPrecision> ParseGemmPrecision(absl::string_view text) {
  if (text == "fp32") return GemmPrecision::kFp32;
  if (text == "tf32") return GemmPrecision::kTf32;
  if (text == "bf16") return GemmPrecision::kBf16;
  return absl::InvalidArgumentError(absl::StrCat(
      "bad GEMM precision \"", text, "\": expected fp32, tf32 or bf16"));
}

absl::StatusOr<std::unique_ptr<Device>> CreateDevice(const DeviceSpec& spec,
                                                     int cpu_threads) {
  if (spec.kind == DeviceKind::kCpu && spec.gemm == GemmPrecision::kTf32) {
    return absl::FailedPreconditionError(
        "tf32 GEMMs need a CUDA device; the CPU device computes fp32 or bf16");
  }
  if (spec.kind == DeviceKind::kCpu) {
    auto cpu = std::make_unique<CpuDevice>(CpuDeviceOptions{cpu_threads});
    cpu->SetBf16Gemm(spec.gemm == GemmPrecision::kBf16);
    return std::unique_ptr<Device>(std::move(cpu));
  }
#ifdef AQ_HAVE_CUDA
  CudaDeviceOptions options;
  options.ordinal = spec.ordinal;
  options.tf32 = spec.gemm == GemmPrecision::kTf32;
  options.bf16_gemm = spec.gemm == GemmPrecision::kBf16;
  ASSIGN_OR_RETURN(std::unique_ptr<CudaDevice> device,
                   CudaDevice::Create(options));
  return std::unique_ptr<Device>(std::move(device));
#else
  return absl::FailedPreconditionError(absl::StrCat(
      "cuda:", spec.ordinal,
      " requested but this binary was built without CUDA (no toolkit was "
      "found at build time; set CUDA_PATH and rebuild, see docs/gpu.md)"));
#endif
}

}  // namespace aqueduct
