// One assigned job, run to its end on the calling thread: what a worker's
// stage runtime (worker/runtime/stage_runtime.h) does between StartJob and
// the job's last report.
//
// A one-stage, one-replica plan trains through the single-process trainer
// (RunLocalJob). Any other plan runs as a pipeline (RunPipelineJob): the
// job's layout from the assignment (layout.h), the data plane from the
// given factory through the given rendezvous store (data_plane.h), the
// stage replica's schedule (pipeline_stage.h), and at the end the
// evaluation of the whole model on the output stage (evaluation.h).
// Progress goes to a ProgressAccumulator (progress.h) as it happens.
//
// Thread-safety: each call runs one job on the calling thread; what the
// environment points to must be thread-safe where stated (the progress
// accumulator, the factory, the store) and outlive the call.
#ifndef AQUEDUCT_WORKER_RUNTIME_STAGE_JOB_H_
#define AQUEDUCT_WORKER_RUNTIME_STAGE_JOB_H_

#include <atomic>
#include <functional>
#include <map>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/comm/rendezvous_store.h"
#include "common/device/factory.h"
#include "common/file_system.h"
#include "proto/service_types.h"
#include "worker/runtime/data_plane.h"
#include "worker/runtime/model_sink.h"
#include "worker/runtime/progress.h"

namespace aqueduct {

// What a job runs with. Nothing is owned.
struct JobEnv {
  // The device the stage runs on, and the CPU device's BLAS threads.
  DeviceSpec device;
  int threads = 1;
  // Pipelines: how this worker connects to its peers.
  DataPlaneFactory* data_plane = nullptr;
  RendezvousStore* store = nullptr;
  // Deadline of every wait on a peer (connecting included).
  absl::Duration peer_timeout = absl::Seconds(60);
  // The evaluator runs periodic evaluations on a thread of its own (false:
  // on the output stage's, stalling the pipeline; benchmarks compare).
  bool evaluate_in_background = true;
  // PipelineStage::Options::slowdown: the worker's --slowdown, for tests
  // and benchmarks of unequal workers (1: full speed). A job that runs on
  // one worker alone (RunLocalJob) is not slowed.
  double slowdown = 1.0;
  // When it becomes true the job ends with CANCELLED after its current step
  // (a wait on a peer ends when the data plane is aborted; connecting to the
  // peers ends within about 50 ms).
  const std::atomic<bool>* stop = nullptr;
  ProgressAccumulator* progress = nullptr;
  // A worker with several chunks (interleaved 1F1B, ZB-V): the reports of
  // each stage other than the assignment's, by stage (the assignment's
  // stage reports through `progress`). Byte counts go to `progress` only.
  std::map<int, ProgressAccumulator*> chunk_progress;
  // Pipelines: called with the data plane once it is connected (so that a
  // stop can abort it), and with null before it is closed. May be empty.
  std::function<void(const DataPlane*)> on_data_plane;
  // Where the trained model goes (null: nowhere).
  ModelSink* model_sink = nullptr;
  // The version the coordinator asked to checkpoint at (every_seconds).
  const std::atomic<int64_t>* checkpoint_at = nullptr;
  // Longest wait for the job's checkpoint files to be written at its end.
  absl::Duration checkpoint_drain = absl::Seconds(120);
  // The device's memory: a stage that cannot fit in it fails before it
  // allocates anything, naming the layer (0: the host's physical memory,
  // what a CPU worker registers as its DeviceInfo.memory_bytes).
  int64_t memory_bytes = 0;
  // Where the job's data and init_weights are read (files.data) and its
  // checkpoints written and read (files.checkpoints): the worker's
  // --data_root and --checkpoint_root. The default allows nothing. Reads
  // stop with the job (`stop` is used as files.stop when that is null).
  FileAccess files;
};

// Both kinds of run first check that the stage's parameters, optimizer
// state, activations, data and schedule fit env.memory_bytes
// (pipeline/spec.h's CheckStageMemory): FAILED_PRECONDITION naming the
// layer otherwise, before anything is allocated. Both start from the
// assignment's checkpoint when it has one
// (assignment.restore(): the files of the layers it runs, verified), write
// checkpoints as the spec's checkpoint section asks (replica 0 of each
// stage, from a background thread; each file reported once durable), and
// end by handing the whole trained model to env.model_sink.
//
// Trains a one-stage, one-replica assignment with TrainLocal. OK when
// finished (the test metrics recorded), CANCELLED when stopped, otherwise
// the trainer's or the device's error.
absl::Status RunLocalJob(const StageAssignment& assignment, const JobEnv& env);

// Runs this worker's stage replica of a pipeline job, then the end-of-job
// evaluation. OK when finished, CANCELLED when stopped (connecting to peers
// included); otherwise the error, its message followed by " [ranks:
// <rank>=<worker> (stage s), ...]" naming the workers behind the ranks it
// may mention. An error on a peer (a timeout, a closed connection) probes
// the peer's worker port (peer_reach.h): a timeout on one that does not
// answer makes the error "could not reach stage S on worker W (HOST): ..."
// (kCouldNotReach); one whose worker is alive is said to be, and the error
// is returned a few seconds later (or at a stop), so that the peer's own
// failure reaches the coordinator first.
absl::Status RunPipelineJob(const StageAssignment& assignment,
                            const JobEnv& env);

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_RUNTIME_STAGE_JOB_H_
