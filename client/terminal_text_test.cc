// Printable: what aq prints of the coordinator's strings (issue 22, item
// 11), and the places that print them: a job's summary and details.
#include "client/terminal_text.h"

#include <string>

#include "client/progress.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

TEST(PrintableTest, ControlCharactersBecomeVisibleEscapes) {
  EXPECT_EQ(Printable("mlp-3 caf\xc3\xa9 \xe2\x82\xac"),
            "mlp-3 caf\xc3\xa9 \xe2\x82\xac");
  EXPECT_EQ(Printable("loss\t0.5"), "loss\t0.5");
  EXPECT_EQ(Printable("\x1b[2J\x1b[H"), "\\x1b[2J\\x1b[H");
  EXPECT_EQ(Printable("a\r\nINFO forged"), "a\\x0d\\x0aINFO forged");
  EXPECT_EQ(Printable(std::string("nul\0", 4)), "nul\\x00");
  EXPECT_EQ(Printable("\x1b]0;owned\x07"), "\\x1b]0;owned\\x07");
  EXPECT_EQ(Printable("del\x7f"), "del\\x7f");
  EXPECT_EQ(Printable("csi\xc2\x9b"
                      "2J"),
            "csi\\xc2\\x9b2J");
  EXPECT_EQ(Printable("latin1 \xe9t\xe9"), "latin1 \\xe9t\\xe9");
  // A lone C1 byte (0x9b is CSI to some terminals) is not UTF-8.
  EXPECT_EQ(Printable("\x9b"
                      "2J"),
            "\\x9b2J");
}

TEST(PrintableTest, LinesKeepTheirBreaks) {
  EXPECT_EQ(PrintableLines("stage 0: a\x1b[31m\nstage 1: b\r\n"),
            "stage 0: a\\x1b[31m\nstage 1: b\\x0d\n");
  EXPECT_EQ(PrintableLines(""), "");
}

// What `aq jobs`, `aq status` and `aq watch` print of a job whose name,
// reason and paths came from others.
TEST(PrintableTest, JobSummaryAndDetailsEscapeTheCoordinatorsStrings) {
  JobStatus job;
  job.set_job_id("job-7");
  job.set_name("n\x1b[2J");
  job.set_state(v1::JOB_FAILED);
  job.set_reason("stage 0 on worker w1 failed: boom\r\n\x1b[32mjob SUCCEEDED");
  job.set_checkpoint_version(3);
  job.set_checkpoint_path("/ck/\x1b]0;x\x07");
  job.set_resumed_from("job-1\n");
  v1::RestartRecord* r = job.add_restarts();
  r->set_attempt(1);
  r->set_reason("worker w2 is DEAD\x1b[A");
  r->set_workers(1);
  const std::string summary = JobSummary(job);
  EXPECT_EQ(summary,
            "job-7 n\\x1b[2J FAILED: stage 0 on worker w1 failed: "
            "boom\\x0d\\x0a\\x1b[32mjob SUCCEEDED");
  const std::string details = JobDetails(job);
  EXPECT_EQ(details,
            "checkpoint: v3 /ck/\\x1b]0;x\\x07\n"
            "resumed from: job-1\\x0a\n"
            "restart 1 at step 0: worker w2 is DEAD\\x1b[A; rolled back to v0 "
            "(the start), 1 worker\n");
  EXPECT_EQ(ProgressLine(job, 400).find('\x1b'), std::string::npos);
}

}  // namespace
}  // namespace aqueduct
