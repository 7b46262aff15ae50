#include "coordinator/progress_checks.h"

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/checkpoint.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

ProgressBounds Bounds() {
  ProgressBounds b;
  b.total_steps = 3000;
  b.total_what = "the job's total steps";
  b.batch_size = 32;
  b.job_id = "job-1";
  b.attempt = 2;
  b.checkpoint_dir = "/ck";
  return b;
}

// A report a worker of stage 1 might send near the end of a job.
v1::StageProgress Good() {
  v1::StageProgress p;
  p.set_job_id("job-1");
  p.set_stage(1);
  p.set_attempt(2);
  p.set_committed_version(3000);
  p.set_minibatches_done(3000);
  p.set_total_steps(3000);
  p.add_in_flight()->set_minibatch(2999);
  p.add_step_ms(12.5);
  v1::LossPoint* l = p.add_losses();
  l->set_minibatch(2999);
  l->set_loss(0.25);
  l->set_samples(16);
  p.set_utilization(0.9);
  p.set_test_accuracy(0.75);
  p.set_test_loss(0.5);
  v1::EvalPoint* e = p.add_evals();
  e->set_step(3000);
  e->set_loss(kInf);  // A diverged evaluation, as measured.
  e->set_accuracy(0.1);
  v1::TraceEvent* t = p.add_events();
  t->set_name("F mb=12 v=3");
  t->set_track("compute");
  v1::LogLine* line = p.add_log_lines();
  line->set_level("warning");  // spdlog's name.
  line->set_time_ms(1700000000000);
  line->set_text("stage 1 starting\twith a tab, \xc3\xa9 and all");
  v1::CheckpointWritten* w = p.add_checkpoints();
  w->set_version(500);
  w->set_dir(CheckpointVersionDir("/ck", "job-1", 500));
  w->mutable_file()->set_name(StageFileName(1, 2));
  w->mutable_file()->set_stage(1);
  w->mutable_file()->set_layer_end(3);
  return p;
}

TEST(ProgressChecksTest, AGoodReportPasses) {
  const absl::Status s = CheckProgressValues(Good(), "stages[0]", Bounds());
  EXPECT_TRUE(s.ok()) << s;
}

TEST(ProgressChecksTest, AFailureCauseIsChecked) {
  v1::StageProgress p = Good();
  p.mutable_failure()->set_cause(v1::FAILURE_PEER_UNREACHABLE);
  p.mutable_failure()->set_peer_worker_id("w2");
  EXPECT_TRUE(CheckProgressValues(p, "stages[0]", Bounds()).ok());
  p.mutable_failure()->set_cause(static_cast<v1::FailureCause>(77));
  EXPECT_EQ(CheckProgressValues(p, "stages[0]", Bounds()).message(),
            "stages[0].failure.cause=77 is not a known cause");
  p.mutable_failure()->set_cause(v1::FAILURE_OTHER);
  p.mutable_failure()->set_peer_worker_id(std::string(129, 'w'));
  EXPECT_EQ(CheckProgressValues(p, "stages[0]", Bounds()).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ProgressChecksTest, FinishedOnlyAtTheFinalVersion) {
  v1::StageProgress p = Good();
  p.set_finished(true);
  EXPECT_TRUE(CheckProgressValues(p, "stages[0]", Bounds()).ok());
  p.set_committed_version(170);
  const absl::Status s = CheckProgressValues(p, "stages[0]", Bounds());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "stages[0].finished is true at committed_version 170; a stage "
            "finishes only at the final version, 3000 (the job's total "
            "steps)");
}

