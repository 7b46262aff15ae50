#include "pipeline/weight_stash.h"

#include <algorithm>

namespace aqueduct {

int64_t WeightVersionFor(Schedule schedule, int /*stage*/, int /*num_stages*/,
                         int warmup_depth_of_stage, int warmup_depth_of_stage0,
                         int64_t minibatch) {
  switch (schedule) {
    case v1::SCHEDULE_UNSPECIFIED:
    case v1::SCHEDULE_1F1B_STASHED:
      return std::max<int64_t>(0, minibatch - warmup_depth_of_stage);
    case v1::SCHEDULE_1F1B_VERTICAL_SYNC:
      return std::max<int64_t>(0, minibatch - warmup_depth_of_stage0);
    case v1::SCHEDULE_2BW:
      return std::max<int64_t>(0, minibatch - 1);
    default:
      return minibatch;
  }
}

bool WeightStashRules::MustKeep(
    int64_t version, int64_t next_forward,
    absl::Span<const int64_t> in_flight_versions) const {
  // Versions only grow with the minibatch, so a future minibatch needs
  // `version` if the next one does or uses an older one.
  if (next_forward < num_minibatches_ && version >= VersionFor(next_forward)) {
    return true;
  }
  return std::find(in_flight_versions.begin(), in_flight_versions.end(),
                   version) != in_flight_versions.end();
}

int WeightStashRules::MaxStashedVersions() const {
  switch (schedule_) {
    case v1::SCHEDULE_UNSPECIFIED:
    case v1::SCHEDULE_1F1B_STASHED:
      return depth_;
    case v1::SCHEDULE_1F1B_VERTICAL_SYNC:
      return std::max(depth_, depth0_);
    case v1::SCHEDULE_2BW:
      return 1;
    default:
      return 0;
  }
}

}  // namespace aqueduct
