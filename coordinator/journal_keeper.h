// The journal as the coordinator's core keeps it (issue 22): opened before
// serving (the jobs it holds restored into the job table, the file then
// compacted), the appends of submissions and final statuses, and, while
// the file cannot be rewritten (a full disk), why new jobs are refused and
// the retries that write it again once there is room.
//
// Thread-safety: thread-safe. Open, Retry and AppendSubmission take the
// core's mutex (`mu`) themselves, or run without it; the public ...Locked
// methods require it (asserted: clang's analysis cannot tie `mu` to the
// core's own member), the private ones are annotated; Journal() needs no
// lock.
#ifndef AQUEDUCT_COORDINATOR_JOURNAL_KEEPER_H_
#define AQUEDUCT_COORDINATOR_JOURNAL_KEEPER_H_

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "coordinator/job_events.h"
#include "coordinator/job_table.h"
#include "coordinator/jobs/job.h"
#include "coordinator/journal.h"
#include "coordinator/journal_restore.h"

namespace aqueduct {

class JournalKeeper {
 public:
  // `mu` guards `jobs` (the core's mutex). Keeps the references; all must
  // outlive it.
  JournalKeeper(const Clock* clock, absl::Mutex& mu, JobTable& jobs,
                JobEvents& events);

  // Restores the jobs the journal at `path` holds (finished; running ones
  // taken back, awaiting their workers; the others pending again), trims
  // the finished ones, rewrites the file with the jobs kept and schedules.
  // A damaged journal is copied aside first, and its jobs that lost a
  // record fail. When the file cannot be rewritten it is kept as it was
  // and new jobs are refused (ErrorLocked) until Retry writes it: OK all
  // the same; UNAVAILABLE only when it cannot be read.
  absl::Status Open(const std::string& path) ABSL_LOCKS_EXCLUDED(mu_);
  // When Open could not rewrite the file: tries again, with every job as
  // it is now; once it can, new jobs are accepted again.
  void Retry() ABSL_LOCKS_EXCLUDED(mu_);

  // The journal, once open for appends (null before, or while it cannot
  // be written): thread-safe, for appends that wait without mu.
  std::shared_ptr<JobJournal> Journal() const;
  // Appends the job's submission, if there is a journal, and waits until
  // it is durable (call without mu): UNAVAILABLE when it cannot.
  absl::Status AppendSubmission(const Job& job) ABSL_LOCKS_EXCLUDED(mu_);
  // Queues the final status of `job`, which has just ended.
  void AppendFinishedLocked(const Job& job);

  // Why new jobs cannot be recorded now; "" when they can.
  std::string ErrorLocked() const;
  // Whether Retry is due at `now` (every 5 s while the file cannot be
  // written).
  bool RetryDueLocked(absl::Time now) const;

 private:
  // Adds the jobs `index` holds, each with its committed checkpoints;
  // counts those taken back and those pending again.
  void RestoreLocked(JournalIndex& index, int* adopted, int* requeued)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The file could not be written: keeps why, and what Retry needs.
  void KeepFailureLocked(const std::string& path, const absl::Status& why,
                         JournalIndex index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The journal's contents for the job table as it is now: the compaction
  // of `index_`, and a final status for each job that ended since start;
  // `ended` receives their ids.
  std::vector<v1::JournalRecord> RecordsNowLocked(
      std::set<std::string>* ended) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetJournal(std::shared_ptr<JobJournal> journal);

  const Clock* clock_;
  absl::Mutex& mu_;
  JobTable& jobs_ ABSL_GUARDED_BY(mu_);
  JobEvents& events_;
  mutable absl::Mutex journal_mu_ ABSL_ACQUIRED_AFTER(mu_);
  std::shared_ptr<JobJournal> journal_ ABSL_GUARDED_BY(journal_mu_);
  // Why the file could not be written (new jobs are refused until Retry
  // writes it); meanwhile its path, what was read from it, and when to try
  // again.
  std::string error_ ABSL_GUARDED_BY(mu_);
  std::string path_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<JournalIndex> index_ ABSL_GUARDED_BY(mu_);
  absl::Time retry_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_JOURNAL_KEEPER_H_
