#include "client/spec_overrides.h"

#include <string>

#include "gtest/gtest.h"

namespace aqueduct {
namespace {

std::string Error(const std::vector<std::string>& sets) {
  JobSpec spec;
  const absl::Status s = ApplySpecOverrides(sets, &spec);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  return std::string(s.message());
}

TEST(SpecOverridesTest, SetsScalarsAtAnyDepth) {
  JobSpec spec;
  spec.mutable_optimizer()->mutable_sgd()->set_lr(0.1);
  ASSERT_TRUE(ApplySpecOverrides(
                  {"max_steps=100", "pipeline.workers=2", "name=run 7",
                   "optimizer.adam.lr=3e-4", "pipeline.sequence_parallel=true",
                   "data.text.context=32", "priority=-3",
                   "pipeline.schedule=zb_h1", "seed=18"},
                  &spec)
                  .ok());
  EXPECT_EQ(spec.max_steps(), 100);
  EXPECT_EQ(spec.pipeline().workers(), 2);
  EXPECT_EQ(spec.name(), "run 7");
  // A oneof's other member: the optimizer is Adam now.
  EXPECT_TRUE(spec.optimizer().has_adam());
  EXPECT_FLOAT_EQ(spec.optimizer().adam().lr(), 3e-4f);
  EXPECT_TRUE(spec.pipeline().sequence_parallel());
  EXPECT_EQ(spec.data().text().context(), 32);
  EXPECT_EQ(spec.priority(), -3);
  EXPECT_EQ(spec.pipeline().schedule(), "zb_h1");
  EXPECT_EQ(spec.seed(), 18u);
  // Later overrides win; "=" in the value is kept.
  ASSERT_TRUE(ApplySpecOverrides({"name=a=b", "max_steps=5"}, &spec).ok());
  EXPECT_EQ(spec.name(), "a=b");
  EXPECT_EQ(spec.max_steps(), 5);
}

TEST(SpecOverridesTest, ErrorsNameThePath) {
  EXPECT_EQ(Error({"max_steps"}),
            "--set max_steps: want path=value, e.g. max_steps=100");
  EXPECT_NE(Error({"pipeline.wrkers=2"})
                .find("--set pipeline.wrkers: PipelineSpec has no field "
                      "'wrkers' (its fields: workers, schedule,"),
            std::string::npos);
  EXPECT_EQ(Error({"max_steps=many"}),
            "--set max_steps: 'many' is not a int64");
  EXPECT_EQ(Error({"pipeline.sequence_parallel=yes please"}),
            "--set pipeline.sequence_parallel: 'yes please' is not true or "
            "false");
  EXPECT_NE(Error({"pipeline=3"})
                .find("--set pipeline: pipeline is a "
                      "message: name one of its fields"),
            std::string::npos);
  EXPECT_EQ(Error({"max_steps.x=3"}),
            "--set max_steps.x: max_steps is not a message");
  EXPECT_EQ(Error({"model.layers=3"}),
            "--set model.layers: layers is a list: set it in the spec file");
  EXPECT_EQ(Error({"pipeline.workers=99999999999"}),
            "--set pipeline.workers: '99999999999' is not a int32");
}

}  // namespace
}  // namespace aqueduct
