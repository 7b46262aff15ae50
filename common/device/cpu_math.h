// Branch-free float exp and erf for CpuDevice's kernels: inline, so that a
// loop over them vectorises (libm's expf and erff are calls the compiler
// cannot vectorise without -ffast-math).
//
//   Exp: Cody-Waite reduction by ln 2 (n rounded with the 1.5 * 2^23
//   trick, not floor, which kept GCC 12 from vectorising the loop) and a
//   degree-6 polynomial (Cephes' expf); relative error below 1e-7
//   (measured: 8.1e-8 over [-87, 88]); the argument is clamped to [-87.3, 88.7]
//   (e^-87.3 is 1.2e-38, the smallest normal float: nothing beside a softmax's
//   largest term, 1).
//
//   Erf: the rational approximation x P(x^2) / Q(x^2) over
//   [-4, 4] (as Eigen and XLA evaluate erf in float), +-1 beyond; absolute
//   error below 5e-7 (measured: 3.8e-7 with FMA, 4.5e-7 without; libm's erff:
//   4.7e-8), so GELU built on it stays the exact erf form (within a few
//   float ulps), not the tanh approximation.
#ifndef AQUEDUCT_COMMON_DEVICE_CPU_MATH_H_
#define AQUEDUCT_COMMON_DEVICE_CPU_MATH_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace aqueduct {

inline float ExpF(float x) {
  x = std::min(std::max(x, -87.3f), 88.7f);
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = p * r * r + r + 1.0f;
  // NaN in, NaN out (through e); converting a NaN to int is undefined.
  const float n_int = n == n ? n : 0.0f;
  const int32_t bits = (static_cast<int32_t>(n_int) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return e * scale;
}

inline float ErfF(float x) {
  x = std::min(std::max(x, -4.0f), 4.0f);
  const float x2 = x * x;
  float p = -2.72614225801306e-10f;
  p = p * x2 + 2.77068142495902e-08f;
  p = p * x2 - 2.10102402082508e-06f;
  p = p * x2 - 5.69250639462346e-05f;
  p = p * x2 - 7.34990630326855e-04f;
  p = p * x2 - 2.95459980854025e-03f;
  p = p * x2 - 1.60960333262415e-02f;
  float q = -1.45660718464996e-05f;
  q = q * x2 - 2.13374055278905e-04f;
  q = q * x2 - 1.68282697438203e-03f;
  q = q * x2 - 7.37332916720468e-03f;
  q = q * x2 - 1.42647390514189e-02f;
  return x * p / q;
}

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_DEVICE_CPU_MATH_H_
