#include "common/device/no_gpu.h"

#include <dirent.h>

#include "common/device/factory.h"

namespace aqueduct {

bool NvidiaGpuPresent() {
  DIR* d = opendir("/proc/driver/nvidia/gpus");
  if (d == nullptr) return false;
  bool any = false;
  while (const dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') any = true;
  }
  closedir(d);
  return any;
}

std::string NoGpuHere(const absl::Status& s) {
  if (!BuiltWithCuda()) {
    return NvidiaGpuPresent() ? ""
                              : "a CPU-only build on a machine without "
                                "an NVIDIA GPU";
  }
  for (const char* none :
       {"(cudaErrorNoDevice)", "(cudaErrorInsufficientDriver)",
        "no CUDA device on this machine"}) {
    if (s.message().find(none) != absl::string_view::npos) {
      return std::string(s.message());
    }
  }
  return "";
}

}  // namespace aqueduct
