// A worker's own memory check before it runs its part of a job (issue 14,
// defence in depth): a stage too large for the worker fails with
// FAILED_PRECONDITION naming the layer, before it allocates anything or
// connects to a peer.
#include "worker/runtime/stage_job.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "pipeline/spec.h"

namespace aqueduct {
namespace {

// Two layers: 268 M parameters under Adam (4.3 GB), then a small head.
constexpr char kSpec[] = R"pb(
  model {
    layers { linear { in_features: 16384 out_features: 16384 } }
    layers { linear { in_features: 16384 out_features: 4 } }
  }
  data {
    synthetic {
      sample_shape: [ 16384 ]
      num_classes: 4
      train_samples: 64
    }
  }
  optimizer { adam { lr: 0.001 } }
  batch_size: 16
  max_steps: 3
)pb";

// An assignment of `stages` stages (layer s on stage s when 2), this
// worker running stage 0.
StageAssignment Assignment(int stages) {
  StageAssignment a;
  a.set_job_id("job-1");
  *a.mutable_spec() = *ParseJobSpec(kSpec, "test");
  for (int s = 0; s < stages; ++s) {
    PlanStage* stage = a.mutable_plan()->add_stages();
    stage->set_first_layer(stages == 1 ? 0 : s);
    stage->set_end_layer(stages == 1 ? 2 : s + 1);
    stage->set_replicas(1);
    stage->add_worker_ranks(s);
    stage->set_warmup_depth(stages - 1 - s);
    a.add_peers()->add_worker_ids(absl::StrCat("w", s));
  }
  a.mutable_plan()->set_workers_used(stages);
  a.set_world_size(stages);
  return a;
}

TEST(StageJobTest, AStageTooLargeForTheWorkerFailsBeforeItAllocates) {
  JobEnv env;
  env.memory_bytes = 1000000000;  // No data plane, store or progress: the
                                  // check comes before any of them.
  const absl::Status local = RunLocalJob(Assignment(1), env);
  EXPECT_EQ(local.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(local.message())
                .find("the job (model.layers[0, 2)) needs at least 4.3 GB"),
            std::string::npos)
      << local;
  EXPECT_NE(std::string(local.message())
                .find("model.layers[0].linear alone holds 4.3 GB; more than "
                      "this worker's memory (1.0 GB)"),
            std::string::npos)
      << local;
  const absl::Status stage = RunPipelineJob(Assignment(2), env);
  EXPECT_EQ(stage.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(stage.message())
                .find("stage 0 (model.layers[0, 1)) needs at least 4.3 GB"),
            std::string::npos)
      << stage;
  EXPECT_NE(std::string(stage.message()).find("[ranks: 0=w0 (stage 0)"),
            std::string::npos)
      << stage;
}

}  // namespace
}  // namespace aqueduct
