#include "coordinator/job_table.h"

#include "gtest/gtest.h"

namespace aqueduct {
namespace {

Job NewJob(const std::string& id, JobState state = v1::JOB_PENDING,
           const std::string& owner = "") {
  Job job;
  job.id = id;
  job.state = state;
  job.owner = owner;
  return job;
}

JobStatus IdOnly(const Job& job) {
  JobStatus s;
  s.set_job_id(job.id);
  return s;
}

TEST(JobTableTest, FindIsNotFoundQuotingTheId) {
  JobTable table("tag", 1);
  table.Add(NewJob("a"));
  ASSERT_TRUE(table.Find("a").ok());
  EXPECT_EQ((*table.Find("a"))->id, "a");
  const absl::Status missing = table.Find("nope").status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.message(), "job 'nope' does not exist");
  EXPECT_EQ(table.Get("nope"), nullptr);
}

// A unique prefix of 8 characters or more finds its job; an ambiguous one
// lists some of what it matches.
TEST(JobTableTest, FindTakesAUniquePrefix) {
  JobTable table("tag", 1);
  table.Add(NewJob("job-6b0a-1-aaaa"));
  table.Add(NewJob("job-6b0a-2-bbbb"));
  table.Add(NewJob("job-6b0a-21-cccc"));
  ASSERT_TRUE(table.Find("job-6b0a-1").ok());
  EXPECT_EQ((*table.Find("job-6b0a-1"))->id, "job-6b0a-1-aaaa");
  EXPECT_EQ((*table.Find("job-6b0a-21"))->id, "job-6b0a-21-cccc");
  EXPECT_EQ(table.Find("job-6b").status().code(),
            absl::StatusCode::kNotFound);  // Too short to be a prefix.
  const absl::Status two = table.Find("job-6b0a-2").status();
  EXPECT_EQ(two.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(two.message(),
            "job id prefix job-6b0a-2 matches several jobs (job-6b0a-2-bbbb, "
            "job-6b0a-21-cccc): give more of it");
  EXPECT_EQ(table.Find("job-6b0a-3").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(JobTableTest, AddKeepsSubmissionOrder) {
  JobTable table("tag", 1);
  table.Add(NewJob("b"));
  table.Add(NewJob("a"));
  EXPECT_EQ(table.order(), (std::vector<std::string>{"b", "a"}));
  EXPECT_EQ(table.At("b").seq, 0);
  EXPECT_EQ(table.At("a").seq, 1);
}

TEST(JobTableTest, AdmitCountsPendingAndAdmittingJobs) {
  JobTable table("tag", 1);
  QueueLimits limits;
  limits.max_pending = 2;
  limits.max_per_user = 10;
  table.Add(NewJob("p1"));
  auto first = table.Admit("alice", limits);
  ASSERT_TRUE(first.ok()) << first.status();
  // One pending and one being admitted: the queue is full.
  EXPECT_EQ(table.Admit("bob", limits).status().code(),
            absl::StatusCode::kResourceExhausted);
  table.EndAdmission("alice");
  auto again = table.Admit("bob", limits);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_NE(*again, *first);
}

TEST(JobTableTest, AdmitCountsTheOwnersUnfinishedJobs) {
  JobTable table("tag", 1);
  QueueLimits limits;
  limits.max_per_user = 1;
  table.Add(NewJob("r1", v1::JOB_RUNNING, "alice"));
  table.Add(NewJob("f1", v1::JOB_SUCCEEDED, "bob"));
  EXPECT_EQ(table.Admit("alice", limits).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(table.Admit("bob", limits).ok());
}

TEST(JobTableTest, IdsDrawnFollowRestoredOnes) {
  JobTable table("tag", 1);
  auto id = table.Admit("", QueueLimits());
  ASSERT_TRUE(id.ok());
  table.EndAdmission("");
  Job restored = NewJob(*id, v1::JOB_SUCCEEDED);
  table.Add(std::move(restored));
  auto next = table.Admit("", QueueLimits());
  ASSERT_TRUE(next.ok());
  EXPECT_NE(*next, *id);
  EXPECT_FALSE(table.Contains(*next));
}

TEST(JobTableTest, TrimFinishedRemovesTheOldestFinishedOnly) {
  JobTable table("tag", 1);
  table.Add(NewJob("f1", v1::JOB_SUCCEEDED));
  table.Add(NewJob("p1", v1::JOB_PENDING));
  table.Add(NewJob("f2", v1::JOB_FAILED));
  table.Add(NewJob("f3", v1::JOB_CANCELLED));
  EXPECT_EQ(table.TrimFinished(1), (std::vector<std::string>{"f1", "f2"}));
  EXPECT_EQ(table.order(), (std::vector<std::string>{"p1", "f3"}));
  EXPECT_TRUE(table.TrimFinished(1).empty());
}

TEST(JobTableTest, PagesFollowSubmissionOrder) {
  JobTable table("tag", 7);
  for (const char* id : {"c", "a", "b"}) table.Add(NewJob(id));
  auto first = table.Page(2, "", 1 << 20, IdOnly);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->jobs.size(), 2u);
  EXPECT_EQ(first->jobs[0].job_id(), "c");
  EXPECT_EQ(first->jobs[1].job_id(), "a");
  ASSERT_FALSE(first->next_page_token.empty());
  auto second = table.Page(2, first->next_page_token, 1 << 20, IdOnly);
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_EQ(second->jobs.size(), 1u);
  EXPECT_EQ(second->jobs[0].job_id(), "b");
  EXPECT_TRUE(second->next_page_token.empty());
  // A token of another run is refused.
  JobTable other("tag", 8);
  EXPECT_EQ(
      other.Page(2, first->next_page_token, 1 << 20, IdOnly).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table.Page(-1, "", 1 << 20, IdOnly).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(JobTableTest, PageBytesBoundTheStatusesButNotTheFirst) {
  JobTable table("tag", 1);
  for (const char* id : {"a", "b"}) table.Add(NewJob(id));
  auto page = table.Page(10, "", 1, IdOnly);
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(page->jobs.size(), 1u);
  EXPECT_FALSE(page->next_page_token.empty());
}

TEST(JobTableTest, CompactionKeepsRecordsOfTheJobsKept) {
  JobTable table("tag", 1);
  table.Add(NewJob("run", v1::JOB_RUNNING));
  Job done = NewJob("done", v1::JOB_SUCCEEDED);
  done.restored = true;
  done.snapshot.set_job_id("done");
  table.Add(std::move(done));
  JournalIndex index;
  index.submitted["run"].set_job_id("run");
  index.submitted["done"].set_job_id("done");
  index.submitted["gone"].set_job_id("gone");
  index.started["run"].resize(2);
  index.started["done"].resize(1);
  table.At("run").checkpoints[4].set_version(4);
  const std::vector<v1::JournalRecord> kept = table.Compaction(index);
  // run: submitted, two starts, a checkpoint; done: submitted, finished.
  ASSERT_EQ(kept.size(), 6u);
  EXPECT_TRUE(kept[0].has_submitted());
  EXPECT_TRUE(kept[1].has_started());
  EXPECT_TRUE(kept[2].has_started());
  EXPECT_EQ(kept[3].checkpoint().version(), 4);
  EXPECT_EQ(kept[4].submitted().job_id(), "done");
  EXPECT_EQ(kept[5].finished().job_id(), "done");
}

}  // namespace
}  // namespace aqueduct
