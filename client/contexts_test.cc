// Where a remote command's settings come from (client/contexts.h): flag,
// named context, environment, current context.
#include "client/contexts.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/flags/flag.h"
#include "client/cli.h"
#include "common/security.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

class ContextsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = std::string(std::getenv("TEST_TMPDIR")) + "/aq/config";
    setenv("AQ_CONFIG", path_.c_str(), 1);
    unsetenv("AQ_CONTEXT");
    unsetenv("AQ_COORDINATOR");
    absl::SetFlag(&FLAGS_coordinator, "");
    absl::SetFlag(&FLAGS_context, "");
    absl::SetFlag(&FLAGS_tls_ca, "");
    v1::AqConfig config;
    config.set_current_context("a");
    for (const char* name : {"a", "b"}) {
      v1::AqContext* c = config.add_contexts();
      c->set_name(name);
      c->set_coordinator(std::string(name) + ":7070");
      c->set_tls_ca(std::string("/ca/") + name);
    }
    ASSERT_TRUE(SaveAqConfig(path_, config).ok());
  }
  std::string path_;
};

TEST_F(ContextsTest, TheCurrentContextFillsWhatNothingElseSets) {
  EXPECT_EQ(*ApplyContext(), "a");
  EXPECT_EQ(absl::GetFlag(FLAGS_coordinator), "a:7070");
  EXPECT_EQ(absl::GetFlag(FLAGS_tls_ca), "/ca/a");
}

TEST_F(ContextsTest, TheEnvironmentBeatsTheCurrentContext) {
  setenv("AQ_COORDINATOR", "env:1", 1);
  EXPECT_EQ(*ApplyContext(), "a");
  EXPECT_EQ(absl::GetFlag(FLAGS_coordinator), "");  // $AQ_COORDINATOR applies
  EXPECT_EQ(absl::GetFlag(FLAGS_tls_ca), "/ca/a");  // no $AQ_TLS_CA
}

TEST_F(ContextsTest, ANamedContextBeatsTheEnvironmentAndFlagsBeatIt) {
  setenv("AQ_COORDINATOR", "env:1", 1);
  setenv("AQ_CONTEXT", "b", 1);
  absl::SetFlag(&FLAGS_tls_ca, "/flag/ca");
  EXPECT_EQ(*ApplyContext(), "b");
  EXPECT_EQ(absl::GetFlag(FLAGS_coordinator), "b:7070");
  EXPECT_EQ(absl::GetFlag(FLAGS_tls_ca), "/flag/ca");
}

TEST_F(ContextsTest, AnUnknownNameIsNamedWithTheContextsThereAre) {
  absl::SetFlag(&FLAGS_context, "c");
  const absl::StatusOr<std::string> applied = ApplyContext();
  ASSERT_FALSE(applied.ok());
  EXPECT_NE(applied.status().message().find("no context 'c' in " + path_ +
                                            " (its contexts: a, b;"),
            std::string::npos)
      << applied.status();
}

TEST_F(ContextsTest, ABadFileIsNamedWithItsLine) {
  std::ofstream(path_) << "current_context: \"a\"\ncontexts { nme: \"x\" }\n";
  const absl::StatusOr<std::string> applied = ApplyContext();
  ASSERT_FALSE(applied.ok());
  EXPECT_NE(applied.status().message().find(path_ + ": line 2"),
            std::string::npos)
      << applied.status();
}

TEST_F(ContextsTest, NoFileNoContext) {
  setenv("AQ_CONFIG", (path_ + ".absent").c_str(), 1);
  EXPECT_EQ(*ApplyContext(), "");
  EXPECT_EQ(absl::GetFlag(FLAGS_coordinator), "");
}

}  // namespace
}  // namespace aqueduct
