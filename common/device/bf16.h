// bfloat16 conversions: the 16 high bits of a float, rounded to nearest
// (ties to even). Header-only, no dependencies (frames use it too).
#ifndef AQUEDUCT_COMMON_DEVICE_BF16_H_
#define AQUEDUCT_COMMON_DEVICE_BF16_H_

#include <cstdint>
#include <cstring>

namespace aqueduct {

// x rounded to the nearest bfloat16 (ties to even; NaN stays NaN), as the
// 16 high bits of a float.
inline uint16_t ToBf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((u >> 16) | 0x40);
  }
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float FromBf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
}

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_DEVICE_BF16_H_
