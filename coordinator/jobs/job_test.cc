#include "coordinator/jobs/job.h"

#include "gtest/gtest.h"

namespace aqueduct {
namespace {

v1::CheckpointManifest Manifest(int64_t version, const std::string& dir) {
  v1::CheckpointManifest m;
  m.set_version(version);
  m.set_dir(dir);
  return m;
}

TEST(JobTest, RestorePointIsTheLatestCommittedElseTheResumedOne) {
  Job job;
  EXPECT_EQ(RestorePoint(job), nullptr);
  job.resume = Manifest(5, "/ck/resumed");
  ASSERT_NE(RestorePoint(job), nullptr);
  EXPECT_EQ(RestorePoint(job)->dir(), "/ck/resumed");
  job.checkpoints[10] = Manifest(10, "/ck/v10");
  job.checkpoints[20] = Manifest(20, "/ck/v20");
  ASSERT_NE(RestorePoint(job), nullptr);
  EXPECT_EQ(RestorePoint(job)->version(), 20);
}

TEST(JobTest, WhereInJobNamesTheStageAndReplica) {
  Job job;
  job.stage_workers = {{"w0"}, {"w1", "w2"}};
  EXPECT_EQ(WhereInJob(job, "w2"), "stage 1, replica 1");
  EXPECT_EQ(WhereInJob(job, "w9"), "reserved for the job");
}

TEST(JobTest, OutputStageNeedsAPlan) {
  Job job;
  EXPECT_FALSE(IsOutputStage(job, 0));
  job.has_plan = true;
  job.plan.add_stages();
  job.plan.add_stages();
  EXPECT_FALSE(IsOutputStage(job, 0));
  EXPECT_TRUE(IsOutputStage(job, 1));
}

TEST(JobTest, SubmissionRecordRoundTrips) {
  Job job;
  job.id = "job-1";
  job.owner = "alice";
  job.spec.set_name("tiny");
  job.spec.set_batch_size(8);
  job.spec.mutable_fault_tolerance()->set_max_restarts(7);
  job.submitted = absl::FromUnixMillis(1234);
  job.total_steps = 16;
  const v1::JournalRecord r = SubmissionRecord(job);
  ASSERT_TRUE(r.has_submitted());
  const Job back = JobFromSubmission(r.submitted(), absl::FromUnixSeconds(9));
  EXPECT_EQ(back.id, "job-1");
  EXPECT_EQ(back.owner, "alice");
  EXPECT_EQ(back.spec.name(), "tiny");
  EXPECT_EQ(back.submitted, absl::FromUnixMillis(1234));
  EXPECT_EQ(back.pending_since, absl::FromUnixSeconds(9));
  EXPECT_EQ(back.total_steps, 16);
  EXPECT_EQ(back.max_restarts, 7);
  EXPECT_EQ(back.state, v1::JOB_PENDING);
}

TEST(JobTest, FinishedJobShowsItsSnapshotWithTheOwner) {
  v1::JobSubmitted sub;
  sub.set_job_id("job-2");
  sub.set_owner("bob");
  JobStatus snapshot;
  snapshot.set_state(v1::JOB_FAILED);
  snapshot.set_reason("out of memory");
  const Job job = FinishedJob(sub, snapshot);
  EXPECT_TRUE(job.restored);
  EXPECT_EQ(job.state, v1::JOB_FAILED);
  const JobStatus shown =
      StatusOf(job, [](const std::string&) { return v1::WORKER_HEALTHY; });
  EXPECT_EQ(shown.owner(), "bob");
  EXPECT_EQ(shown.reason(), "out of memory");
}

TEST(JobTest, AdoptedJobRunsItsLatestAttemptAwaitingItsWorkers) {
  v1::JobStarted first, second;
  first.set_attempt(0);
  second.set_attempt(1);
  second.mutable_restart()->set_reason("worker w9 died");
  second.add_stages()->add_worker_ids("w1");
  v1::StagePeers* last = second.add_stages();
  last->add_worker_ids("w2");
  last->add_worker_ids("w3");
  const absl::Time now = absl::FromUnixSeconds(100);
  const Job job = AdoptedJob(Job(), {first, second}, now);
  EXPECT_EQ(job.state, v1::JOB_RUNNING);
  EXPECT_EQ(job.attempt, 1);
  ASSERT_EQ(job.restarts.size(), 1u);
  EXPECT_EQ(job.restarts[0].reason(), "worker w9 died");
  EXPECT_EQ(job.stage_workers.size(), 2u);
  EXPECT_EQ(job.reserved, (std::vector<std::string>{"w1", "w2", "w3"}));
  EXPECT_EQ(job.awaiting, (std::set<std::string>{"w1", "w2", "w3"}));
  EXPECT_EQ(job.adopted_at, now);
  EXPECT_EQ(job.checkpoint_asked, now);
  // The restart's first step is not logged again by this coordinator.
  EXPECT_TRUE(job.stepped_since_restart);
}

TEST(JobTest, StartRecordHasThePlanWorkersAndLastRestart) {
  Job job;
  job.id = "job-3";
  job.attempt = 2;
  job.stage_workers = {{"w1"}, {"w2"}};
  v1::RestartRecord r;
  r.set_attempt(2);
  job.restarts = {r};
  const v1::JournalRecord record = StartRecord(job);
  ASSERT_TRUE(record.has_started());
  EXPECT_EQ(record.started().attempt(), 2);
  ASSERT_EQ(record.started().stages_size(), 2);
  EXPECT_EQ(record.started().stages(1).worker_ids(0), "w2");
  EXPECT_EQ(record.started().restart().attempt(), 2);
}

}  // namespace
}  // namespace aqueduct
