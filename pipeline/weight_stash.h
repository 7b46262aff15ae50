// Weight stashing rules (PipeDream, SOSP 2019, section 3.3), as pure code:
// which weight version a stage uses for each minibatch under a schedule,
// and which stashed versions a stage must keep.
//
// Under 1f1b_stashed, stage s's forward of minibatch m uses the newest
// version it has, max(0, m - depth_s) (depth_s = warm-up forwards), and the
// backward of m uses that same version, so a stage keeps every version a
// minibatch in flight used. 1f1b_vertical_sync uses stage 0's version on
// every stage. 2bw (PipeDream-2BW) runs minibatch m on version max(0, m-1)
// at every stage: two versions at most. The flush schedules (1f1b_flush,
// gpipe, zb_h1, zb_h2) have one version: minibatch m uses version m.
//
// Thread-safety: immutable after construction.
#ifndef AQUEDUCT_PIPELINE_WEIGHT_STASH_H_
#define AQUEDUCT_PIPELINE_WEIGHT_STASH_H_

#include <cstdint>

#include "absl/types/span.h"
#include "pipeline/policy.h"

namespace aqueduct {

// The weight version (the number of optimizer steps applied before it) that
// stage `stage` uses for `minibatch` under `schedule`.
int64_t WeightVersionFor(Schedule schedule, int stage, int num_stages,
                         int warmup_depth_of_stage, int warmup_depth_of_stage0,
                         int64_t minibatch);

// The rules for one stage of a job.
class WeightStashRules {
 public:
  WeightStashRules(Schedule schedule, int stage, int num_stages,
                   int warmup_depth_of_stage, int warmup_depth_of_stage0,
                   int64_t num_minibatches)
      : schedule_(schedule),
        stage_(stage),
        num_stages_(num_stages),
        depth_(warmup_depth_of_stage),
        depth0_(warmup_depth_of_stage0),
        num_minibatches_(num_minibatches) {}

  // The version this stage uses for `minibatch`.
  int64_t VersionFor(int64_t minibatch) const {
    return WeightVersionFor(schedule_, stage_, num_stages_, depth_, depth0_,
                            minibatch);
  }

  // Whether `version` must be kept: a minibatch in flight (forwarded, not
  // yet backwarded) used it, or the next minibatch to forward
  // (`next_forward`, or none once it reaches num_minibatches) or a later
  // one will use it.
  bool MustKeep(int64_t version, int64_t next_forward,
                absl::Span<const int64_t> in_flight_versions) const;

  // The most versions besides the newest a stage keeps at once under these
  // rules: depth_s under 1f1b_stashed (one per minibatch in flight), 0 for
  // the flush schedules. Vertical sync keeps up to stage 0's depth.
  int MaxStashedVersions() const;

 private:
  Schedule schedule_;
  int stage_, num_stages_, depth_, depth0_;
  int64_t num_minibatches_;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_PIPELINE_WEIGHT_STASH_H_
