#include "coordinator/progress_checks.h"

#include <cmath>
#include <limits>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "common/checkpoint.h"
#include "common/status.h"
#include "coordinator/input_checks.h"

namespace aqueduct {

namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr double kDoubleMax = std::numeric_limits<double>::max();
// Trace events: a name ("F mb=12 v=3") and a track ("compute").
constexpr size_t kMaxEventNameBytes = 256;
constexpr size_t kMaxEventTrackBytes = 64;
// Checkpoint files reported at once.
constexpr int kMaxCheckpointsPerReport = 1024;
constexpr int kMaxLogLinesPerReport = 8192;
constexpr size_t kMaxLogLineBytes = 64 * 1024;
// spdlog's names ("warning"), and the coordinator's own ("warn").
constexpr absl::string_view kLogLevels[] = {
    "trace", "debug", "info", "warn", "warning", "error", "critical"};

absl::Status CheckCount(const std::string& field, int n, int max) {
  if (n <= max) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, " has ", n, " entries; the limit is ", max));
}

// An evaluation's loss: non-negative, or NaN or +inf as measured.
absl::Status CheckEvalLoss(const std::string& field, double loss) {
  if (std::isnan(loss) || loss >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      field, "=", loss, " is negative (a loss is at least 0, or NaN)"));
}

// A typed failure cause: a known cause, and ids of worker-id size.
absl::Status CheckFailure(const v1::StageFailure& f, const std::string& at) {
  if (!v1::FailureCause_IsValid(f.cause())) {
    return absl::InvalidArgumentError(
        absl::StrCat(at, ".cause=", f.cause(), " is not a known cause"));
  }
  constexpr size_t kMaxIdBytes = 128;
  if (f.peer_worker_id().size() > kMaxIdBytes ||
      f.job_id().size() > kMaxIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(at, ": an id longer than ", kMaxIdBytes, " bytes"));
  }
  if (f.checkpoint_version() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        at, ".checkpoint_version=", f.checkpoint_version(), " is negative"));
  }
  return absl::OkStatus();
}

// A stage finishes at the job's final version and at no other: a report
// that says finished earlier (and would fix the job's final figures) is
// refused.
absl::Status CheckFinishedAtTheEnd(const v1::StageProgress& p,
                                   const std::string& at,
                                   const ProgressBounds& b) {
  if (!p.finished() || b.total_steps <= 0 ||
      p.committed_version() == b.total_steps) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      at, ".finished is true at committed_version ", p.committed_version(),
      "; a stage finishes only at the final version, ", b.total_steps, " (",
      b.total_what, ")"));
}

absl::Status CheckCounters(const v1::StageProgress& p, const std::string& at,
                           const ProgressBounds& b) {
  const int64_t total = b.total_steps;
  RETURN_IF_ERROR(
      CheckInt(at + ".total_steps", p.total_steps(), 0, kMaxUnknownTotalSteps));
  RETURN_IF_ERROR(CheckInt(at + ".committed_version", p.committed_version(), 0,
                           total, b.total_what));
  RETURN_IF_ERROR(CheckInt(at + ".minibatches_done", p.minibatches_done(), 0,
                           total, b.total_what));
  RETURN_IF_ERROR(
      CheckFinite(at + ".utilization", p.utilization(), 0, kMaxUtilization));
  const std::pair<const char*, int64_t> sizes[] = {
      {"bytes_sent", p.bytes_sent()},
      {"bytes_received", p.bytes_received()},
      {"peak_rss_bytes", p.peak_rss_bytes()},
      {"stashed_weight_bytes", p.stashed_weight_bytes()},
      {"stashed_activation_bytes", p.stashed_activation_bytes()},
      {"peak_stashed_versions", p.peak_stashed_versions()},
      {"peak_in_flight", p.peak_in_flight()},
      {"reported_ms", p.reported_ms()},
  };
  for (const auto& [field, value] : sizes) {
    RETURN_IF_ERROR(
        CheckInt(absl::StrCat(at, ".", field), value, 0, kInt64Max));
  }
  RETURN_IF_ERROR(
      CheckInt(at + ".error_code", p.error_code(), 0,
               static_cast<int>(absl::StatusCode::kUnauthenticated)));
  RETURN_IF_ERROR(CheckFinite(at + ".test_accuracy", p.test_accuracy(), 0, 1));
  RETURN_IF_ERROR(CheckEvalLoss(at + ".test_loss", p.test_loss()));
  RETURN_IF_ERROR(CheckFailure(p.failure(), at + ".failure"));
  return CheckFinishedAtTheEnd(p, at, b);
}

