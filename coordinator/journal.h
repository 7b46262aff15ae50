// JobJournal: the coordinator's record of jobs on disk, so that a restart
// forgets nothing a client was told: every submission, and every job's
// final status.
//
// Format ("AQJ3"): the magic "AQJ3", then records, each
//
//   sync word    8 bytes  ff 41 51 4a fe 3c c3 ff ("\xff" "AQJ" ...)
//   body length  u32
//   kind         u8       the JournalRecord's kind_case() (1 submitted,
//                         2 finished, 3 started, 4 checkpoint)
//   id length    u16      at most kMaxHeaderJobIdBytes ("" past that)
//   job id       id length bytes: the job the record is about
//   body CRC     u32      CRC-32 of the body
//   header CRC   u32      CRC-32 of the header from body length to body CRC
//   body         a serialized JournalRecord
//
// (integers little-endian). A record that fails its checks is a damaged
// region, and the reader finds the next record after it: where the
// damaged record's header validated, at the end its length gives;
// otherwise at the next sync word followed by a header that validates. A
// sync word inside a body is improbable (it is not UTF-8, so no string
// field holds it) and is never looked for inside a record whose header
// validated; a false match whose body fails its CRC is one more damaged
// region, and the scan goes on past it. Where a record is known to begin
// (the end of the one before), the sync word itself need not be intact.
// Every damaged region is reported (offset, size, and the job named by
// its header when the header survived), so that a restart can tell which
// jobs lost a record. The last region, when it reaches the end of the
// file (an append cut by a crash), is also given as ignored_at and
// ignored_bytes.
//
// A damaged magic costs nothing more: the file is read as AQJ3 when a
// record header validates after it. Older files are still read: "AQJ2" (records
// of a u32 length, a u32 CRC-32 and the body; the reader stops at the first bad
// one) and, before it, length-prefixed records with no magic. Create rewrites
// the file in the current format, so a journal is upgraded at the first start.
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
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/file_system.h"
#include "proto/control.pb.h"

namespace aqueduct {

// Job ids longer than this are not repeated in a record's header.
inline constexpr size_t kMaxHeaderJobIdBytes = 1024;

// A part of a journal that could not be read.
struct JournalDamage {
  int64_t offset = 0;
  int64_t bytes = 0;
  // The job named by the damaged record's header, when the header
  // survived ("" when it did not: the region may hold several records).
  std::string job_id;
  // Its kind, from the same header (KIND_NOT_SET when the header did not
  // survive, or names a kind this build does not know).
  v1::JournalRecord::KindCase kind = v1::JournalRecord::KIND_NOT_SET;
};

struct JournalContents {
  std::vector<v1::JournalRecord> records;
  std::vector<int64_t> offsets;  // Where records[i] begins.
  // Every damaged region, in the order of the file.
  std::vector<JournalDamage> damaged;
  // The last damaged region when it runs to the end of the file (a torn
  // append, or damage to the last records).
  int64_t ignored_bytes = 0;
  int64_t ignored_at = -1;  // Its offset (-1 when none).
};

// What FailJobsWithLostRecords did.
struct LostJobs {
  std::vector<std::string> failed;  // Now with a FAILED final status.
  std::vector<std::string> kept;    // Their own final status survived.
};

// The rule for a journal with damaged regions: a job that lost a record
// (named by the damaged record's header, or whose submission is missing
// while other records of it survived and some header was unreadable) is
// never brought back to a state it may have left. Unless a final status
// of it survived, a FAILED one is added, whose reason names the damaged
// record's offset in `file`; a job whose submission was lost gets a bare
// one (its id only) where the damage was, so that it keeps its place in
// the order of submission. Pure; `contents` keeps records and offsets in
// step.
LostJobs FailJobsWithLostRecords(JournalContents* contents,
                                 absl::string_view file);

// One line for the log: every damaged region (its byte range, and the job
// and kind of record when its header survived) and the jobs in `lost`.
std::string DescribeDamage(const JournalContents& contents,
                           const LostJobs& lost);

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
