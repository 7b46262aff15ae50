#include "coordinator/journal.h"

#include <fstream>

#include "gtest/gtest.h"

namespace aqueduct {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

v1::JournalRecord Submitted(const std::string& id) {
  v1::JournalRecord r;
  r.mutable_submitted()->set_job_id(id);
  r.mutable_submitted()->mutable_spec()->set_name("job " + id);
  return r;
}

TEST(JobJournalTest, RecordsSurviveReopening) {
  const std::string path = TempPath("round_trip.journal");
  auto journal = JobJournal::Create(path, {Submitted("a")});
  ASSERT_TRUE(journal.ok()) << journal.status();
  ASSERT_TRUE((*journal)->Append(Submitted("b")).ok());
  v1::JournalRecord done;
  done.mutable_finished()->set_job_id("a");
  done.mutable_finished()->set_state(v1::JOB_SUCCEEDED);
  ASSERT_TRUE((*journal)->Append(done).ok());
  journal->reset();
  auto contents = JobJournal::Read(path);
  ASSERT_TRUE(contents.ok()) << contents.status();
  ASSERT_EQ(contents->records.size(), 3u);
  EXPECT_EQ(contents->records[1].submitted().spec().name(), "job b");
  EXPECT_EQ(contents->records[2].finished().state(), v1::JOB_SUCCEEDED);
  EXPECT_EQ(contents->ignored_bytes, 0);
  // Compacting keeps only what it is given.
  auto again = JobJournal::Create(path, {contents->records[2]});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(JobJournal::Read(path)->records.size(), 1u);
}

TEST(JobJournalTest, TornTailIsIgnoredAndCounted) {
  const std::string path = TempPath("torn.journal");
  ASSERT_TRUE(JobJournal::Create(path, {Submitted("a"), Submitted("b")}).ok());
  {
    std::ofstream out(path, std::ios::binary | std::ios::app);
    out.write("\x40\x00\x00\x00partial", 11);  // Claims 64 bytes, has 7.
  }
  auto contents = JobJournal::Read(path);
  ASSERT_TRUE(contents.ok());
  EXPECT_EQ(contents->records.size(), 2u);
  EXPECT_EQ(contents->ignored_bytes, 11);
}

TEST(JobJournalTest, MissingFileIsEmptyAndBadDirectoryIsAnError) {
  auto none = JobJournal::Read(TempPath("never_written.journal"));
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->records.empty());
  auto bad = JobJournal::Create("/nonexistent-dir/jobs.journal", {});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(bad.status().message().find("/nonexistent-dir/jobs.journal"),
            std::string::npos);
}

}  // namespace
}  // namespace aqueduct