absl::Status CheckSeries(const v1::StageProgress& p, const std::string& at,
                         const ProgressBounds& b) {
  const int64_t total = b.total_steps;
  RETURN_IF_ERROR(
      CheckCount(at + ".in_flight", p.in_flight_size(), kMaxReportEntries));
  for (int i = 0; i < p.in_flight_size(); ++i) {
    const std::string f = absl::StrCat(at, ".in_flight[", i, "]");
    RETURN_IF_ERROR(CheckInt(f + ".minibatch", p.in_flight(i).minibatch(), 0,
                             total, b.total_what));
    RETURN_IF_ERROR(CheckInt(f + ".version", p.in_flight(i).version(), 0, total,
                             b.total_what));
  }
  RETURN_IF_ERROR(
      CheckCount(at + ".step_ms", p.step_ms_size(), kMaxReportEntries));
  for (int i = 0; i < p.step_ms_size(); ++i) {
    RETURN_IF_ERROR(CheckFinite(absl::StrCat(at, ".step_ms[", i, "]"),
                                p.step_ms(i), 0, kDoubleMax));
  }
  RETURN_IF_ERROR(
      CheckCount(at + ".losses", p.losses_size(), kMaxReportEntries));
  for (int i = 0; i < p.losses_size(); ++i) {
    const v1::LossPoint& l = p.losses(i);
    const std::string f = absl::StrCat(at, ".losses[", i, "]");
    RETURN_IF_ERROR(
        CheckInt(f + ".minibatch", l.minibatch(), 0, total, b.total_what));
    RETURN_IF_ERROR(CheckFinite(f + ".loss", l.loss(), 0, kDoubleMax));
    RETURN_IF_ERROR(CheckInt(f + ".samples", l.samples(), 0,
                             std::max<int64_t>(b.batch_size, 0),
                             "the job's batch_size"));
  }
  RETURN_IF_ERROR(CheckCount(at + ".evals", p.evals_size(), kMaxReportEntries));
  for (int i = 0; i < p.evals_size(); ++i) {
    const v1::EvalPoint& e = p.evals(i);
    const std::string f = absl::StrCat(at, ".evals[", i, "]");
    RETURN_IF_ERROR(CheckInt(f + ".step", e.step(), 0, total, b.total_what));
    RETURN_IF_ERROR(CheckEvalLoss(f + ".loss", e.loss()));
    RETURN_IF_ERROR(CheckFinite(f + ".accuracy", e.accuracy(), 0, 1));
  }
  return absl::OkStatus();
}

absl::Status CheckEvents(const v1::StageProgress& p, const std::string& at) {
  RETURN_IF_ERROR(
      CheckCount(at + ".events", p.events_size(), kMaxReportEntries));
  for (int i = 0; i < p.events_size(); ++i) {
    const v1::TraceEvent& e = p.events(i);
    const std::string f = absl::StrCat(at, ".events[", i, "]");
    RETURN_IF_ERROR(CheckText(f + ".name", e.name(), kMaxEventNameBytes));
    RETURN_IF_ERROR(CheckText(f + ".track", e.track(), kMaxEventTrackBytes));
    RETURN_IF_ERROR(CheckInt(f + ".start_us", e.start_us(), 0, kInt64Max));
    RETURN_IF_ERROR(
        CheckInt(f + ".duration_us", e.duration_us(), 0, kInt64Max));
  }
  return absl::OkStatus();
}

