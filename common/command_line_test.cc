// Tests of the command-line parser over Abseil flags: spellings, aliases,
// list and boolean flags, help, and usage errors with exit code 2.
#include "common/command_line.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "gtest/gtest.h"

ABSL_FLAG(int64_t, test_steps, 0, "steps");
ABSL_FLAG(std::string, test_out, "", "output file");
ABSL_FLAG(bool, test_wait, false, "wait");
ABSL_FLAG(std::vector<std::string>, test_levels, {}, "levels");
ABSL_FLAG(std::string, test_other, "", "not accepted by the spec");
ABSL_FLAG(int32_t, test_limit, 16, "a limit");

namespace aqueduct {
namespace {

CommandLineSpec Spec() {
  CommandLineSpec spec;
  spec.program = "tool run";
  spec.synopsis = "JOB [flags]";
  spec.description = "Runs a job.\n";
  spec.flags = {{"test_steps", "N", ""},
                {"test_out", "FILE", ""},
                {"test_wait", "", ""},
                {"test_levels", "", ""}};
  spec.aliases = {{"o", "test_out"}};
  spec.version = "tool 1.2.3\n";
  return spec;
}

class CommandLineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::SetFlag(&FLAGS_test_steps, 0);
    absl::SetFlag(&FLAGS_test_out, "");
    absl::SetFlag(&FLAGS_test_wait, false);
    absl::SetFlag(&FLAGS_test_levels, {});
    absl::SetFlag(&FLAGS_test_limit, 16);
  }
};

TEST_F(CommandLineTest, BothSpellingsAndForms) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{
           {"--test_steps", "7"}, {"--test-steps=7"}, {"-test_steps", "7"}}) {
    absl::SetFlag(&FLAGS_test_steps, 0);
    const ParsedArgs parsed = ParseArgs(Spec(), args);
    EXPECT_FALSE(parsed.exit_code.has_value());
    EXPECT_EQ(absl::GetFlag(FLAGS_test_steps), 7);
    EXPECT_EQ(parsed.given.count("test_steps"), 1u);
  }
}

TEST_F(CommandLineTest, PositionalsAliasesBooleansAndLists) {
  const ParsedArgs parsed =
      ParseArgs(Spec(), {"job.txt", "-o", "out.json", "--test_wait",
                         "--test-levels", "8", "16", "--", "--literal"});
  ASSERT_FALSE(parsed.exit_code.has_value());
  EXPECT_EQ(parsed.positional,
            (std::vector<std::string>{"job.txt", "--literal"}));
  EXPECT_EQ(absl::GetFlag(FLAGS_test_out), "out.json");
  EXPECT_TRUE(absl::GetFlag(FLAGS_test_wait));
  EXPECT_EQ(absl::GetFlag(FLAGS_test_levels),
            (std::vector<std::string>{"8", "16"}));
  EXPECT_FALSE(ParseArgs(Spec(), {"--notest_wait"}).exit_code.has_value());
  EXPECT_FALSE(absl::GetFlag(FLAGS_test_wait));
}

TEST_F(CommandLineTest, ARepeatedListFlagAddsItsValues) {
  const ParsedArgs parsed =
      ParseArgs(Spec(), {"--test_levels", "/a,/b", "--test-levels=/c",
                         "--test_levels", "/d", "/e"});
  ASSERT_FALSE(parsed.exit_code.has_value());
  EXPECT_EQ(absl::GetFlag(FLAGS_test_levels),
            (std::vector<std::string>{"/a", "/b", "/c", "/d", "/e"}));
  // Once per parse: a second parse starts from what is given there.
  ASSERT_FALSE(ParseArgs(Spec(), {"--test_levels", "/f"}).exit_code);
  EXPECT_EQ(absl::GetFlag(FLAGS_test_levels), std::vector<std::string>{"/f"});
}

TEST_F(CommandLineTest, UsageErrorsExitTwo) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"--bogus"},
                                             {"--test_other", "x"},
                                             {"--test_steps"},
                                             {"--test_steps", "many"},
                                             {"--notest_steps"},
                                             {"--notest_wait=1"}}) {
    EXPECT_EQ(ParseArgs(Spec(), args).exit_code, 2) << args[0];
  }
}

TEST_F(CommandLineTest, HelpAndVersionExitZero) {
  EXPECT_EQ(ParseArgs(Spec(), {"--help"}).exit_code, 0);
  EXPECT_EQ(ParseArgs(Spec(), {"-h"}).exit_code, 0);
  EXPECT_EQ(ParseArgs(Spec(), {"--version"}).exit_code, 0);
  CommandLineSpec no_version = Spec();
  no_version.version.clear();
  EXPECT_EQ(ParseArgs(no_version, {"--version"}).exit_code, 2);
}

TEST_F(CommandLineTest, HelpListsFlagsAliasesAndDefaults) {
  const std::string help = HelpText(Spec());
  EXPECT_EQ(help.rfind("usage: tool run JOB [flags]\n\nRuns a job.\n", 0), 0u)
      << help;
  EXPECT_NE(help.find("  --test_steps N"), std::string::npos) << help;
  EXPECT_NE(help.find("steps (default: 0)"), std::string::npos) << help;
  EXPECT_NE(help.find("  -o, --test_out FILE"), std::string::npos) << help;
  EXPECT_NE(help.find("  --test_wait "), std::string::npos) << help;
  EXPECT_EQ(help.find("test_other"), std::string::npos) << help;
  EXPECT_NE(help.find("  --version"), std::string::npos) << help;
  for (size_t start = 0, end; start < help.size(); start = end + 1) {
    end = help.find('\n', start);
    EXPECT_LE(end - start, 80u) << help.substr(start, end - start);
  }
}

TEST_F(CommandLineTest, FlagsDefinedInAFile) {
  std::vector<std::string> names;
  for (const FlagUse& use : FlagsDefinedIn("common/command_line_test.cc")) {
    names.push_back(use.name);
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"test_levels", "test_limit", "test_other",
                                      "test_out", "test_steps", "test_wait"}));
}

TEST_F(CommandLineTest, FlagRangesNameTheFirstFlagOutOfRange) {
  const std::vector<FlagRange> ranges = {{"test_steps", 0, int64_t{1} << 40},
                                         {"test_limit", 16, 1 << 20}};
  absl::SetFlag(&FLAGS_test_steps, int64_t{1} << 40);
  EXPECT_TRUE(CheckFlagRanges(ranges).ok());
  // A negative value (which gRPC would read as "no limit") is refused.
  absl::SetFlag(&FLAGS_test_limit, -1);
  absl::Status s = CheckFlagRanges(ranges);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "--test_limit must be between 16 and 1048576, got -1");
  absl::SetFlag(&FLAGS_test_limit, (1 << 20) + 1);
  EXPECT_EQ(CheckFlagRanges(ranges).message(),
            "--test_limit must be between 16 and 1048576, got 1048577");
  // The first flag out of range is the one named.
  absl::SetFlag(&FLAGS_test_steps, -5);
  EXPECT_EQ(CheckFlagRanges(ranges).message(),
            "--test_steps must be between 0 and 1099511627776, got -5");
}

}  // namespace
}  // namespace aqueduct
