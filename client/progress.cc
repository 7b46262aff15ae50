#include "client/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/terminal_text.h"

namespace aqueduct {
namespace {

constexpr int kDefaultWidth = 80;

int WidthOf(int fd) {
  struct winsize ws;
  if (ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 0;
}

// "JOB_RUNNING" -> "RUNNING".
std::string StateName(JobState s) { return v1::JobState_Name(s).substr(4); }

// What a job without a progress report is doing.
std::string Waiting(const JobStatus& job) {
  switch (job.state()) {
    case v1::JOB_PENDING:
      if (job.queue_position() > 0) {
        return absl::StrCat("#", job.queue_position(),
                            " in the queue: ", Printable(job.waiting_for()));
      }
      return "waiting for workers";
    case v1::JOB_PLANNING:
      return "planning";
    case v1::JOB_RUNNING:
      return "waiting for the first report";
    default:
      return "";  // Finished before any report: the reason says why.
  }
}

std::string Figures(const JobStatus& job, bool with_stages) {
  // The total is unknown until a worker that holds the data reports it.
  std::string out =
      job.total_steps() > 0
          ? absl::StrFormat(" step %d/%d loss %.4f", job.step(),
                            job.total_steps(), job.loss())
          : absl::StrFormat(" step %d loss %.4f", job.step(), job.loss());
  // Throughput is measured after a few warm-up steps.
  if (job.samples_per_second() > 0) {
    absl::StrAppend(
        &out, absl::StrFormat(" %.0f samples/s", job.samples_per_second()));
  }
  if (!with_stages) return out;
  for (const StageStatus& s : job.stages()) {
    absl::StrAppend(&out,
                    absl::StrFormat(" | stage %d v%d util %.0f%% p50 %.1f ms",
                                    s.stage(), s.committed_version(),
                                    100 * s.utilization(), s.step_ms_p50()));
    if (s.staleness_histogram_size() > 0) {
      // Data parallelism's parameter server: how stale its updates were.
      absl::StrAppend(&out, " staleness [",
                      absl::StrJoin(s.staleness_histogram(), " "), "]");
    }
  }
  return out;
}

}  // namespace

int TerminalWidth(int fd) {
  for (const int candidate : {fd, STDERR_FILENO, STDOUT_FILENO}) {
    if (const int width = WidthOf(candidate); width > 0) return width;
  }
  const char* columns = std::getenv("COLUMNS");
  int width = 0;
  if (columns != nullptr && absl::SimpleAtoi(columns, &width) && width > 0) {
    return width;
  }
  return kDefaultWidth;
}

bool HasProgressReport(const JobStatus& job) {
  return job.step() > 0 || job.loss() != 0 || job.samples_per_second() > 0;
}

std::string JobSummary(const JobStatus& job, bool with_stages) {
  // Names and reasons come from users and workers: shown escaped.
  std::string line =
      absl::StrCat(Printable(job.job_id()), " ", Printable(job.name()), " ",
                   StateName(job.state()));
  if (HasProgressReport(job)) {
    absl::StrAppend(&line, Figures(job, with_stages));
  } else if (const std::string waiting = Waiting(job); !waiting.empty()) {
    absl::StrAppend(&line, " ", waiting);
  }
  if (job.state() == v1::JOB_SUCCEEDED && job.eval_split() == "validation") {
    absl::StrAppend(
        &line, absl::StrFormat(" validation loss %.4f perplexity %.2f",
                               job.test_loss(), std::exp(job.test_loss())));
  } else if (job.state() == v1::JOB_SUCCEEDED && job.test_accuracy() > 0) {
    absl::StrAppend(
        &line, absl::StrFormat(" test accuracy %.4f", job.test_accuracy()));
  }
  if (!job.reason().empty()) {
    absl::StrAppend(&line, ": ", Printable(job.reason()));
  }
  return line;
}

std::string JobDetails(const JobStatus& job) {
  std::string out;
  if (!job.evals().empty()) {
    // Text: loss per token and perplexity; a test set: loss and accuracy.
    const bool text = job.eval_split() == "validation";
    absl::StrAppend(&out, Printable(job.eval_split()), " (step: loss, ",
                    text ? "perplexity" : "accuracy", "):");
    for (const v1::EvalPoint& e : job.evals()) {
      absl::StrAppend(&out, absl::StrFormat(" %d: %.4f, ", e.step(), e.loss()),
                      text ? absl::StrFormat("%.2f;", std::exp(e.loss()))
                           : absl::StrFormat("%.4f;", e.accuracy()));
    }
    out.back() = '\n';
  }
  if (!job.model_path().empty()) {
    absl::StrAppend(&out, "model: ", Printable(job.model_path()), " (",
                    job.model_bytes(), " bytes) \u2014 fetch with: aq weights ",
                    Printable(job.job_id()), " -o model.safetensors\n");
  }
  if (job.checkpoint_version() > 0 || !job.checkpoint_path().empty()) {
    absl::StrAppend(&out, "checkpoint: v", job.checkpoint_version(), " ",
                    Printable(job.checkpoint_path()), "\n");
  }
  if (!job.resumed_from().empty()) {
    absl::StrAppend(&out, "resumed from: ", Printable(job.resumed_from()),
                    "\n");
  }
  for (const v1::RestartRecord& r : job.restarts()) {
    absl::StrAppend(
        &out, "restart ", r.attempt(), " at step ", r.step_at_failure(), ": ",
        Printable(r.reason()), "; rolled back to v", r.rolled_back_to(),
        r.rolled_back_to() == 0 ? " (the start)" : "", ", ", r.workers(),
        r.workers() == 1 ? " worker" : " workers", "\n");
  }
  for (const v1::ToleratedLoss& l : job.tolerated_losses()) {
    absl::StrAppend(&out, "lost at step ", l.step(),
                    ", tolerated: ", Printable(l.reason()),
                    "; the job goes on without its share\n");
  }
  return out;
}

std::string FitLine(double fraction, const std::string& text, int width) {
  const size_t room = static_cast<size_t>(std::max(width - 1, 10));
  std::string line = text;
  // A bar of 10 to 30 cells when there is room for it.
  const size_t free = room > text.size() + 3 ? room - text.size() - 3 : 0;
  const size_t bar = std::min<size_t>(free, 30);
  if (fraction >= 0 && bar >= 10) {
    const size_t filled =
        static_cast<size_t>(bar * std::clamp(fraction, 0.0, 1.0));
    line = absl::StrCat("[", std::string(filled, '#'),
                        std::string(bar - filled, '.'), "] ", text);
  }
  if (line.size() > room) line.resize(room);
  return line;
}

void DrawInPlace(FILE* out, const std::string& line) {
  std::fprintf(out, "\r%s\x1b[K", line.c_str());
  std::fflush(out);
}

std::string ProgressLine(const JobStatus& job, int width) {
  std::string text = JobSummary(job, /*with_stages=*/true);
  if (text.size() + 1 > static_cast<size_t>(width)) {
    text = JobSummary(job, /*with_stages=*/false);
  }
  const double fraction = HasProgressReport(job) && job.total_steps() > 0
                              ? static_cast<double>(job.step()) /
                                    static_cast<double>(job.total_steps())
                              : -1;
  return FitLine(fraction, text, width);
}

ProgressDisplay::ProgressDisplay(FILE* out, bool plain_lines)
    : out_(out), tty_(isatty(fileno(out)) != 0), plain_lines_(plain_lines) {}

void ProgressDisplay::Update(const JobStatus& job) {
  if (tty_) {
    DrawInPlace(out_, ProgressLine(job, TerminalWidth(fileno(out_))));
    drawn_ = true;
  } else if (plain_lines_) {
    const std::string line = JobSummary(job);
    if (line == last_) return;
    std::fprintf(out_, "%s\n", line.c_str());
    std::fflush(out_);
    last_ = line;
  }
}

void ProgressDisplay::Finish() {
  if (!drawn_) return;
  DrawInPlace(out_, "");
  drawn_ = false;
}

}  // namespace aqueduct
