#include "coordinator/journal.h"

#include <zlib.h>

#include <algorithm>
#include <fstream>

#include "absl/strings/str_cat.h"
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

v1::JournalRecord Finished(const std::string& id, v1::JobState state) {
  v1::JournalRecord r;
  r.mutable_finished()->set_job_id(id);
  r.mutable_finished()->set_state(state);
  r.mutable_finished()->set_reason("reason of " + id);
  return r;
}

v1::JournalRecord Started(const std::string& id) {
  v1::JournalRecord r;
  r.mutable_started()->set_job_id(id);
  r.mutable_started()->set_started_ms(1700000000000);
  return r;
}

v1::JournalRecord Checkpoint(const std::string& id, int64_t version) {
  v1::JournalRecord r;
  r.mutable_checkpoint()->set_job_id(id);
  r.mutable_checkpoint()->set_version(version);
  r.mutable_checkpoint()->set_dir("/ckpt/" + id);
  return r;
}

const std::string& IdOf(const v1::JournalRecord& r) {
  if (r.has_submitted()) return r.submitted().job_id();
  if (r.has_finished()) return r.finished().job_id();
  if (r.has_started()) return r.started().job_id();
  return r.checkpoint().job_id();
}

// 106 records of 28 jobs (ids of several lengths), interleaved as a
// coordinator writes them: submissions, starts, checkpoints and final
// statuses, the last jobs still unfinished.
std::vector<v1::JournalRecord> ManyRecords() {
  const v1::JobState kEnds[] = {v1::JOB_SUCCEEDED, v1::JOB_CANCELLED,
                                v1::JOB_FAILED};
  auto id = [](int i) {
    return absl::StrCat("job-", i, std::string(i % 5, 'x'));
  };
  std::vector<v1::JournalRecord> out;
  for (int i = 0; i < 28; ++i) {
    out.push_back(Submitted(id(i)));
    if (i >= 1) out.push_back(Started(id(i - 1)));
    if (i >= 2) out.push_back(Checkpoint(id(i - 2), i));
    if (i >= 3) out.push_back(Finished(id(i - 3), kEnds[i % 3]));
  }
  return out;
}

// Where each record of an intact journal begins and ends, and where its
// header ends (the format: 23 fixed bytes, from the sync word to the
// header CRC, plus the job id).
struct Layout {
  std::vector<int64_t> begin, header_end, end;
};

Layout LayoutOf(FaultFileSystem* fs, const std::string& path,
                const std::vector<v1::JournalRecord>& records) {
  auto contents = JobJournal::Read(fs, path);
  EXPECT_TRUE(contents.ok());
  EXPECT_TRUE(contents->damaged.empty());
  EXPECT_EQ(contents->offsets.size(), records.size());
  Layout l;
  l.begin = contents->offsets;
  const int64_t size = static_cast<int64_t>(fs->Contents(path).size());
  for (size_t i = 0; i < records.size(); ++i) {
    l.header_end.push_back(l.begin[i] + 23 +
                           static_cast<int64_t>(IdOf(records[i]).size()));
    l.end.push_back(i + 1 < records.size() ? l.begin[i + 1] : size);
  }
  return l;
}

std::string Bytes(const v1::JournalRecord& r) { return r.SerializeAsString(); }

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

