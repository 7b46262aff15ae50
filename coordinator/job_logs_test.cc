#include "coordinator/job_logs.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

std::string FreshDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir =
      std::string(tmp != nullptr ? tmp : "/tmp") + "/job_logs_" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

std::vector<v1::LogLine> Lines(int n, int stage, const std::string& prefix) {
  std::vector<v1::LogLine> lines(n);
  for (int i = 0; i < n; ++i) {
    lines[i].set_time_ms(1000 + i);
    lines[i].set_level("info");
    lines[i].set_worker("w" + std::to_string(stage));
    lines[i].set_stage(stage);
    lines[i].set_text(prefix + std::to_string(i));
  }
  return lines;
}

TEST(JobLogStoreTest, NumbersLinesAndReadsAfterASeq) {
  JobLogStore store;
  EXPECT_EQ(store.Append("j", Lines(3, 0, "a")), 3);
  EXPECT_EQ(store.AppendEvent("j", 5, "info", "job RUNNING"), 4);
  EXPECT_EQ(store.Append("j", Lines(2, 1, "b")), 6);
  std::vector<v1::LogLine> all = store.Read("j", 0, std::nullopt, 100);
  ASSERT_EQ(all.size(), 6u);
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i].seq(), i + 1);
  EXPECT_EQ(all[3].worker(), "coordinator");
  EXPECT_EQ(all[3].stage(), -1);
  std::vector<v1::LogLine> after = store.Read("j", 4, std::nullopt, 100);
  ASSERT_EQ(after.size(), 2u);
  EXPECT_EQ(after[0].text(), "b0");
  std::vector<v1::LogLine> stage1 = store.Read("j", 0, 1, 100);
  ASSERT_EQ(stage1.size(), 2u);
  EXPECT_EQ(store.Read("j", 0, std::nullopt, 2).size(), 2u);
  EXPECT_TRUE(store.Read("other", 0, std::nullopt, 100).empty());
}

TEST(JobLogStoreTest, KeepsTheLastLinesAndCutsLongOnes) {
  JobLogStore store({/*max_lines_per_job=*/5, /*max_line_bytes=*/4,
                     /*max_file_bytes=*/1 << 20});
  store.Append("j", Lines(12, 0, "line"));
  std::vector<v1::LogLine> kept = store.Read("j", 0, std::nullopt, 100);
  ASSERT_EQ(kept.size(), 5u);
  EXPECT_EQ(kept.front().seq(), 8);
  EXPECT_EQ(kept.back().seq(), 12);
  EXPECT_EQ(kept.back().text(), "line...");
  EXPECT_EQ(store.LastSeq("j"), 12);
}

TEST(JobLogStoreTest, ReloadsFromDiskWithTheSameSeqs) {
  const std::string dir = FreshDir("reload");
  {
    JobLogStore store;
    ASSERT_TRUE(store.Open(dir).ok());
    store.Append("job-1", Lines(4, 0, "x"));
    store.AppendEvent("job-1", 9, "warn", "restarted: worker w1 lost");
    ASSERT_TRUE(store.Sync("job-1").ok());
  }
  // A torn last write is skipped.
  std::ofstream(dir + "/job-1.log", std::ios::app) << "{\"seq\":\"6\",\"te";
  JobLogStore again;
  ASSERT_TRUE(again.Open(dir).ok());
  std::vector<v1::LogLine> lines = again.Read("job-1", 0, std::nullopt, 100);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[4].seq(), 5);
  EXPECT_EQ(lines[4].text(), "restarted: worker w1 lost");
  EXPECT_EQ(lines[4].level(), "warn");
  // Numbering goes on after a reload.
  EXPECT_EQ(again.AppendEvent("job-1", 10, "info", "SUCCEEDED"), 6);
  again.Remove("job-1");
  EXPECT_FALSE(std::filesystem::exists(dir + "/job-1.log"));
}

TEST(JobLogStoreTest, FileStaysUnderItsCap) {
  const std::string dir = FreshDir("cap");
  JobLogStore store({/*max_lines_per_job=*/10, /*max_line_bytes=*/100,
                     /*max_file_bytes=*/4096});
  ASSERT_TRUE(store.Open(dir).ok());
  for (int i = 0; i < 100; ++i) store.Append("j", Lines(5, 0, "some text "));
  const auto size = std::filesystem::file_size(dir + "/j.log");
  EXPECT_LE(size, 4096u);
  JobLogStore again;
  ASSERT_TRUE(again.Open(dir).ok());
  std::vector<v1::LogLine> lines = again.Read("j", 0, std::nullopt, 1000);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back().seq(), 500);
}

TEST(JobLogStoreTest, WaitWakesOnANewLineAndEndsAtItsDeadline) {
  JobLogStore store;
  store.Append("j", Lines(1, 0, "a"));
  EXPECT_TRUE(store.WaitForLines("j", 0, absl::Now()));
  const absl::Time start = absl::Now();
  EXPECT_FALSE(store.WaitForLines("j", 1, start + absl::Milliseconds(100)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(90));
  std::thread writer([&] {
    absl::SleepFor(absl::Milliseconds(50));
    store.Append("j", Lines(1, 0, "b"));
  });
  const absl::Time before = absl::Now();
  EXPECT_TRUE(store.WaitForLines("j", 1, before + absl::Seconds(10)));
  EXPECT_LT(absl::Now() - before, absl::Seconds(5));
  writer.join();
}

TEST(JobLogStoreTest, UnsafeJobIdsStayInMemory) {
  EXPECT_TRUE(IsFileSafeJobId("job-65a1b2c3-1-0123456789abcdef"));
  EXPECT_FALSE(IsFileSafeJobId("../etc"));
  EXPECT_FALSE(IsFileSafeJobId("a/b"));
  EXPECT_FALSE(IsFileSafeJobId(""));
}

}  // namespace
}  // namespace aqueduct
