// TraceStore: each job's executed schedule kept on disk with the job, so
// that `aq trace` answers after a coordinator restart and after the job
// ended. The coordinator appends the trace events of every progress report
// as it arrives to <dir>/<job>.trace: records of [u32 length][u32 CRC-32
// (zlib)][a StageTrace message], little-endian. A reader stops at the first
// record that is torn or whose checksum does not match (the tail of a
// killed write) and keeps what came before.
//
// Bounded: a file past max_file_bytes is compacted to the last
// max_events_per_stage events of each stage replica (rewritten atomically:
// temporary file, fsync, rename); Read() answers with at most that many per
// stage replica, the rest counted as dropped.
//
// Thread-safety: thread-safe. Appends hold the store's mutex; Read() takes
// it only to find the path and reads without it (a concurrent append or
// compaction leaves the reader a consistent prefix or the old file).
#ifndef AQUEDUCT_COORDINATOR_TRACE_STORE_H_
#define AQUEDUCT_COORDINATOR_TRACE_STORE_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/control.pb.h"

namespace aqueduct {

struct TraceStoreOptions {
  int64_t max_file_bytes = int64_t{64} << 20;
  int64_t max_events_per_stage = 200000;
};

class TraceStore {
 public:
  explicit TraceStore(TraceStoreOptions options = {});

  // Keeps traces in `dir` from now on (created if missing). Errors name
  // the directory.
  absl::Status Open(const std::string& dir);
  bool is_open() const;

  // Appends the events of one report (worker, stage, replica, events);
  // nothing without events or before Open(). Errors name the file.
  absl::Status Append(const std::string& job_id, const v1::StageTrace& part);
  // The job's trace from its file: stage replicas in (stage, replica)
  // order, events in arrival order. NOT_FOUND when there is no file.
  absl::StatusOr<v1::GetTraceResponse> Read(const std::string& job_id) const;
  // fsync of the job's file (when the job ends).
  absl::Status Sync(const std::string& job_id);
  void Remove(const std::string& job_id);

 private:
  std::string PathLocked(const std::string& job_id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CompactLocked(const std::string& job_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const TraceStoreOptions options_;
  mutable absl::Mutex mu_;
  std::string dir_ ABSL_GUARDED_BY(mu_);
  // Bytes of each job's file as this run knows them (from its size at the
  // first append).
  std::map<std::string, int64_t> file_bytes_ ABSL_GUARDED_BY(mu_);
};

// A job's trace from the bytes of its file (TraceStore's format), at most
// `max_events_per_stage` per stage replica (older ones counted in
// dropped). Stops at the first bad record.
v1::GetTraceResponse ParseTraceRecords(const std::string& bytes,
                                       int64_t max_events_per_stage);
// One record of the format.
std::string TraceRecord(const v1::StageTrace& part);

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_TRACE_STORE_H_
