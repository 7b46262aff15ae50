// For tests with GPU cases: whether a failure to open a CUDA device means
// that no GPU exists here (the cases skip, saying why) or is a failure (a GPU
// is there: a bad flag, a broken build, a device that does not exist must
// fail, not skip). Test-only.
#ifndef AQUEDUCT_COMMON_DEVICE_NO_GPU_H_
#define AQUEDUCT_COMMON_DEVICE_NO_GPU_H_

#include <string>

#include "absl/status/status.h"

namespace aqueduct {

// Whether the NVIDIA kernel driver shows a GPU (/proc/driver/nvidia/gpus).
bool NvidiaGpuPresent();

// Why no GPU exists here, when creating a CUDA device failed with `s`: a
// CPU-only build on a machine without an NVIDIA GPU, or CUDA finding no
// device or no driver. Empty when `s` is any other error.
std::string NoGpuHere(const absl::Status& s);

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_DEVICE_NO_GPU_H_