TEST(ProgressChecksTest, EachValueOutOfRangeIsNamed) {
  struct Case {
    std::string message;
    std::function<void(v1::StageProgress*)> spoil;
  };
  const Case cases[] = {
      {"stages[0].committed_version=9223372036854775807 is outside [0, 3000] "
       "(the job's total steps)",
       [](v1::StageProgress* p) {
         p->set_committed_version(std::numeric_limits<int64_t>::max());
       }},
      {"stages[0].minibatches_done=-1 is outside [0, 3000] (the job's total "
       "steps)",
       [](v1::StageProgress* p) { p->set_minibatches_done(-1); }},
      {"stages[0].utilization=-inf is not a finite number in [0, 1.05]",
       [](v1::StageProgress* p) { p->set_utilization(-kInf); }},
      {"stages[0].utilization=nan is not a finite number in [0, 1.05]",
       [](v1::StageProgress* p) { p->set_utilization(std::nan("")); }},
      {"stages[0].utilization=7 is not a finite number in [0, 1.05]",
       [](v1::StageProgress* p) { p->set_utilization(7); }},
      {"stages[0].test_accuracy=1.5 is not a finite number in [0, 1]",
       [](v1::StageProgress* p) { p->set_test_accuracy(1.5); }},
      {"stages[0].test_loss=-1 is negative (a loss is at least 0, or NaN)",
       [](v1::StageProgress* p) { p->set_test_loss(-1); }},
      {"stages[0].bytes_sent=-5 is outside [0, 9223372036854775807]",
       [](v1::StageProgress* p) { p->set_bytes_sent(-5); }},
      {"stages[0].error_code=99 is outside [0, 16]",
       [](v1::StageProgress* p) { p->set_error_code(99); }},
      {"stages[0].total_steps=-3 is outside [0, 1099511627776]",
       [](v1::StageProgress* p) { p->set_total_steps(-3); }},
      {"stages[0].in_flight[0].version=3001 is outside [0, 3000] (the job's "
       "total steps)",
       [](v1::StageProgress* p) {
         p->mutable_in_flight(0)->set_version(3001);
       }},
      {"stages[0].step_ms[0]=inf is not a finite number in [0, "
       "1.79769e+308]",
       [](v1::StageProgress* p) { p->set_step_ms(0, kInf); }},
      {"stages[0].losses[0].loss=nan is not a finite number in [0, "
       "1.79769e+308]",
       [](v1::StageProgress* p) {
         p->mutable_losses(0)->set_loss(std::nan(""));
       }},
      {"stages[0].losses[0].samples=33 is outside [0, 32] (the job's "
       "batch_size)",
       [](v1::StageProgress* p) { p->mutable_losses(0)->set_samples(33); }},
      {"stages[0].evals[0].accuracy=-0.5 is not a finite number in [0, 1]",
       [](v1::StageProgress* p) { p->mutable_evals(0)->set_accuracy(-0.5); }},
      {"stages[0].events[0].duration_us=-1 is outside [0, "
       "9223372036854775807]",
       [](v1::StageProgress* p) { p->mutable_events(0)->set_duration_us(-1); }},
      {"stages[0].checkpoints[0].version=0 is outside [1, 3000] (the job's "
       "total steps)",
       [](v1::StageProgress* p) { p->mutable_checkpoints(0)->set_version(0); }},
      {"stages[0].checkpoints[0].dir='/etc' is not "
       "'/ck/job-1/v00000500', the job's directory of that version",
       [](v1::StageProgress* p) {
         p->mutable_checkpoints(0)->set_dir("/etc");
       }},
      {"stages[0].checkpoints[0].file names '../../x' of stage 1; stage 1 of "
       "attempt 2 writes 'stage-1-a2.safetensors'",
       [](v1::StageProgress* p) {
         p->mutable_checkpoints(0)->mutable_file()->set_name("../../x");
       }},
  };
  for (const Case& c : cases) {
    v1::StageProgress p = Good();
    c.spoil(&p);
    const absl::Status s = CheckProgressValues(p, "stages[0]", Bounds());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_EQ(s.message(), c.message);
  }
}

TEST(ProgressChecksTest, BoundsOfStringsAndCounts) {
  v1::StageProgress p = Good();
  p.mutable_events(0)->set_name(std::string(4096, 'e'));
  absl::Status s = CheckProgressValues(p, "stages[3]", Bounds());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("stages[3].events[0].name has 4096 bytes; the "
                              "limit is 256",
                              0),
            0u)
      << s;
  p = Good();
  for (int i = 0; i < 1100; ++i) *p.add_checkpoints() = p.checkpoints(0);
  EXPECT_EQ(CheckProgressValues(p, "stages[0]", Bounds()).message(),
            "stages[0].checkpoints has 1101 entries; the limit is 1024");
  // A job without checkpoint.dir takes no checkpoint files.
  ProgressBounds none = Bounds();
  none.checkpoint_dir.clear();
  EXPECT_EQ(CheckProgressValues(Good(), "stages[0]", none).message(),
            "stages[0].checkpoints: job job-1 does not checkpoint (its spec "
            "sets no checkpoint.dir)");
}

