// The worker's runtime for its assigned stage: takes an assignment from the
// coordinator, runs it on a thread of its own when started, stops it on
// request, and queues progress for the agent to report.
//
// A one-stage, one-worker plan trains through the single-process trainer.
// Any other plan runs as a pipeline: the workers of the job connect a Gloo
// communicator through the coordinator's rendezvous store and each runs its
// stage replica's schedule (worker/runtime/pipeline_stage.h); at the end
// every stage sends its weights to the output stage, which evaluates the
// whole model on the test split. Progress reports carry per-step times,
// losses (output stage), the committed weight version and the minibatches
// in flight with their versions.
//
// Thread-safe.
#ifndef AQUEDUCT_WORKER_RUNTIME_STAGE_RUNTIME_H_
#define AQUEDUCT_WORKER_RUNTIME_STAGE_RUNTIME_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/comm/communicator.h"
#include "common/device/factory.h"
#include "proto/service_types.h"
#include "worker/runtime/pipeline_stage.h"

namespace aqueduct {

struct StageRuntimeOptions {
  // The device stages run on ("cpu" or "cuda:N", see common/device/factory.h)
  // and the CPU device's BLAS threads.
  DeviceSpec device;
  int threads = 1;
  // For pipelines: the coordinator (rendezvous store) and the address
  // peers reach this worker at.
  std::string coordinator_address;
  std::string advertise_host = "127.0.0.1";
  // Deadline of every wait on a peer.
  absl::Duration peer_timeout = absl::Seconds(60);
  // How long an assignment waits for a previous job that is ending (its
  // stop in flight) before it is refused as busy.
  absl::Duration busy_wait = absl::Seconds(5);
};

class StageRuntime {
 public:
  explicit StageRuntime(const StageRuntimeOptions& options);
  ~StageRuntime();  // Stops and joins a running job.

  // FAILED_PRECONDITION if another job is assigned or running, or the plan
  // is not runnable here; INVALID_ARGUMENT for an inconsistent assignment.
  absl::Status Assign(const StageAssignment& assignment);
  // NOT_FOUND if `job_id` is not the assigned job.
  absl::Status Start(const std::string& job_id);
  // Stops the job after its current step (no-op for another or no job).
  absl::Status Stop(const std::string& job_id, const std::string& reason);
  // Stops whatever runs and waits for it.
  void Shutdown();

  // Progress since the previous call (empty when nothing happened).
  std::vector<StageProgress> TakeProgress();
  // The job assigned or running ("" when idle).
  std::string current_job() const;
  WorkerRuntimeStatus Status() const;

 private:
  void Run(StageAssignment assignment);
  void RunPipeline(const StageAssignment& assignment);
  void Fail(const absl::Status& status);
  void RecordTrace(const StageEvent& event, int stage);

  const StageRuntimeOptions options_;
  mutable absl::Mutex mu_;
  std::string phase_ ABSL_GUARDED_BY(mu_) = "idle";
  bool has_assignment_ ABSL_GUARDED_BY(mu_) = false;
  StageAssignment assignment_ ABSL_GUARDED_BY(mu_);
  StageProgress pending_ ABSL_GUARDED_BY(mu_);
  bool dirty_ ABSL_GUARDED_BY(mu_) = false;
  int64_t done_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<bool> stop_{false};
  // The running pipeline's communicator, aborted by Stop and Shutdown.
  Communicator* active_comm_ ABSL_GUARDED_BY(mu_) = nullptr;
  DeviceChannels* active_channels_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::thread thread_;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_RUNTIME_STAGE_RUNTIME_H_