// 4 bytes corrupted at any offset of a journal of 106 records (every
// record boundary, every header field, the middle of every body): every
// record the damage did not touch is read back, in order, nothing after
// the damage is lost; a touched record is either read back whole (only
// its sync word was hit) or lies in a damaged region that names its job
// whenever its header survived; every region reported overlaps the
// damage. The reader before AQJ3 stopped at the first bad record and lost
// every record after it.
TEST(JobJournalTest, FourCorruptBytesAnywhereLoseOnlyTheRecordTheyHit) {
  const std::vector<v1::JournalRecord> records = ManyRecords();
  ASSERT_EQ(records.size(), 106u);
  FaultFileSystem fs;
  ASSERT_TRUE(JobJournal::Create(&fs, "/j", records).ok());
  const std::string intact = fs.Contents("/j");
  const Layout l = LayoutOf(&fs, "/j", records);
  for (int64_t at = 0; at + 4 <= static_cast<int64_t>(intact.size()); ++at) {
    std::string bytes = intact;
    for (int64_t k = at; k < at + 4; ++k) bytes[k] ^= 0xa5;
    fs.SetContents("/j", bytes);
    auto contents = JobJournal::Read(&fs, "/j");
    ASSERT_TRUE(contents.ok());
    auto hit = [at](int64_t b, int64_t e) { return b < at + 4 && at < e; };
    for (const JournalDamage& d : contents->damaged) {
      ASSERT_TRUE(hit(d.offset, d.offset + d.bytes))
          << "at " << at << ": region at " << d.offset << " of " << d.bytes;
    }
    size_t got = 0;
    for (size_t i = 0; i < records.size(); ++i) {
      if (got < contents->records.size() &&
          Bytes(contents->records[got]) == Bytes(records[i])) {
        EXPECT_EQ(contents->offsets[got], l.begin[i]);
        ++got;
        continue;
      }
      ASSERT_TRUE(hit(l.begin[i], l.end[i]))
          << "at " << at << ": record " << i << " (untouched) was lost";
      const bool header_survived = !hit(l.begin[i] + 8, l.header_end[i]);
      bool reported = false;
      for (const JournalDamage& d : contents->damaged) {
        if (d.offset <= l.begin[i] && l.end[i] <= d.offset + d.bytes) {
          reported = !header_survived ||
                     (d.offset == l.begin[i] && d.job_id == IdOf(records[i]) &&
                      d.kind == records[i].kind_case());
        }
      }
      EXPECT_TRUE(reported) << "at " << at << ": record " << i;
    }
    ASSERT_EQ(got, contents->records.size()) << "at " << at;
    const bool tail =
        !contents->damaged.empty() &&
        contents->damaged.back().offset + contents->damaged.back().bytes ==
            static_cast<int64_t>(bytes.size());
    EXPECT_EQ(contents->ignored_at,
              tail ? contents->damaged.back().offset : int64_t{-1})
        << "at " << at;
    EXPECT_TRUE(!tail || hit(l.begin.back(), l.end.back())) << "at " << at;
  }
}

// A journal cut at any byte (a torn append, or a file that lost its end):
// every whole record before the cut is read back; the cut one is the
// ignored tail, named by job when its header is whole.
TEST(JobJournalTest, ATruncatedJournalKeepsEveryWholeRecordAndNamesTheCutOne) {
  const std::vector<v1::JournalRecord> records = ManyRecords();
  FaultFileSystem fs;
  ASSERT_TRUE(JobJournal::Create(&fs, "/j", records).ok());
  const std::string intact = fs.Contents("/j");
  const Layout l = LayoutOf(&fs, "/j", records);
  for (int64_t cut = 4; cut < static_cast<int64_t>(intact.size()); ++cut) {
    fs.SetContents("/j", intact.substr(0, cut));
    auto contents = JobJournal::Read(&fs, "/j");
    ASSERT_TRUE(contents.ok());
    size_t whole = 0;
    while (whole < records.size() && l.end[whole] <= cut) ++whole;
    ASSERT_EQ(contents->records.size(), whole) << "cut at " << cut;
    for (size_t i = 0; i < whole; ++i) {
      EXPECT_EQ(Bytes(contents->records[i]), Bytes(records[i]));
    }
    if (whole < records.size() && l.begin[whole] < cut) {
      ASSERT_EQ(contents->damaged.size(), 1u) << "cut at " << cut;
      const JournalDamage& d = contents->damaged[0];
      EXPECT_EQ(d.offset, l.begin[whole]);
      EXPECT_EQ(d.bytes, cut - l.begin[whole]);
      EXPECT_EQ(d.job_id,
                cut >= l.header_end[whole] ? IdOf(records[whole]) : "")
          << "cut at " << cut;
      EXPECT_EQ(contents->ignored_at, l.begin[whole]);
      EXPECT_EQ(contents->ignored_bytes, cut - l.begin[whole]);
    } else {
      EXPECT_TRUE(contents->damaged.empty()) << "cut at " << cut;
      EXPECT_EQ(contents->ignored_at, -1);
    }
  }
}

