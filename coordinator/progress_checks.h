// Range checks of a stage's progress report (StageProgress) before the
// coordinator applies it: every count and step within [0, the job's total
// steps], every duration, rate and fraction finite and non-negative, every
// repeated field and string bounded, and checkpoint files named where the
// job's checkpoints go. The checks of who may report (the worker's
// incarnation and assignment) are the core's (CoordinatorCore::
// ReportProgress); these are of the values alone.
//
// Why: a report's numbers end up in every status, the journal and the
// checkpoint manifests; "step 2^63-1" and "utilisation -inf" were
// accepted, and a checkpoint's directory is where the coordinator writes.
//
// Losses: a training loss is finite and non-negative (cross-entropy; a
// worker reports a non-finite loss as an error instead, never as a
// value). An evaluation's loss may also be NaN or +infinity, as it was
// measured: refusing it would drop the report that says the stage
// finished.
//
// Thread-safety: stateless functions.
#ifndef AQUEDUCT_COORDINATOR_PROGRESS_CHECKS_H_
#define AQUEDUCT_COORDINATOR_PROGRESS_CHECKS_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "proto/control.pb.h"

namespace aqueduct {

// Steps of a job whose total is not known yet (its data lives on the
// workers and no report has said): the bound of steps and versions, far
// above what any spec may ask for.
inline constexpr int64_t kMaxUnknownTotalSteps = int64_t{1} << 40;
// Entries of one repeated field of a report, and stage reports in one
// ReportProgress call.
inline constexpr int kMaxReportEntries = 1 << 20;
// An escaped log line's bytes at most: more than the coordinator keeps of
// any line (JobLogOptions::max_line_bytes, 2,048).
inline constexpr size_t kMaxEscapedLogLineBytes = 4096;
// Utilisation is a fraction of wall time; clocks' rounding may take it a
// little over 1 (the core applies it as 1).
inline constexpr double kMaxUtilization = 1.05;

// What a report is checked against.
struct ProgressBounds {
  // Steps and versions are in [0, total_steps]; `total_what` says where
  // the bound comes from ("the job's total steps").
  int64_t total_steps = kMaxUnknownTotalSteps;
  std::string total_what;
  // A loss share covers at most a minibatch.
  int64_t batch_size = 0;
  // The job's id, attempt and checkpoint.dir (empty: it does not
  // checkpoint, and a report of a checkpoint file is refused).
  std::string job_id;
  int attempt = 0;
  std::string checkpoint_dir;
};

// OK when every value of `p` is in range; INVALID_ARGUMENT naming the
// field as `at` + "." + its path (e.g. "stages[0].utilization") and the
// range otherwise.
absl::Status CheckProgressValues(const v1::StageProgress& p,
                                 const std::string& at,
                                 const ProgressBounds& bounds);

// Makes the text of `p`'s log lines safe to show (issue 22, item 11: a
// worker's line with ESC[2J or CR/LF was printed raw by `aq logs`, so a
// worker could clear a user's terminal or forge lines): every control
// character but tab, and every byte that is not UTF-8, becomes a visible
// "\xNN" (EscapeControls in input_checks.h). Escaped rather than refused:
// refusing the report would drop its progress (its losses, its end) over a
// line of text, and a line quoting a file or a tool's output may hold
// anything. An escaped line is cut to kMaxEscapedLogLineBytes, so that
// escaping never makes a report much bigger than it came; lines without a
// control character, and lines over CheckProgressValues' bound (which it
// refuses), are left as they are.
void EscapeLogLines(v1::StageProgress* p);

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_PROGRESS_CHECKS_H_
