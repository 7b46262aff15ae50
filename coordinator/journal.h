// JobJournal: the coordinator's record of jobs on disk, so that a restart
// forgets nothing a client was told: every submission, and every job's
// final status, appended as length-prefixed JournalRecord protos and
// flushed to the disk (fdatasync) before the call that caused them returns.
//
// Reading stops at the first record that is incomplete or unreadable (a
// crash in the middle of an append) and says how many bytes it ignored.
// Compact() rewrites the file with the given records (write, sync, rename).
//
// Thread-compatible: the coordinator appends under its mutex.
#ifndef AQUEDUCT_COORDINATOR_JOURNAL_H_
#define AQUEDUCT_COORDINATOR_JOURNAL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/service_types.h"

namespace aqueduct {

struct JournalContents {
  std::vector<v1::JournalRecord> records;
  int64_t ignored_bytes = 0;  // An unreadable tail.
};

class JobJournal {
 public:
  // Reads `path` (a missing file is an empty journal). UNAVAILABLE naming
  // the path when it cannot be read.
  static absl::StatusOr<JournalContents> Read(const std::string& path);

  // Rewrites `path` to hold exactly `records`, then opens it for appends.
  static absl::StatusOr<std::unique_ptr<JobJournal>> Create(
      const std::string& path, const std::vector<v1::JournalRecord>& records);
  ~JobJournal();

  // Appends one record and syncs it to disk.
  absl::Status Append(const v1::JournalRecord& record);

  const std::string& path() const { return path_; }

 private:
  JobJournal(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  const std::string path_;
  int fd_;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_JOURNAL_H_
