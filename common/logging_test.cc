#include "common/logging.h"

#include "gtest/gtest.h"

namespace aqueduct {
namespace {

TEST(LoggingTest, ParsesFormatsAndRejectsBadLevels) {
  logging::Format f = logging::Format::kText;
  EXPECT_TRUE(logging::ParseFormat("json", &f).ok());
  EXPECT_EQ(f, logging::Format::kJson);
  EXPECT_EQ(logging::ParseFormat("xml", &f).message(),
            "log format 'xml' is not one of: text, json");
  logging::LoggingOptions bad;
  bad.level = "loud";
  EXPECT_EQ(logging::ConfigureLogging(bad).code(),
            absl::StatusCode::kInvalidArgument);
  logging::LoggingOptions json;
  json.level = "debug";
  json.format = logging::Format::kJson;
  json.component = "test";
  ASSERT_TRUE(logging::ConfigureLogging(json).ok());
  EXPECT_EQ(logging::Get()->level(), spdlog::level::debug);
  testing::internal::CaptureStderr();
  AQ_LOG_INFO("a \"quoted\" message\\with {} newline\n", 1);
  logging::Get()->flush();
  const std::string line = testing::internal::GetCapturedStderr();
  EXPECT_NE(line.find("\"level\":\"info\",\"component\":\"test\""),
            std::string::npos)
      << line;
  EXPECT_NE(
      line.find("\"msg\":\"a \\\"quoted\\\" message\\\\with 1 newline\\n\"}"),
      std::string::npos)
      << line;
}

}  // namespace
}  // namespace aqueduct
