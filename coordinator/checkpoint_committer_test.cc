#include "coordinator/checkpoint_committer.h"

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "common/checkpoint.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

std::string FreshDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir =
      std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

JobStatus StatusOf(const Job& job) {
  return aqueduct::StatusOf(
      job, [](const std::string&) { return v1::WORKER_HEALTHY; });
}

class CheckpointCommitterTest : public ::testing::Test {
 protected:
  CheckpointCommitterTest() : root_(FreshDir("ck")), jobs_("tag", 1) {
    auto roots = PathRoots::Make("--checkpoint_root", {root_});
    EXPECT_TRUE(roots.ok()) << roots.status();
    if (roots.ok()) options_.checkpoint_roots = *roots;
    executor_ = std::make_unique<BoundedExecutor>("the committer", 1, 10);
    committer_ = std::make_unique<CheckpointCommitter>(
        options_, &clock_, mu_, jobs_, logs_, [] { return nullptr; },
        *executor_);
    Job job;
    job.id = "j1";
    job.state = v1::JOB_RUNNING;
    job.spec.set_batch_size(8);
    job.spec.mutable_checkpoint()->set_dir(root_);
    job.has_plan = true;
    job.plan.add_stages();
    job.plan.add_stages();
    job.checkpoint_asked = clock_.Now();
    jobs_.Add(std::move(job));
  }

  // Stage `stage` reports its file of `version` durable.
  StageProgress Written(int stage, int64_t version) {
    StageProgress p;
    p.set_job_id("j1");
    p.set_stage(stage);
    CheckpointWritten* w = p.add_checkpoints();
    w->set_version(version);
    w->set_dir(CheckpointVersionDir(root_, "j1", version));
    w->mutable_file()->set_name(StageFileName(stage, 0));
    return p;
  }
  void Apply(const StageProgress& p) {
    absl::MutexLock lock(&mu_);
    committer_->ApplyLocked(jobs_.At("j1"), p);
  }
  // Runs what is queued, then joins the committer's thread.
  void Drain() { executor_.reset(); }
  Job& TheJob() { return jobs_.At("j1"); }

  const std::string root_;
  CoordinatorOptions options_;
  FakeClock clock_;
  absl::Mutex mu_;
  JobTable jobs_;
  JobLogStore logs_;
  std::unique_ptr<BoundedExecutor> executor_;
  std::unique_ptr<CheckpointCommitter> committer_;
};

TEST_F(CheckpointCommitterTest, CommitsOnceEveryStagesFileIsIn) {
  std::filesystem::create_directories(CheckpointVersionDir(root_, "j1", 5));
  Apply(Written(0, 5));
  EXPECT_EQ(TheJob().pending_files.count(5), 1u);
  Apply(Written(1, 5));
  EXPECT_TRUE(TheJob().pending_files.empty());
  Drain();
  ASSERT_EQ(TheJob().checkpoints.count(5), 1u);
  EXPECT_EQ(TheJob().checkpoints[5].files_size(), 2);
  EXPECT_TRUE(std::filesystem::exists(CheckpointVersionDir(root_, "j1", 5) +
                                      "/" + kManifestFileName));
  EXPECT_EQ(TheJob().version, 1);
}

TEST_F(CheckpointCommitterTest, OnlyReplicaZeroAndNewerVersionsCount) {
  StageProgress replica = Written(0, 5);
  replica.set_replica(1);
  Apply(replica);
  EXPECT_TRUE(TheJob().pending_files.empty());
  TheJob().checkpoints[7].set_version(7);
  Apply(Written(0, 6));
  EXPECT_TRUE(TheJob().pending_files.empty());
}

TEST_F(CheckpointCommitterTest, AManifestOutsideTheRootsIsNotCommitted) {
  StageProgress p0 = Written(0, 5), p1 = Written(1, 5);
  p0.mutable_checkpoints(0)->set_dir("/nonexistent/j1/v5");
  Apply(p0);
  Apply(p1);
  Drain();
  EXPECT_TRUE(TheJob().checkpoints.empty());
}

TEST_F(CheckpointCommitterTest, TimedCheckpointsAreAskedAheadOfTheStages) {
  TheJob().spec.mutable_checkpoint()->set_every_seconds(10);
  {
    absl::MutexLock lock(&mu_);
    committer_->RequestByTimeLocked(clock_.Now() + absl::Seconds(9), StatusOf);
  }
  EXPECT_EQ(TheJob().checkpoint_at, 0);
  {
    absl::MutexLock lock(&mu_);
    committer_->RequestByTimeLocked(clock_.Now() + absl::Seconds(10), StatusOf);
  }
  // Nothing reported yet: the pipeline's depth (2 stages) plus one.
  EXPECT_EQ(TheJob().checkpoint_at, 3);
}

TEST_F(CheckpointCommitterTest, TheDirectoryMustBeUnderTheRoots) {
  JobSpec spec;
  EXPECT_TRUE(committer_->CheckDir(spec).ok());
  spec.mutable_checkpoint()->set_dir(root_ + "/new");
  EXPECT_TRUE(committer_->CheckDir(spec).ok());
  spec.mutable_checkpoint()->set_dir("/elsewhere");
  EXPECT_EQ(committer_->CheckDir(spec).code(),
            absl::StatusCode::kPermissionDenied);
}

TEST_F(CheckpointCommitterTest, ResumingAJobWithoutCheckpointsIsNotFound) {
  const auto resolved = committer_->ResolveResume(JobSpec(), "j1");
  EXPECT_EQ(resolved.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(resolved.status().message(),
            "job 'j1' has no committed checkpoint");
  EXPECT_EQ(
      committer_->ResolveResume(JobSpec(), root_ + "/none").status().code(),
      absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace aqueduct
