// Creates the Device a daemon or tool runs on from its command-line spelling:
// "cpu" or "cuda:N". CUDA devices exist only in binaries built where the CUDA
// toolkit was found (third_party/cuda); elsewhere "cuda:N" is a clear
// FAILED_PRECONDITION, as is a machine without that GPU. Thread-safe.
#ifndef AQUEDUCT_COMMON_DEVICE_FACTORY_H_
#define AQUEDUCT_COMMON_DEVICE_FACTORY_H_

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/device/device.h"

namespace aqueduct {

// How a CUDA device computes GEMMs: fp32 (cuBLAS pedantic math; matches
// the CPU within fp32 tolerance), tf32 (tensor cores, ~1e-3 relative) or
// bf16 (inputs rounded to bfloat16, fp32 accumulation and output, ~1e-2
// relative). The CPU device computes fp32 or bf16 (bf16_gemm.h).
enum class GemmPrecision { kFp32, kTf32, kBf16 };

struct DeviceSpec {
  DeviceKind kind = DeviceKind::kCpu;
  int ordinal = 0;
  GemmPrecision gemm = GemmPrecision::kFp32;
};

// Parses "fp32", "tf32" or "bf16"; INVALID_ARGUMENT naming the text
// otherwise.
absl::StatusOr<GemmPrecision> ParseGemmPrecision(absl::string_view text);

// Parses "cpu" or "cuda:N" (N >= 0); INVALID_ARGUMENT naming the text
// otherwise.
absl::StatusOr<DeviceSpec> ParseDeviceSpec(absl::string_view text);

// True when this binary was built with the CUDA device.
bool BuiltWithCuda();

// `cpu_threads` sizes the CPU device's BLAS pool (0: its default).
// FAILED_PRECONDITION for tf32 on the CPU.
absl::StatusOr<std::unique_ptr<Device>> CreateDevice(const DeviceSpec& spec,
                                                     int cpu_threads);

using DeviceFactory = std::function<absl::StatusOr<std::unique_ptr<Device>>()>;

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_DEVICE_FACTORY_H_
