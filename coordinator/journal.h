// JobJournal: the coordinator's record of jobs on disk, so that a restart
// forgets nothing a client was told: every submission, and every job's
// final status.
//
// Format: the magic "AQJ2", then records, each a 4-byte little-endian
// length, a 4-byte CRC-32 of the body, and the body (a JournalRecord). A
// reader stops at the first record that is incomplete or fails its
// checksum (a crash in the middle of an append, or corruption) and says at
// which offset and how many bytes it ignored. Files written before the
// checksum (no magic) are read as length-prefixed records and rewritten in
// the new format by Create.
//
// Writes go through a FileSystem (common/file_system.h), so tests can cut
// a write at any byte. A writer thread makes appends durable (write, then
// fdatasync), grouping those that arrive together into one sync. No caller
// waits for the disk under its own lock: Append waits for durability and
// is called without locks; AppendAsync only queues. After a failed write
// or sync the journal is broken (the file may end in a torn record): every
// later append fails, so that nothing is written after a hole.
//
// Thread-safe.
#ifndef AQUEDUCT_COORDINATOR_JOURNAL_H_
#define AQUEDUCT_COORDINATOR_JOURNAL_H_

#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/file_system.h"
#include "proto/control.pb.h"

namespace aqueduct {

struct JournalContents {
  std::vector<v1::JournalRecord> records;
  int64_t ignored_bytes = 0;  // An unreadable tail.
  int64_t ignored_at = -1;    // Its offset (-1 when none).
};

class JobJournal {
 public:
  // Reads `path` (a missing file is an empty journal). UNAVAILABLE naming
  // the path when it cannot be read.
  static absl::StatusOr<JournalContents> Read(FileSystem* fs,
                                              const std::string& path);
  static absl::StatusOr<JournalContents> Read(const std::string& path) {
    return Read(DefaultFileSystem(), path);
  }

  // Rewrites `path` to hold exactly `records` (temporary file, sync,
  // rename, directory sync), then opens it for appends.
  static absl::StatusOr<std::unique_ptr<JobJournal>> Create(
      FileSystem* fs, const std::string& path,
      const std::vector<v1::JournalRecord>& records);
  static absl::StatusOr<std::unique_ptr<JobJournal>> Create(
      const std::string& path, const std::vector<v1::JournalRecord>& records) {
    return Create(DefaultFileSystem(), path, records);
  }
  ~JobJournal();  // Makes what is queued durable, then joins the writer.

  // Appends `record` and returns once it is durable (or the error).
  // Blocks on the disk: never call it holding a lock others wait on.
  absl::Status Append(const v1::JournalRecord& record);
  // Queues `record`; the writer makes it durable shortly (a failure is
  // logged and breaks the journal). Does not block on the disk.
  void AppendAsync(v1::JournalRecord record);
  // Waits until everything queued so far is durable.
  absl::Status Flush();

  const std::string& path() const { return path_; }

 private:
  JobJournal(std::string path, std::unique_ptr<WritableFile> file);
  // Queues a record; returns its sequence number.
  int64_t Enqueue(v1::JournalRecord record);
  absl::Status WaitDurable(int64_t seq);
  void WriterLoop();

  const std::string path_;
  std::unique_ptr<WritableFile> file_;  // Used by the writer thread only.
  absl::Mutex mu_;
  std::deque<v1::JournalRecord> queue_ ABSL_GUARDED_BY(mu_);
  int64_t queued_ ABSL_GUARDED_BY(mu_) = 0;   // Records ever queued.
  int64_t durable_ ABSL_GUARDED_BY(mu_) = 0;  // Records made durable.
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread writer_;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_JOURNAL_H_
