// Tests of the job summary and progress line: no figures before the first
// report, and every line fits the terminal's width.
#include "client/progress.h"

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace aqueduct {
namespace {

JobStatus Job(JobState state) {
  JobStatus job;
  job.set_job_id("job-7");
  job.set_name("mlp");
  job.set_state(state);
  job.set_total_steps(32);
  return job;
}

JobStatus Reported() {
  JobStatus job = Job(v1::JOB_RUNNING);
  job.set_step(10);
  job.set_loss(0.6931);
  job.set_samples_per_second(123);
  StageStatus* stage = job.add_stages();
  stage->set_stage(0);
  stage->set_committed_version(10);
  stage->set_utilization(0.5);
  stage->set_step_ms_p50(3.25);
  return job;
}

TEST(JobSummaryTest, NoFiguresBeforeTheFirstReport) {
  const JobStatus running = Job(v1::JOB_RUNNING);
  EXPECT_FALSE(HasProgressReport(running));
  EXPECT_EQ(JobSummary(running),
            "job-7 mlp RUNNING waiting for the first report");
  EXPECT_EQ(JobSummary(Job(v1::JOB_PENDING)),
            "job-7 mlp PENDING waiting for workers");
  JobStatus queued = Job(v1::JOB_PENDING);
  queued.set_queue_position(2);
  queued.set_waiting_for("needs 3 workers, 1 idle; 1 job ahead");
  EXPECT_EQ(JobSummary(queued),
            "job-7 mlp PENDING #2 in the queue: needs 3 workers, 1 idle; 1 "
            "job ahead");
  EXPECT_EQ(JobSummary(Job(v1::JOB_PLANNING)), "job-7 mlp PLANNING planning");
  const std::string line = ProgressLine(running, 100);
  EXPECT_EQ(line.find("loss"), std::string::npos) << line;
  EXPECT_EQ(line.find("samples/s"), std::string::npos) << line;
  EXPECT_EQ(line.find('['), std::string::npos) << line;
}

TEST(JobSummaryTest, FiguresOnceReported) {
  EXPECT_EQ(JobSummary(Reported()),
            "job-7 mlp RUNNING step 10/32 loss 0.6931 123 samples/s | stage 0 "
            "v10 util 50% p50 3.2 ms");
  EXPECT_EQ(JobSummary(Reported(), /*with_stages=*/false),
            "job-7 mlp RUNNING step 10/32 loss 0.6931 123 samples/s");
}

TEST(JobSummaryTest, StalenessOfAParameterServer) {
  JobStatus job = Reported();
  for (int64_t c : {120, 30, 2})
    job.mutable_stages(0)->add_staleness_histogram(c);
  EXPECT_EQ(JobSummary(job),
            "job-7 mlp RUNNING step 10/32 loss 0.6931 123 samples/s | stage 0 "
            "v10 util 50% p50 3.2 ms staleness [120 30 2]");
}

TEST(JobSummaryTest, NoThroughputBeforeItIsMeasured) {
  JobStatus job = Reported();
  job.set_samples_per_second(0);
  EXPECT_EQ(JobSummary(job, /*with_stages=*/false),
            "job-7 mlp RUNNING step 10/32 loss 0.6931");
}

TEST(JobSummaryTest, NoTotalUntilTheWorkersReportIt) {
  JobStatus job = Reported();
  job.set_total_steps(0);
  job.set_samples_per_second(0);
  EXPECT_EQ(JobSummary(job, /*with_stages=*/false),
            "job-7 mlp RUNNING step 10 loss 0.6931");
  EXPECT_EQ(ProgressLine(job, 100).find('['), std::string::npos);
}

TEST(JobSummaryTest, FailureReason) {
  JobStatus failed = Job(v1::JOB_FAILED);
  failed.set_reason("worker w1 is DEAD");
  EXPECT_EQ(JobSummary(failed), "job-7 mlp FAILED: worker w1 is DEAD");
}

TEST(ProgressLineTest, FitsEveryWidth) {
  for (int width : {1, 10, 20, 40, 60, 80, 100, 200}) {
    for (const JobStatus& job : {Job(v1::JOB_RUNNING), Reported()}) {
      const std::string line = ProgressLine(job, width);
      EXPECT_LE(line.size(), static_cast<size_t>(std::max(width - 1, 10)))
          << width << ": " << line;
      EXPECT_EQ(line.find('\n'), std::string::npos);
    }
  }
}

TEST(ProgressLineTest, BarWhenThereIsRoom) {
  const std::string wide = ProgressLine(Reported(), 200);
  EXPECT_EQ(wide.rfind("[#########.....................] job-7", 0), 0u)
      << wide;
  // 80 columns: the stage figures go, a shorter bar stays.
  const std::string narrow = ProgressLine(Reported(), 80);
  EXPECT_EQ(narrow.find("stage 0"), std::string::npos) << narrow;
  EXPECT_EQ(narrow.rfind("[", 0), 0u) << narrow;
  // 60 columns: no room for a bar.
  EXPECT_EQ(ProgressLine(Reported(), 60),
            "job-7 mlp RUNNING step 10/32 loss 0.6931 123 samples/s");
}

TEST(JobDetailsTest, ModelCheckpointResumeAndRestarts) {
  EXPECT_EQ(JobDetails(Reported()), "");
  JobStatus job = Job(v1::JOB_SUCCEEDED);
  job.set_model_path("/var/lib/aq/models/job-7.safetensors");
  job.set_model_bytes(1234);
  job.set_checkpoint_version(40);
  job.set_checkpoint_path("/ckpt/job-7/v40");
  job.set_resumed_from("/ckpt/job-3/v20");
  v1::RestartRecord* r = job.add_restarts();
  r->set_attempt(1);
  r->set_step_at_failure(27);
  r->set_reason("worker w2 (stage 1, replica 0) is DEAD");
  r->set_rolled_back_to(20);
  r->set_workers(2);
  r = job.add_restarts();
  r->set_attempt(2);
  r->set_step_at_failure(3);
  r->set_reason("non-finite loss");
  r->set_workers(1);
  EXPECT_EQ(JobDetails(job),
            "model: /var/lib/aq/models/job-7.safetensors (1234 bytes) \u2014 "
            "fetch with: aq weights job-7 -o model.safetensors\n"
            "checkpoint: v40 /ckpt/job-7/v40\n"
            "resumed from: /ckpt/job-3/v20\n"
            "restart 1 at step 27: worker w2 (stage 1, replica 0) is DEAD; "
            "rolled back to v20, 2 workers\n"
            "restart 2 at step 3: non-finite loss; rolled back to v0 (the "
            "start), 1 worker\n");
}

TEST(JobDetailsTest, EvaluationsPerSplit) {
  JobStatus job = Job(v1::JOB_SUCCEEDED);
  job.set_eval_split("validation");
  job.set_test_loss(1.7319);
  for (int step : {1000, 2000}) {
    v1::EvalPoint* e = job.add_evals();
    e->set_step(step);
    e->set_loss(step == 1000 ? 2.1458 : 1.7319);
    e->set_accuracy(0.45);
  }
  EXPECT_EQ(JobDetails(job),
            "validation (step: loss, perplexity): 1000: 2.1458, 8.55; 2000: "
            "1.7319, 5.65\n");
  EXPECT_NE(JobSummary(job, false)
                .find("validation loss 1.7319 perplexity "
                      "5.65"),
            std::string::npos);
  job.set_eval_split("test");
  EXPECT_EQ(JobDetails(job),
            "test (step: loss, accuracy): 1000: 2.1458, 0.4500; 2000: "
            "1.7319, 0.4500\n");
}

TEST(TerminalWidthTest, ColumnsThenEighty) {
  // Under the test runner neither stdout nor stderr is a terminal.
  setenv("COLUMNS", "123", 1);
  EXPECT_EQ(TerminalWidth(-1), 123);
  setenv("COLUMNS", "junk", 1);
  EXPECT_EQ(TerminalWidth(-1), 80);
  unsetenv("COLUMNS");
  EXPECT_EQ(TerminalWidth(-1), 80);
}

}  // namespace
}  // namespace aqueduct
