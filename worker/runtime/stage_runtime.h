// The worker's runtime for its assigned stage: takes an assignment from the
// coordinator, runs it on a thread of its own when started (see
// worker/runtime/stage_job.h for what a run does), stops it on request, and
// accumulates progress for the agent to report (worker/runtime/progress.h).
// Its phase (worker/runtime/phase.h) is what GetStatus reports.
//
// Pipelines connect through the DataPlaneFactory and RendezvousStore the
// runtime is given: the daemon gives it the Gloo (+ NCCL) data plane and
// the coordinator's store; in-process tests give it in-memory ones.
//
// Thread-safe.
#ifndef AQUEDUCT_WORKER_RUNTIME_STAGE_RUNTIME_H_
#define AQUEDUCT_WORKER_RUNTIME_STAGE_RUNTIME_H_

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/comm/rendezvous_store.h"
#include "common/device/factory.h"
#include "common/file_system.h"
#include "common/log_buffer.h"
#include "proto/service_types.h"
#include "worker/runtime/data_plane.h"
#include "worker/runtime/model_sink.h"
#include "worker/runtime/phase.h"
#include "worker/runtime/progress.h"

namespace aqueduct {

struct StageRuntimeOptions {
  // The device stages run on ("cpu" or "cuda:N", see common/device/factory.h)
  // and the CPU device's BLAS threads.
  DeviceSpec device;
  int threads = 1;
  // The memory stages check their needs against (0: the host's).
  int64_t memory_bytes = 0;
  // Deadline of every wait on a peer.
  absl::Duration peer_timeout = absl::Seconds(60);
  bool evaluate_in_background = true;  // JobEnv's.
  // Tests and benchmarks of unequal workers (--slowdown): every pipeline
  // stage runs this many times slower (JobEnv's; >= 1).
  double slowdown = 1.0;
  // How long an assignment waits for a previous job that is ending (its
  // stop in flight) before it is refused as busy.
  absl::Duration busy_wait = absl::Seconds(5);
  // Step times and utilisation. Not owned.
  Clock* clock = RealClock::Get();
  // Where trained models go (worker/runtime/model_sink.h); null: nowhere.
  // Not owned.
  ModelSink* model_sink = nullptr;
  // What jobs may open (--data_root, --checkpoint_root, --max_text_bytes;
  // common/file_system.h). The default allows no file: synthetic data only.
  FileAccess files;
  // Where the stage thread's log lines are captured for the job's log (aq
  // logs; common/log_buffer.h); null: not captured. Not owned.
  JobLogBuffer* logs = nullptr;
};

class StageRuntime {
 public:
  // Pipelines connect through `data_plane` and `store`; neither is owned
  // and both must outlive the runtime.
  StageRuntime(const StageRuntimeOptions& options, DataPlaneFactory* data_plane,
               RendezvousStore* store);
  ~StageRuntime();  // Stops and joins a running job.

  // FAILED_PRECONDITION if another job is assigned or running, or the plan
  // is not runnable here; INVALID_ARGUMENT for an inconsistent assignment.
  // Waits up to options.busy_wait for a previous job that is ending. A
  // later attempt of the job that runs here stops the earlier one first
  // (the coordinator restarts a job after a lost worker).
  absl::Status Assign(const StageAssignment& assignment);
  // NOT_FOUND if `job_id` is not the assigned job; FAILED_PRECONDITION if it
  // already ended. Returns at once; the job runs on the runtime's thread.
  absl::Status Start(const std::string& job_id);
  // Stops the job after its current step, aborting waits on peers (no-op
  // for another or no job, or for another attempt than `attempt` when it is
  // set). Returns at once.
  absl::Status Stop(const std::string& job_id, const std::string& reason,
                    std::optional<int> attempt = std::nullopt);
  // Stops whatever runs and waits for it.
  void Shutdown();
  // checkpoint.every_seconds: the coordinator asks the running attempt of
  // `job_id` to checkpoint at `version` (ignored for another job).
  void RequestCheckpoint(const std::string& job_id, int64_t version);

  // Progress since the previous call (empty when nothing happened).
  std::vector<StageProgress> TakeProgress();
  // The job assigned or running ("" when idle).
  std::string current_job() const;
  // The job attempt, stage and replica assigned, running, finished or
  // failed (until the next assignment); nullopt otherwise. A worker
  // re-registering after a coordinator restart claims it.
  std::optional<v1::StageClaim> Claim() const;
  RuntimePhase phase() const;
  WorkerRuntimeStatus Status() const;
  // What jobs may open (options.files): the profiler reads data alike.
  const FileAccess& files() const { return options_.files; }
  // options.slowdown: the profiler runs as slowed as the stages.
  double slowdown() const { return options_.slowdown; }

 private:
  void Run(const StageAssignment& assignment);
  // Records how the run of `assignment` ended.
  void End(const StageAssignment& assignment, const absl::Status& status);
  // The running job's data plane (null: none), aborted by Stop and Shutdown.
  void SetDataPlane(const DataPlane* plane);
  // Whether the job ended with `status` because of a stop (else it failed).
  bool StopExplains(const absl::Status& status);
  bool IdleFor(const StageAssignment& a) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AbortLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const StageRuntimeOptions options_;
  DataPlaneFactory* const data_plane_;
  RendezvousStore* const store_;
  ProgressAccumulator progress_;
  mutable absl::Mutex mu_;
  // The reports of the other stages this worker holds (several chunks), by
  // stage; replaced at each assignment (none runs then).
  std::map<int, std::unique_ptr<ProgressAccumulator>> chunk_progress_
      ABSL_GUARDED_BY(mu_);
  RuntimePhase phase_ ABSL_GUARDED_BY(mu_) = RuntimePhase::kIdle;
  bool has_assignment_ ABSL_GUARDED_BY(mu_) = false;
  StageAssignment assignment_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> checkpoint_at_{0};
  const DataPlane* active_plane_ ABSL_GUARDED_BY(mu_) = nullptr;
  // Whether a stop had been requested when the running job's data plane was
  // forgotten, just before it closed (false until then).
  bool stopped_before_close_ ABSL_GUARDED_BY(mu_) = false;
  // The running job's thread (Start starts it, Start and Shutdown join it).
  absl::Mutex thread_mu_;
  std::thread thread_ ABSL_GUARDED_BY(thread_mu_);
};

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_RUNTIME_STAGE_RUNTIME_H_
