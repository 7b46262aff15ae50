#include "coordinator/journal_keeper.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "coordinator/fake_job_events.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

v1::JournalRecord Submitted(const std::string& id) {
  v1::JournalRecord r;
  r.mutable_submitted()->set_job_id(id);
  return r;
}

v1::JournalRecord Finished(const std::string& id, JobState state) {
  v1::JournalRecord r;
  r.mutable_finished()->set_job_id(id);
  r.mutable_finished()->set_state(state);
  return r;
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

// What the file at `path` holds: "submitted <job>" or "finished <job>
// <state>", in order.
std::vector<std::string> Kept(const std::string& path) {
  auto contents = JobJournal::Read(path);
  EXPECT_TRUE(contents.ok()) << contents.status();
  std::vector<std::string> out;
  if (!contents.ok()) return out;
  for (const v1::JournalRecord& r : contents->records) {
    if (r.has_submitted()) out.push_back("submitted " + r.submitted().job_id());
    if (r.has_finished()) {
      out.push_back("finished " + r.finished().job_id() + " " +
                    JobStateName(r.finished().state()));
    }
  }
  return out;
}

class JournalKeeperTest : public ::testing::Test {
 protected:
  JournalKeeperTest()
      : jobs_("tag", 1), keeper_(&clock_, mu_, jobs_, events_) {}

  JobState StateOf(const std::string& id) {
    absl::MutexLock lock(&mu_);
    const Job* job = jobs_.Get(id);
    return job == nullptr ? v1::JOB_STATE_UNSPECIFIED : job->state;
  }
  std::string Error() {
    absl::MutexLock lock(&mu_);
    return keeper_.ErrorLocked();
  }
  bool RetryDue() {
    absl::MutexLock lock(&mu_);
    return keeper_.RetryDueLocked(clock_.Now());
  }

  FakeClock clock_;
  absl::Mutex mu_;
  JobTable jobs_;
  FakeJobEvents events_;
  JournalKeeper keeper_;
};

TEST_F(JournalKeeperTest, OpenRestoresTheJobsAndCompactsTheFile) {
  const std::string path = TempPath("keeper_open.journal");
  std::remove(path.c_str());
  ASSERT_TRUE(JobJournal::Create(path, {Submitted("done"), Submitted("waiting"),
                                        Finished("done", v1::JOB_SUCCEEDED),
                                        Finished("gone", v1::JOB_FAILED)})
                  .ok());
  EXPECT_EQ(keeper_.Journal(), nullptr);
  ASSERT_TRUE(keeper_.Open(path).ok());
  EXPECT_EQ(StateOf("done"), v1::JOB_SUCCEEDED);
  EXPECT_EQ(StateOf("waiting"), v1::JOB_PENDING);
  EXPECT_EQ(events_.calls, (std::vector<std::string>{"trim", "schedule"}));
  EXPECT_NE(keeper_.Journal(), nullptr);
  EXPECT_EQ(Error(), "");
  // A final status without its submission is not kept.
  EXPECT_EQ(Kept(path), (std::vector<std::string>{"submitted done",
                                                  "finished done "
                                                  "SUCCEEDED",
                                                  "submitted waiting"}));
}

TEST_F(JournalKeeperTest, SubmissionsAndFinalStatusesAreAppended) {
  const std::string path = TempPath("keeper_append.journal");
  std::remove(path.c_str());
  Job job;
  job.id = "j1";
  EXPECT_TRUE(keeper_.AppendSubmission(job).ok());  // No journal yet.
  ASSERT_TRUE(keeper_.Open(path).ok());
  ASSERT_TRUE(keeper_.AppendSubmission(job).ok());
  job.state = v1::JOB_CANCELLED;
  {
    absl::MutexLock lock(&mu_);
    keeper_.AppendFinishedLocked(job);
  }
  auto journal = keeper_.Journal();
  ASSERT_TRUE(journal->Append(Submitted("j2")).ok());  // After the async one.
  EXPECT_EQ(Kept(path),
            (std::vector<std::string>{"submitted j1", "finished j1 CANCELLED",
                                      "submitted j2"}));
}

// A directory that is not there stands for a full disk: the file cannot be
// rewritten, new jobs are refused until a retry, every 5 s, writes it.
TEST_F(JournalKeeperTest, AFileThatCannotBeWrittenIsRetriedUntilItIs) {
  const std::string dir = TempPath("keeper_missing");
  std::filesystem::remove_all(dir);
  const std::string path = dir + "/journal";
  ASSERT_TRUE(keeper_.Open(path).ok());
  EXPECT_EQ(keeper_.Journal(), nullptr);
  EXPECT_NE(Error(), "");
  EXPECT_FALSE(RetryDue());
  clock_.Advance(absl::Seconds(5));
  EXPECT_TRUE(RetryDue());
  keeper_.Retry();  // Still no room.
  EXPECT_EQ(keeper_.Journal(), nullptr);
  EXPECT_FALSE(RetryDue());
  {
    absl::MutexLock lock(&mu_);
    Job ended;
    ended.id = "ended";
    ended.state = v1::JOB_FAILED;
    jobs_.Add(std::move(ended));
  }
  std::filesystem::create_directories(dir);
  keeper_.Retry();
  EXPECT_NE(keeper_.Journal(), nullptr);
  EXPECT_EQ(Error(), "");
  EXPECT_FALSE(RetryDue());
  EXPECT_EQ(Kept(path), (std::vector<std::string>{"finished ended FAILED"}));
}

}  // namespace
}  // namespace aqueduct