// Log lines: counted, a known level, bounded text, a time.
TEST(ProgressChecksTest, LogLinesAreBounded) {
  v1::StageProgress p = Good();
  p.mutable_log_lines(0)->set_level(std::string(1000, 'x'));
  EXPECT_EQ(CheckProgressValues(p, "stages[0]", Bounds()).message(),
            absl::StrCat("stages[0].log_lines[0].level='", std::string(32, 'x'),
                         "' is not one of trace, debug, info, warn(ing), "
                         "error, critical"));
  p = Good();
  p.mutable_log_lines(0)->set_text(std::string(65537, 't'));
  EXPECT_EQ(CheckProgressValues(p, "stages[0]", Bounds()).message(),
            "stages[0].log_lines[0].text has 65537 bytes; the limit is 65536");
  p = Good();
  p.mutable_log_lines(0)->set_time_ms(-1);
  EXPECT_NE(CheckProgressValues(p, "stages[0]", Bounds())
                .message()
                .find("stages[0].log_lines[0].time_ms"),
            std::string::npos);
  p = Good();
  for (int i = 0; i < 8192; ++i) *p.add_log_lines() = p.log_lines(0);
  EXPECT_EQ(CheckProgressValues(p, "stages[0]", Bounds()).message(),
            "stages[0].log_lines has 8193 entries; the limit is 8192");
}

// Issue 22, item 11: a worker's line with ESC[2J or CR/LF was printed raw by
// `aq logs`. The coordinator escapes it (refusing would drop the report's
// progress); a tab and UTF-8 stay; the line stays within its bound.
TEST(ProgressChecksTest, LogLinesAreEscapedNotRefused) {
  v1::StageProgress p = Good();
  p.mutable_log_lines(0)->set_text(
      "\x1b[2J\x1b[Hstep 3\tok\r\n2026-01-01 INFO coordinator: forged \xc3\xa9"
      "\xc2\x9b\xff\x07");
  v1::LogLine* nul = p.add_log_lines();
  *nul = p.log_lines(0);
  nul->set_text(std::string("a\0b", 3));
  v1::LogLine* fine = p.add_log_lines();
  *fine = Good().log_lines(0);
  EscapeLogLines(&p);
  EXPECT_EQ(p.log_lines(0).text(),
            "\\x1b[2J\\x1b[Hstep 3\tok\\x0d\\x0a2026-01-01 INFO coordinator: "
            "forged \xc3\xa9\\xc2\\x9b\\xff\\x07");
  EXPECT_EQ(p.log_lines(1).text(), "a\\x00b");
  EXPECT_EQ(p.log_lines(2).text(), Good().log_lines(0).text());
  EXPECT_TRUE(CheckProgressValues(p, "stages[0]", Bounds()).ok());
  // An escaped line is cut to 4 KB (the coordinator keeps 2 KB of a line);
  // one over the bound is left for the check to refuse.
  p = Good();
  p.mutable_log_lines(0)->set_text(std::string(65536, '\x1b'));
  EscapeLogLines(&p);
  EXPECT_EQ(p.log_lines(0).text().size(), kMaxEscapedLogLineBytes);
  EXPECT_EQ(p.log_lines(0).text().substr(0, 8), "\\x1b\\x1b");
  EXPECT_TRUE(CheckProgressValues(p, "stages[0]", Bounds()).ok());
  p.mutable_log_lines(0)->set_text(std::string(65537, '\x1b'));
  EscapeLogLines(&p);
  EXPECT_EQ(p.log_lines(0).text(), std::string(65537, '\x1b'));
  EXPECT_FALSE(CheckProgressValues(p, "stages[0]", Bounds()).ok());
}

}  // namespace
}  // namespace aqueduct
