// How aq shows a job: the one-line summary (`aq status`, `aq jobs`), the
// details under it (`aq status JOB`), and the
// live progress display of `aq submit --wait` and `aq watch`, which fits the
// terminal's width and redraws one line in place on a terminal, or prints
// plain lines when the output is not a terminal. No figures are shown
// before the job's first progress report. Not thread-safe.
#ifndef AQUEDUCT_CLIENT_PROGRESS_H_
#define AQUEDUCT_CLIENT_PROGRESS_H_

#include <cstdio>
#include <string>

#include "proto/service_types.h"

namespace aqueduct {

// The width of the terminal on `fd` (ioctl TIOCGWINSZ), else of stderr or
// stdout, else $COLUMNS, else 80.
int TerminalWidth(int fd);

// Whether the job has reported any progress yet (a step, a loss or a
// throughput).
bool HasProgressReport(const JobStatus& job);

// "job-1 mlp RUNNING step 10/32 loss 0.6931 123 samples/s | stage 0 ...";
// before the first report, what the job is waiting for instead of figures.
// `with_stages`: include the per-stage figures.
// The coordinator's strings in it (and in JobDetails) are Printable()
// (terminal_text.h): a name or reason cannot drive the terminal.
std::string JobSummary(const JobStatus& job, bool with_stages = true);

// What `aq status JOB` prints under the summary, one line each ("\n"
// after each), for what is set: the trained model and how to fetch it,
// the latest checkpoint, the checkpoint the job resumed from, and every
// restart. Empty when none is.
std::string JobDetails(const JobStatus& job);

// "[####......] text" fitting in width - 1 columns: the bar (10 to 30
// cells) only when there is room, the text cut when it is too long.
// `fraction` < 0: no bar.
std::string FitLine(double fraction, const std::string& text, int width);

// Redraws the current line of terminal `out`: "\r", `line`, "\x1b[K"
// (clear to the end of the line).
void DrawInPlace(FILE* out, const std::string& line);

// The progress line for a terminal `width` columns wide: a bar when there
// is room, then the summary, shortened to fit in width - 1 columns.
std::string ProgressLine(const JobStatus& job, int width);

class ProgressDisplay {
 public:
  // Shows progress on `out`: redrawn in place ("\r", the line, "\x1b[K")
  // when `out` is a terminal; otherwise one plain line per change when
  // `plain_lines`, else nothing.
  ProgressDisplay(FILE* out, bool plain_lines);

  void Update(const JobStatus& job);
  // Clears the in-place line, if one was drawn.
  void Finish();
  // Whether updates are drawn in place (a terminal).
  bool in_place() const { return tty_; }

 private:
  FILE* out_;
  bool tty_;
  bool plain_lines_;
  bool drawn_ = false;
  std::string last_;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_CLIENT_PROGRESS_H_