// A false sync word inside a body (here, a whole forged record held in a
// field of raw bytes; string fields cannot hold the sync word, which is
// not UTF-8) is never taken for a record while the record holding it
// reads, nor when only that record's body is damaged (its header gives
// its end).
TEST(JobJournalTest, ASyncWordInsideABodyIsNotARecord) {
  FaultFileSystem fs;
  ASSERT_TRUE(
      JobJournal::Create(&fs, "/f", {Finished("victim", v1::JOB_SUCCEEDED)})
          .ok());
  const std::string forged = fs.Contents("/f").substr(4);
  ASSERT_LT(forged.size(), 128u);
  // Field 15, length-delimited (kept by the parser as an unknown field).
  v1::JournalRecord carrier;
  ASSERT_TRUE(carrier.ParseFromString(Bytes(Submitted("carrier")) + "z" +
                                      static_cast<char>(forged.size()) +
                                      forged));
  const std::vector<v1::JournalRecord> records = {
      Submitted("victim"), carrier, Finished("carrier", v1::JOB_CANCELLED)};
  ASSERT_TRUE(JobJournal::Create(&fs, "/j", records).ok());
  const Layout l = LayoutOf(&fs, "/j", records);
  std::string bytes = fs.Contents("/j");
  bytes[l.header_end[1] + 1] ^= 0x01;  // The carrier's body, before the name.
  fs.SetContents("/j", bytes);
  auto contents = JobJournal::Read(&fs, "/j");
  ASSERT_TRUE(contents.ok());
  ASSERT_EQ(contents->records.size(), 2u);
  EXPECT_EQ(Bytes(contents->records[0]), Bytes(records[0]));
  EXPECT_EQ(Bytes(contents->records[1]), Bytes(records[2]));
  ASSERT_EQ(contents->damaged.size(), 1u);
  EXPECT_EQ(contents->damaged[0].offset, l.begin[1]);
  EXPECT_EQ(contents->damaged[0].bytes, l.end[1] - l.begin[1]);
  EXPECT_EQ(contents->damaged[0].job_id, "carrier");
  EXPECT_EQ(contents->damaged[0].kind, v1::JournalRecord::kSubmitted);
  EXPECT_EQ(contents->ignored_at, -1);
}

// Journals written by earlier versions still read, and a damaged AQJ2
// record still stops that reader at its offset (AQJ2 has no sync words).
TEST(JobJournalTest, OlderFormatsAreRead) {
  std::string v2 = "AQJ2", v1_bytes;
  std::vector<int64_t> v2_offsets;
  for (const char* id : {"a", "b", "c"}) {
    const std::string body = Submitted(id).SerializeAsString();
    std::string len, crc;
    for (int i = 0; i < 4; ++i) {
      len.push_back(static_cast<char>(body.size() >> (8 * i)));
      crc.push_back(static_cast<char>(
          crc32(0L, reinterpret_cast<const Bytef*>(body.data()),
                static_cast<uInt>(body.size())) >>
          (8 * i)));
    }
    v2_offsets.push_back(static_cast<int64_t>(v2.size()));
    v2 += len + crc + body;
    v1_bytes += len + body;
  }
  FaultFileSystem fs;
  fs.SetContents("/v1", v1_bytes);
  EXPECT_EQ(JobJournal::Read(&fs, "/v1")->records.size(), 3u);
  fs.SetContents("/v2", v2);
  auto contents = JobJournal::Read(&fs, "/v2");
  ASSERT_TRUE(contents.ok());
  ASSERT_EQ(contents->records.size(), 3u);
  EXPECT_EQ(contents->records[2].submitted().job_id(), "c");
  EXPECT_TRUE(contents->damaged.empty());
  v2[v2_offsets[1] + 9] ^= 0x01;  // A bit of b's body.
  fs.SetContents("/v2", v2);
  contents = JobJournal::Read(&fs, "/v2");
  ASSERT_TRUE(contents.ok());
  EXPECT_EQ(contents->records.size(), 1u);
  EXPECT_EQ(contents->ignored_at, v2_offsets[1]);
  ASSERT_EQ(contents->damaged.size(), 1u);
  EXPECT_EQ(contents->damaged[0].offset, v2_offsets[1]);
  // Create upgrades it: the records it is given are written as AQJ3.
  ASSERT_TRUE(JobJournal::Create(&fs, "/v2", contents->records).ok());
  EXPECT_EQ(fs.Contents("/v2").substr(0, 4), "AQJ3");
  EXPECT_EQ(JobJournal::Read(&fs, "/v2")->records.size(), 1u);
}

