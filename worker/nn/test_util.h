// Helpers the layer tests share: a layer spec from text, seeded random
// values, and the relative error of two vectors. Test-only.
#ifndef AQUEDUCT_WORKER_NN_TEST_UTIL_H_
#define AQUEDUCT_WORKER_NN_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "proto/types.h"

namespace aqueduct {

inline LayerSpec ParseLayer(const std::string& text) {
  LayerSpec spec;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &spec))
      << text;
  return spec;
}

inline std::vector<float> Random(size_t n, std::mt19937* rng, float lo = -1,
                                 float hi = 1) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(*rng);
  return v;
}

// |a - b| / max(|a|, |b|) in the 2-norm (0 when both are zero).
inline double RelativeError(const std::vector<double>& a,
                            const std::vector<double>& b) {
  double diff = 0, na = 0, nb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (a[i] - b[i]) * (a[i] - b[i]);
    na += a[i] * a[i];
    nb += b[i] * b[i];
  }
  const double denom = std::max(std::sqrt(na), std::sqrt(nb));
  return denom == 0 ? 0 : std::sqrt(diff) / denom;
}

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_NN_TEST_UTIL_H_
