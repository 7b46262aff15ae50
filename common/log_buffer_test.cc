#include "common/log_buffer.h"

#include <thread>

#include "common/logging.h"
#include "gtest/gtest.h"
#include "spdlog/sinks/null_sink.h"

namespace aqueduct {
namespace {

TEST(JobLogBufferTest, TakeReturnsLinesOnceInOrder) {
  JobLogBuffer buffer;
  buffer.Add("j1", 0, "info", 10, "first");
  buffer.Add("j1", 0, "warn", 11, "second");
  buffer.Add("j2", 1, "info", 12, "other job");
  std::vector<v1::LogLine> lines = buffer.Take("j1");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].text(), "first");
  EXPECT_EQ(lines[1].level(), "warn");
  EXPECT_EQ(lines[1].time_ms(), 11);
  EXPECT_TRUE(buffer.Take("j1").empty());
  EXPECT_EQ(buffer.Pending("j2"), 1u);
}

TEST(JobLogBufferTest, RingKeepsTheNewestAndSaysHowManyWereDropped) {
  JobLogBuffer buffer({/*max_lines_per_job=*/3, /*max_line_bytes=*/8,
                       /*max_jobs=*/4});
  for (int i = 0; i < 10; ++i) {
    buffer.Add("j", 2, "info", i, "line " + std::to_string(i));
  }
  std::vector<v1::LogLine> lines = buffer.Take("j");
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0].level(), "warn");
  EXPECT_NE(lines[0].text().find("7 earlier line(s) dropped"),
            std::string::npos);
  EXPECT_EQ(lines[1].text(), "line 7");
  EXPECT_EQ(lines[3].text(), "line 9");
  EXPECT_EQ(lines[3].stage(), 2);
}

TEST(JobLogBufferTest, LongLinesAreCut) {
  JobLogBuffer buffer({4, 5, 4});
  buffer.Add("j", 0, "info", 0, "abcdefghij");
  EXPECT_EQ(buffer.Take("j")[0].text(), "abcde...");
}

TEST(JobLogBufferTest, OldestJobIsForgottenBeyondMaxJobs) {
  JobLogBuffer buffer({4, 100, 2});
  buffer.Add("a", 0, "info", 0, "a");
  buffer.Add("b", 0, "info", 0, "b");
  buffer.Add("c", 0, "info", 0, "c");
  EXPECT_EQ(buffer.Pending("a"), 0u);
  EXPECT_EQ(buffer.Pending("b"), 1u);
  EXPECT_EQ(buffer.Pending("c"), 1u);
}

TEST(JobLogSinkTest, CapturesOnlyThreadsWithAJobContext) {
  JobLogBuffer buffer;
  spdlog::logger logger("test", NewJobLogSink(&buffer));
  logger.info("before any context");
  {
    ScopedJobLogContext ctx("job-7", 3);
    EXPECT_EQ(CurrentLogJob(), "job-7");
    logger.warn("stage {} started", 3);
    std::thread other([&] { logger.info("another thread, no context"); });
    other.join();
    {
      ScopedJobLogContext inner("job-8", 1);
      logger.info("nested");
    }
    EXPECT_EQ(CurrentLogJob(), "job-7");
    EXPECT_EQ(CurrentLogStage(), 3);
  }
  EXPECT_EQ(CurrentLogJob(), "");
  logger.info("after");
  std::vector<v1::LogLine> lines = buffer.Take("job-7");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].text(), "stage 3 started");
  EXPECT_EQ(lines[0].level(), "warning");
  EXPECT_EQ(lines[0].stage(), 3);
  EXPECT_GT(lines[0].time_ms(), 1600000000000);
  ASSERT_EQ(buffer.Take("job-8").size(), 1u);
}

}  // namespace
}  // namespace aqueduct