// The restore rule: a job that lost a record is FAILED unless a final
// status of it survived; one whose submission was lost keeps its place.
TEST(JobJournalTest, JobsThatLostARecordAreFailedUnlessTheirEndSurvived) {
  const std::vector<v1::JournalRecord> records = {
      Submitted("kept"),                       // 0
      Submitted("ended"),                      // 1
      Started("ended"),                        // 2: damaged
      Finished("ended", v1::JOB_CANCELLED),    // 3
      Submitted("ran"),                        // 4
      Started("ran"),                          // 5
      Finished("ran", v1::JOB_CANCELLED),      // 6: damaged
      Submitted("gone"),                       // 7: damaged
      Submitted("orphan"),                     // 8: header damaged
      Finished("orphan", v1::JOB_SUCCEEDED)};  // 9
  FaultFileSystem fs;
  ASSERT_TRUE(JobJournal::Create(&fs, "/j", records).ok());
  const Layout l = LayoutOf(&fs, "/j", records);
  std::string bytes = fs.Contents("/j");
  for (int i : {2, 6, 7}) bytes[l.end[i] - 1] ^= 0x01;  // Bodies.
  bytes[l.begin[8] + 9] ^= 0x01;                        // A header.
  fs.SetContents("/j", bytes);
  auto contents = JobJournal::Read(&fs, "/j");
  ASSERT_TRUE(contents.ok());
  ASSERT_EQ(contents->damaged.size(), 4u);
  EXPECT_EQ(contents->records.size(), 6u);
  const LostJobs lost = FailJobsWithLostRecords(&*contents, "/j.copy");
  EXPECT_EQ(lost.failed, (std::vector<std::string>{"gone", "ran"}));
  EXPECT_EQ(lost.kept, (std::vector<std::string>{"ended", "orphan"}));
  std::vector<std::string> got;
  for (const v1::JournalRecord& r : contents->records) {
    got.push_back(absl::StrCat(r.kind_case(), ":", IdOf(r)));
  }
  EXPECT_EQ(got, (std::vector<std::string>{"1:kept", "1:ended", "2:ended",
                                           "1:ran", "3:ran", "2:ran", "1:gone",
                                           "2:gone", "1:orphan", "2:orphan"}));
  ASSERT_EQ(contents->offsets.size(), contents->records.size());
  EXPECT_TRUE(
      std::is_sorted(contents->offsets.begin(), contents->offsets.end()));
  const v1::JobStatus& ran = contents->records[5].finished();
  EXPECT_EQ(ran.state(), v1::JOB_FAILED);
  EXPECT_EQ(ran.name(), "job ran");
  EXPECT_EQ(ran.reason(),
            absl::StrCat("its journal record at byte ", l.begin[6],
                         " of /j.copy was damaged, so its last state is "
                         "unknown; it is not run again"));
  EXPECT_EQ(contents->records[7].finished().state(), v1::JOB_FAILED);
  const std::string line = DescribeDamage(*contents, lost);
  EXPECT_NE(line.find(absl::StrCat("bytes [", l.begin[6], ", ", l.end[6],
                                   "): the final status of job ran")),
            std::string::npos)
      << line;
  EXPECT_NE(line.find(absl::StrCat("bytes [", l.begin[8], ", ", l.end[8],
                                   "): header unreadable")),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("now FAILED: gone, ran;"), std::string::npos) << line;
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
