#include "coordinator/journal.h"

#include <fstream>

#include "common/fault_file_system.h"
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

// A crash at any byte of an append loses at most the records not yet
// durable: a reader gets a prefix of the records and names the offset of
// the torn one; the append that was cut fails and so does every later one.
TEST(JobJournalTest, AWriteCutAtAnyByteLeavesAReadablePrefix) {
  const std::string path = "/state/jobs.journal";
  std::vector<v1::JournalRecord> later = {Submitted("b"), Submitted("c"),
                                          Submitted("d")};
  std::string header;
  {
    FaultFileSystem fs;
    ASSERT_TRUE(JobJournal::Create(&fs, path, {Submitted("a")}).ok());
    header = fs.Contents(path);
  }
  int64_t full = 0;
  for (int64_t cut = 0;; ++cut) {
    FaultFileSystem fs;
    auto journal = JobJournal::Create(&fs, path, {Submitted("a")});
    ASSERT_TRUE(journal.ok()) << journal.status();
    fs.CutWritesAfter(cut);
    size_t appended = 0;
    for (const auto& r : later) {
      if (!(*journal)->Append(r).ok()) break;
      ++appended;
    }
    journal->reset();
    auto contents = JobJournal::Read(&fs, path);
    ASSERT_TRUE(contents.ok()) << contents.status();
    ASSERT_EQ(contents->records.size(), 1 + appended) << "cut at " << cut;
    for (size_t i = 1; i < contents->records.size(); ++i) {
      EXPECT_EQ(contents->records[i].submitted().job_id(),
                later[i - 1].submitted().job_id());
    }
    const int64_t size = static_cast<int64_t>(fs.Contents(path).size());
    EXPECT_EQ(contents->ignored_bytes + contents->ignored_at,
              contents->ignored_bytes > 0 ? size : contents->ignored_at);
    if (appended == later.size()) {
      full = cut;
      break;
    }
    EXPECT_EQ(size, static_cast<int64_t>(header.size()) + cut);
  }
  EXPECT_GT(full, 30);  // Every byte offset of the three appends was tried.
}

TEST(JobJournalTest, AFailedSyncBreaksTheJournal) {
  FaultFileSystem fs;
  auto journal = JobJournal::Create(&fs, "/j", {});
  ASSERT_TRUE(journal.ok());
  ASSERT_TRUE((*journal)->Append(Submitted("a")).ok());
  fs.FailSyncs(true);
  EXPECT_EQ((*journal)->Append(Submitted("b")).code(),
            absl::StatusCode::kUnavailable);
  fs.FailSyncs(false);
  const absl::Status after = (*journal)->Append(Submitted("c"));
  EXPECT_FALSE(after.ok());
  EXPECT_NE(after.message().find("/j"), std::string::npos);
}

TEST(JobJournalTest, ACorruptRecordStopsTheReaderAtItsOffset) {
  FaultFileSystem fs;
  ASSERT_TRUE(
      JobJournal::Create(&fs, "/j", {Submitted("a"), Submitted("b")}).ok());
  std::string bytes = fs.Contents("/j");
  const size_t second = 4 + 8 + Submitted("a").ByteSizeLong();
  bytes[second + 8] ^= 0x01;  // A bit of the second record's body.
  fs.SetContents("/j", bytes);
  auto contents = JobJournal::Read(&fs, "/j");
  ASSERT_TRUE(contents.ok());
  EXPECT_EQ(contents->records.size(), 1u);
  EXPECT_EQ(contents->ignored_at, static_cast<int64_t>(second));
}

TEST(JobJournalTest, AsyncAppendsAreDurableAfterFlush) {
  FaultFileSystem fs;
  auto journal = JobJournal::Create(&fs, "/j", {});
  ASSERT_TRUE(journal.ok());
  for (int i = 0; i < 20; ++i) {
    (*journal)->AppendAsync(Submitted(absl::StrCat(i)));
  }
  ASSERT_TRUE((*journal)->Flush().ok());
  EXPECT_EQ(JobJournal::Read(&fs, "/j")->records.size(), 20u);
}

}  // namespace
}  // namespace aqueduct
