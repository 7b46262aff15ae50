#include "coordinator/jobs/field_limits.h"

#include <string>

#include "gtest/gtest.h"
#include "proto/control.pb.h"

namespace aqueduct {
namespace {

v1::JobSpec Spec() {
  v1::JobSpec spec;
  spec.set_name("mlp");
  spec.mutable_model()->add_layers()->set_name("fc1");
  spec.mutable_data()->mutable_text()->add_files("/data/a.txt");
  spec.mutable_checkpoint()->set_dir("/ckpt");
  return spec;
}

TEST(FieldLimitsTest, AnOrdinarySpecPasses) {
  EXPECT_TRUE(CheckFieldSizes(Spec(), SpecFieldLimits(), "the spec").ok());
}

TEST(FieldLimitsTest, EachOversizedFieldIsNamedWithItsSize) {
  struct Case {
    void (*edit)(v1::JobSpec*);
    std::string message;
  };
  const Case cases[] = {
      {[](v1::JobSpec* s) { s->set_name(std::string(100 << 10, 'n')); },
       "name is 102400 bytes, more than the 256 allowed"},
      {[](v1::JobSpec* s) {
         s->mutable_model()->mutable_layers(0)->set_name(std::string(257, 'l'));
       },
       "model.layers[0].name is 257 bytes, more than the 256 allowed"},
      {[](v1::JobSpec* s) {
         s->mutable_data()->mutable_text()->add_files(std::string(4097, 'f'));
       },
       "data.text.files[1] is 4097 bytes, more than the 4096 allowed"},
      {[](v1::JobSpec* s) {
         for (int i = 0; i < 1024; ++i) {
           s->mutable_data()->mutable_text()->add_files("f");
         }
       },
       "data.text.files has 1025 entries, more than the 1024 allowed"},
      {[](v1::JobSpec* s) {
         s->mutable_pipeline()->set_schedule(std::string(5000, 's'));
       },
       "pipeline.schedule is 5000 bytes, more than the 4096 allowed"},
      {[](v1::JobSpec* s) {
         for (int i = 0; i < 600; ++i) {
           s->set_init_weights(std::string(4000, 'w'));
           s->mutable_model()->add_layers()->set_name(std::string(250, 'x'));
           s->mutable_data()->mutable_text()->add_files(std::string(1500, 'f'));
         }
       },
       "the spec is 1059449 bytes, more than the 1048576 allowed"},
  };
  for (const Case& c : cases) {
    v1::JobSpec spec = Spec();
    c.edit(&spec);
    const absl::Status s = CheckFieldSizes(spec, SpecFieldLimits(), "the spec");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_EQ(std::string(s.message()).rfind(c.message, 0), 0u) << s;
  }
  // Exactly at the limits passes.
  v1::JobSpec edge = Spec();
  edge.set_name(std::string(256, 'n'));
  edge.set_init_weights(std::string(4096, 'w'));
  EXPECT_TRUE(CheckFieldSizes(edge, SpecFieldLimits(), "the spec").ok());
}

// Issue 22, item 11: a job named "\x1b[2J..." was printed raw by `aq jobs`.
// Every string of a spec is refused with a control character or bytes that
// are not UTF-8, naming the field; the value is quoted escaped.
TEST(FieldLimitsTest, ControlCharactersAreRefusedNamingTheField) {
  struct Case {
    void (*edit)(v1::JobSpec*);
    std::string message;
  };
  const Case cases[] = {
      {[](v1::JobSpec* s) { s->set_name("evil\x1b[2J\x1b[31m"); },
       "name='evil\\x1b[2J\\x1b[31m' holds a control character"},
      {[](v1::JobSpec* s) { s->set_name("job\r\nINFO forged"); },
       "name='job\\r\\nINFO forged' holds a control character"},
      {[](v1::JobSpec* s) { s->set_name(std::string("nul\0", 4)); },
       "name='nul\\x00' holds a control character"},
      {[](v1::JobSpec* s) { s->set_name("tab\there"); },
       "name='tab\\there' holds a control character"},
      {[](v1::JobSpec* s) { s->set_name("del\x7f"); },
       "name='del\\x7f' holds a control character"},
      {[](v1::JobSpec* s) {
         s->set_name(
             "csi\xc2\x9b"
             "2J");
       },
       "name='csi\\xc2\\x9b\\x32J' holds a control character"},
      {[](v1::JobSpec* s) { s->set_name("latin1 \xe9t\xe9"); },
       "name='latin1 \\xe9t\\xe9' is not valid UTF-8"},
      {[](v1::JobSpec* s) {
         s->mutable_model()->mutable_layers(0)->set_name("fc\x1b]0;title\x07");
       },
       "model.layers[0].name='fc\\x1b]0;title\\x07' holds a control "
       "character"},
      {[](v1::JobSpec* s) {
         s->mutable_data()->mutable_text()->add_files("/data/b\n.txt");
       },
       "data.text.files[1]='/data/b\\n.txt' holds a control character"},
      {[](v1::JobSpec* s) { s->mutable_checkpoint()->set_dir("/ck\bpt"); },
       "checkpoint.dir='/ck\\x08pt' holds a control character"},
  };
  for (const Case& c : cases) {
    v1::JobSpec spec = Spec();
    c.edit(&spec);
    const absl::Status s = CheckFieldSizes(spec, SpecFieldLimits(), "the spec");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_EQ(std::string(s.message()).rfind(c.message, 0), 0u) << s;
  }
  // At most 64 bytes of the value are quoted.
  v1::JobSpec spec = Spec();
  spec.set_name(std::string(200, 'n') + "\x1b");
  EXPECT_EQ(CheckFieldSizes(spec, SpecFieldLimits(), "the spec").message(),
            "name='" + std::string(64, 'n') +
                "...' holds a control character (it would act on the "
                "terminals that show it)");
  // Printable UTF-8 passes: accents, symbols, U+00A0 (not a C1 control).
  spec.set_name("caf\xc3\xa9 \xe2\x82\xac\xc2\xa0mlp ~!");
  EXPECT_TRUE(CheckFieldSizes(spec, SpecFieldLimits(), "the spec").ok());
}

TEST(FieldLimitsTest, ProfilesAreBoundedToo) {
  v1::ModelProfile profile;
  profile.add_nodes()->set_id("layer0");
  profile.add_nodes()->set_description(std::string(5000, 'd'));
  EXPECT_EQ(
      CheckFieldSizes(profile, ProfileFieldLimits(), "the profile").message(),
      "nodes[1].description is 5000 bytes, more than the 4096 allowed");
  profile.mutable_nodes(1)->set_description("linear\x1b[2J");
  EXPECT_EQ(
      CheckFieldSizes(profile, ProfileFieldLimits(), "the profile").message(),
      "nodes[1].description='linear\\x1b[2J' holds a control character (it "
      "would act on the terminals that show it)");
}

}  // namespace
}  // namespace aqueduct
