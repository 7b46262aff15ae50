// Per-job capture of a worker's log lines, for `aq logs`: a thread that
// works for a job says so with a ScopedJobLogContext (the stage runtime
// does, on its stage thread); the spdlog sink made by NewJobLogSink copies
// every line such a thread logs into a JobLogBuffer, a bounded ring per
// job, from which the progress reports take them (worker/runtime/
// progress.h). Lines of threads without a context are not captured.
//
// Bounded: at most max_lines_per_job lines wait per job (the oldest are
// dropped, and counted), each cut to max_line_bytes, and at most max_jobs
// jobs' rings (the least recently written is dropped).
//
// Thread-safety: JobLogBuffer is thread-safe; a context belongs to its
// thread. The sink holds no lock of its own beyond spdlog's.
#ifndef AQUEDUCT_COMMON_LOG_BUFFER_H_
#define AQUEDUCT_COMMON_LOG_BUFFER_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "proto/control.pb.h"
#include "spdlog/sinks/sink.h"

namespace aqueduct {

struct JobLogBufferOptions {
  size_t max_lines_per_job = 4096;
  size_t max_line_bytes = 1024;
  size_t max_jobs = 16;
};

class JobLogBuffer {
 public:
  explicit JobLogBuffer(JobLogBufferOptions options = {});

  // Keeps a line of `job_id` (seq 0: the coordinator numbers lines).
  void Add(const std::string& job_id, int stage, const std::string& level,
           int64_t time_ms, const std::string& text);
  // The lines of `job_id` added since the previous call, oldest first;
  // a first line saying how many were dropped when the ring overflowed.
  std::vector<v1::LogLine> Take(const std::string& job_id);
  // Lines waiting for `job_id`.
  size_t Pending(const std::string& job_id) const;

 private:
  struct Ring {
    std::deque<v1::LogLine> lines;
    int64_t dropped = 0;
    int64_t touched = 0;  // Order of the latest Add (eviction of jobs).
  };
  const JobLogBufferOptions options_;
  mutable absl::Mutex mu_;
  std::map<std::string, Ring> rings_ ABSL_GUARDED_BY(mu_);
  int64_t adds_ ABSL_GUARDED_BY(mu_) = 0;
};

// The job (and stage) the current thread works for, while in scope; the
// previous context comes back at its end. Not copyable.
class ScopedJobLogContext {
 public:
  ScopedJobLogContext(std::string job_id, int stage);
  ~ScopedJobLogContext();
  ScopedJobLogContext(const ScopedJobLogContext&) = delete;
  ScopedJobLogContext& operator=(const ScopedJobLogContext&) = delete;

 private:
  std::string previous_job_;
  int previous_stage_;
};

// The current thread's job ("" when none) and stage.
const std::string& CurrentLogJob();
int CurrentLogStage();

// A sink that copies the lines of threads with a job context into
// `buffer` (not owned; must outlive the sink's use). The binary adds it to
// its logger (InstallJobLogSink) once, at start-up.
std::shared_ptr<spdlog::sinks::sink> NewJobLogSink(JobLogBuffer* buffer);

// Adds NewJobLogSink(buffer) to the process's logger (common/logging.h).
// Call once from main, after ConfigureLogging and before other threads.
void InstallJobLogSink(JobLogBuffer* buffer);

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_LOG_BUFFER_H_
