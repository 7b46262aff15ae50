#include "coordinator/speeds.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace aqueduct {

std::vector<double> RelativeSpeeds(const std::vector<double>& probes) {
  double fastest = 0;
  for (double p : probes) {
    if (std::isfinite(p) && p > fastest) fastest = p;
  }
  if (fastest <= 0) return {};
  std::vector<double> speeds;
  bool unequal = false;
  for (double p : probes) {
    double speed = 1;
    if (std::isfinite(p) && p > 0 && p < kEqualSpeedRatio * fastest) {
      speed = std::max(kSpeedStep,
                       std::round(p / fastest / kSpeedStep) * kSpeedStep);
      unequal = true;
    }
    speeds.push_back(speed);
  }
  if (!unequal) return {};
  return speeds;
}

std::vector<int> FastestFirst(const std::vector<double>& speeds,
                              const std::vector<int>& groups) {
  std::vector<int> order(speeds.size());
  std::iota(order.begin(), order.end(), 0);
  std::vector<int> sizes = groups;
  if (sizes.empty()) sizes.push_back(static_cast<int>(order.size()));
  auto first = order.begin();
  for (int size : sizes) {
    const auto end = first + std::min<std::ptrdiff_t>(std::max(size, 0),
                                                      order.end() - first);
    std::stable_sort(first, end,
                     [&](int a, int b) { return speeds[a] > speeds[b]; });
    first = end;
  }
  return order;
}

}  // namespace aqueduct
