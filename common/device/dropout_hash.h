// The counter-based uniform draw behind Device::Dropout, shared verbatim by
// the CPU device and the CUDA kernels (compiled by nvcc as host+device code)
// so that both devices draw the same mask. Stateless, thread-safe.
#ifndef AQUEDUCT_COMMON_DEVICE_DROPOUT_HASH_H_
#define AQUEDUCT_COMMON_DEVICE_DROPOUT_HASH_H_

#include <cstdint>

#ifdef __CUDACC__
#define AQ_HOST_DEVICE __host__ __device__
#else
#define AQ_HOST_DEVICE
#endif

namespace aqueduct {

// A uniform [0, 1) value from (key, index): splitmix64 of the pair, top 24
// bits.
AQ_HOST_DEVICE inline float DropoutUniform(uint64_t key, uint64_t index) {
  uint64_t z = key + (index + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z = z ^ (z >> 31);
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
}

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_DEVICE_DROPOUT_HASH_H_