// Log lines (aq logs): as many as a worker's per-job ring holds (with
// room), a known level, bounded text (the store cuts it further), a time.
absl::Status CheckLogLines(const v1::StageProgress& p, const std::string& at) {
  RETURN_IF_ERROR(
      CheckCount(at + ".log_lines", p.log_lines_size(), kMaxLogLinesPerReport));
  for (int i = 0; i < p.log_lines_size(); ++i) {
    const v1::LogLine& l = p.log_lines(i);
    const std::string f = absl::StrCat(at, ".log_lines[", i, "]");
    if (!absl::c_linear_search(kLogLevels, l.level())) {
      return absl::InvalidArgumentError(absl::StrCat(
          f, ".level=", Quoted(l.level().substr(0, 32)),
          " is not one of trace, debug, info, warn(ing), error, critical"));
    }
    if (l.text().size() > kMaxLogLineBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(f, ".text has ", l.text().size(),
                       " bytes; the limit is ", kMaxLogLineBytes));
    }
    RETURN_IF_ERROR(CheckInt(f + ".time_ms", l.time_ms(), 0, kInt64Max));
  }
  return absl::OkStatus();
}

// The coordinator writes a version's manifest into the directory a stage
// reports: it must be the job's own version directory, and the file the
// stage's own.
absl::Status CheckCheckpoints(const v1::StageProgress& p, const std::string& at,
                              const ProgressBounds& b) {
  if (p.checkpoints_size() == 0) return absl::OkStatus();
  RETURN_IF_ERROR(CheckCount(at + ".checkpoints", p.checkpoints_size(),
                             kMaxCheckpointsPerReport));
  if (b.checkpoint_dir.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(at, ".checkpoints: job ", b.job_id,
                     " does not checkpoint (its spec sets no checkpoint.dir)"));
  }
  for (int i = 0; i < p.checkpoints_size(); ++i) {
    const v1::CheckpointWritten& w = p.checkpoints(i);
    const std::string f = absl::StrCat(at, ".checkpoints[", i, "]");
    RETURN_IF_ERROR(
        CheckInt(f + ".version", w.version(), 1, b.total_steps, b.total_what));
    const std::string dir =
        CheckpointVersionDir(b.checkpoint_dir, b.job_id, w.version());
    if (w.dir() != dir) {
      return absl::InvalidArgumentError(
          absl::StrCat(f, ".dir=", Quoted(w.dir()), " is not ", Quoted(dir),
                       ", the job's directory of that version"));
    }
    const std::string name = StageFileName(p.stage(), b.attempt);
    if (w.file().name() != name || w.file().stage() != p.stage()) {
      return absl::InvalidArgumentError(
          absl::StrCat(f, ".file names ", Quoted(w.file().name()), " of stage ",
                       w.file().stage(), "; stage ", p.stage(), " of attempt ",
                       b.attempt, " writes ", Quoted(name)));
    }
    RETURN_IF_ERROR(
        CheckInt(f + ".file.bytes", w.file().bytes(), 0, kInt64Max));
    RETURN_IF_ERROR(CheckInt(f + ".file.layer_begin", w.file().layer_begin(), 0,
                             w.file().layer_end()));
  }
  return absl::OkStatus();
}

}  // namespace

void EscapeLogLines(v1::StageProgress* p) {
  for (v1::LogLine& line : *p->mutable_log_lines()) {
    const std::string& text = line.text();
    if (text.size() > kMaxLogLineBytes ||
        FindControl(text, /*allow_tab=*/true) == absl::string_view::npos) {
      continue;
    }
    line.set_text(EscapeControls(text, kMaxEscapedLogLineBytes));
  }
}

absl::Status CheckProgressValues(const v1::StageProgress& p,
                                 const std::string& at,
                                 const ProgressBounds& bounds) {
  RETURN_IF_ERROR(CheckCounters(p, at, bounds));
  RETURN_IF_ERROR(CheckSeries(p, at, bounds));
  RETURN_IF_ERROR(CheckEvents(p, at));
  RETURN_IF_ERROR(CheckLogLines(p, at));
  return CheckCheckpoints(p, at, bounds);
}

}  // namespace aqueduct
