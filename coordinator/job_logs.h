// JobLogStore: each job's log, for `aq logs` (StreamLogs): the lines its
// workers ship with their progress reports and the coordinator's own
// events about it (planned, running, restarted, checkpoint committed,
// finished), numbered from 1 in arrival order (seq, monotonic per job).
//
// Bounded: the last max_lines_per_job lines per job are kept in memory,
// each cut to max_line_bytes. Persistent once Open()ed: every line is
// appended to <dir>/<job>.log as one JSON object per line (LogLine's JSON
// form) as it arrives (written, not synced: a coordinator that is killed
// loses none, a machine that crashes the lines since the last sync); Sync()
// makes a job's file durable (the core calls it when the job ends). A file
// past max_file_bytes is rewritten with the lines in memory, so it stays
// under about that size. Open() loads every file back; a line that does not
// parse (a torn last write) is skipped and counted in the log.
//
// Followers wait with WaitForLines(), bounded by a deadline.
//
// Thread-safety: thread-safe. File writes happen under the store's own
// mutex (short appends); it never calls out.
#ifndef AQUEDUCT_COORDINATOR_JOB_LOGS_H_
#define AQUEDUCT_COORDINATOR_JOB_LOGS_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/control.pb.h"

namespace aqueduct {

struct JobLogOptions {
  size_t max_lines_per_job = 20000;
  size_t max_line_bytes = 2048;
  int64_t max_file_bytes = int64_t{16} << 20;
};

class JobLogStore {
 public:
  explicit JobLogStore(JobLogOptions options = {});

  // Keeps the logs in `dir` from now on (created if missing), after
  // loading the files already there. Errors name the directory.
  absl::Status Open(const std::string& dir);

  // Appends `lines` to the job's log, numbering them; returns the last seq.
  int64_t Append(const std::string& job_id, std::vector<v1::LogLine> lines);
  // One line of the coordinator's own (worker "coordinator", stage -1).
  int64_t AppendEvent(const std::string& job_id, int64_t time_ms,
                      const std::string& level, const std::string& text);

  // At most `max` lines numbered after `since_seq`, oldest first; with
  // `stage`, only that stage's. `scanned` (may be null): the seq to read
  // after next time (lines of other stages skipped included).
  std::vector<v1::LogLine> Read(const std::string& job_id, int64_t since_seq,
                                std::optional<int> stage, size_t max,
                                int64_t* scanned = nullptr) const;
  // The job's last seq (0: none).
  int64_t LastSeq(const std::string& job_id) const;
  // Waits until the job has a line after `since_seq` or `deadline`; true
  // when it has one.
  bool WaitForLines(const std::string& job_id, int64_t since_seq,
                    absl::Time deadline) const;

  // Makes the job's file durable (fsync). Errors name the file.
  absl::Status Sync(const std::string& job_id);
  // Forgets the job and deletes its file.
  void Remove(const std::string& job_id);

 private:
  struct Log {
    std::deque<v1::LogLine> lines;
    int64_t last_seq = 0;
    int64_t file_bytes = 0;
  };
  std::string PathLocked(const std::string& job_id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WriteLocked(const std::string& job_id, Log& log, const std::string& text)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LoadFile(const std::string& path, const std::string& job_id);

  const JobLogOptions options_;
  mutable absl::Mutex mu_;
  std::string dir_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Log> logs_ ABSL_GUARDED_BY(mu_);
  // A write failed (a full disk): said once, then lines stay in memory.
  bool write_failed_ ABSL_GUARDED_BY(mu_) = false;
};

// Whether `job_id` may name a file (letters, digits, '.', '_', '-'; not
// starting with '.'; at most 128 bytes).
bool IsFileSafeJobId(const std::string& job_id);

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_JOB_LOGS_H_
