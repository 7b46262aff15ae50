// What a worker reports about the stage it runs, accumulated between
// reports: the job's total steps, per-step times, losses (merged across the
// microbatches of a minibatch), the committed weight version, utilisation
// (compute time over time since the run began), memory peaks, the executed
// schedule as trace events, bytes moved, and at the end the test metrics,
// "finished" or the error. Take() hands out what accumulated since the
// previous call, keeping the identity and cumulative fields.
//
// Time comes from an injected Clock (durations between steps, utilisation);
// trace events keep the stage's own timestamps.
//
// Thread-safety: thread-safe. The stage loop records; the agent takes.
#ifndef AQUEDUCT_WORKER_RUNTIME_PROGRESS_H_
#define AQUEDUCT_WORKER_RUNTIME_PROGRESS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/log_buffer.h"
#include "proto/service_types.h"
#include "worker/runtime/pipeline_stage.h"
#include "worker/train/local_trainer.h"

namespace aqueduct {

struct ProgressOptions {
  // Not owned; must outlive the accumulator.
  Clock* clock = RealClock::Get();
  // The process's peak resident set size in bytes; by default VmHWM from
  // /proc/self/status (0 where it cannot be read).
  std::function<int64_t()> peak_rss_bytes;
  // Trace events kept between two reports; later ones are dropped.
  int max_pending_events = 20000;
  // Each report carries the job's log lines captured here since the
  // previous one (aq logs); null: none. Not owned.
  JobLogBuffer* logs = nullptr;
};

class ProgressAccumulator {
 public:
  explicit ProgressAccumulator(ProgressOptions options = ProgressOptions());

  // A new job (or a new attempt of one): forgets everything and reports as
  // this stage replica.
  void Reset(const std::string& job_id, int stage, int replica,
             int attempt = 0);
  // The run begins now. `loss_samples` (output stage of a pipeline): the
  // samples of each minibatch whose losses this replica computes; a
  // minibatch's loss is reported once that many have arrived.
  void Begin(int64_t loss_samples = 0);
  void SetTotalSteps(int64_t total_steps);

  // A step of the single-process trainer.
  void OnLocalStep(const StepReport& report);
  // Pipeline, output stage: the sum of `samples` losses of `minibatch`.
  void OnLoss(int64_t minibatch, double sum, int64_t samples);
  // Pipeline: an op of the stage loop, and the stage's statistics after it.
  void OnStageEvent(const StageEvent& event, int stage,
                    const StageStats& stats);
  // Bytes the stage's communicator has moved so far (clears the counter).
  void SetBytes(int64_t sent, int64_t received);
  // While set, each report reads the bytes moved so far from `counter`
  // (sent, received), so they are live while the stage runs; null clears
  // it (before what it reads goes away). Reset clears it too.
  using ByteCounter = std::function<std::pair<int64_t, int64_t>()>;
  void SetByteCounter(ByteCounter counter);
  // A checkpoint file of this stage is durable.
  void OnCheckpoint(const CheckpointWritten& written);
  // The test split's metrics of the trained model (also an evaluation at
  // the total step count).
  void SetTest(double accuracy, double loss);
  // A periodic evaluation that ran off the stage's thread from `start` to
  // `end`: a trace event "eval v=<step>" on the "eval" track.
  void OnEvalSpan(int64_t step, absl::Time start, absl::Time end);
  // An evaluation of the weights after `step` steps (JobSpec.eval_every).
  void OnEval(int64_t step, double accuracy, double loss);
  // The stage finished its work.
  void Finish();
  // The stage failed with `status`: its message, code and typed cause
  // (pipeline/failure.h; FAILURE_OTHER when it carries none).
  void Fail(const absl::Status& status);

  // What accumulated since the previous call; nullopt if nothing did.
  std::optional<StageProgress> Take();
  int64_t minibatches_done() const;

 private:
  void RecordTraceLocked(const StageEvent& event, int stage)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Returns the event added (null when the report's events are full).
  TraceEvent* AddTraceLocked(std::string name, const char* track,
                             absl::Time start, absl::Duration duration)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `receive`: the receive of an activation (forward) or a gradient
  // (backward) that `e` waited for; else the send that followed its
  // compute. Each with its flow (TraceEvent.flow_id).
  void RecordTransfersLocked(const StageEvent& e, int stage, bool forward,
                             bool receive) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnStepLocked(const StageEvent& event, const StageStats& stats)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddEvalLocked(int64_t step, double accuracy, double loss)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  double UtilizationLocked(absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ProgressOptions options_;
  mutable absl::Mutex mu_;
  StageProgress pending_ ABSL_GUARDED_BY(mu_);
  ByteCounter byte_counter_ ABSL_GUARDED_BY(mu_);
  bool dirty_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time run_start_ ABSL_GUARDED_BY(mu_);
  absl::Time last_step_ ABSL_GUARDED_BY(mu_);
  absl::Duration busy_ ABSL_GUARDED_BY(mu_);  // Compute since run_start_.
  int64_t loss_samples_ ABSL_GUARDED_BY(mu_) = 0;
  // Pipeline: this replica runs the last stage (it computes losses), so
  // its forwards send nothing.
  bool output_stage_ ABSL_GUARDED_BY(mu_) = false;
  // Output stage: (sum of losses, samples) of minibatches not complete yet.
  std::map<int64_t, std::pair<double, int64_t>> loss_parts_
      ABSL_GUARDED_BY(mu_);
};

// The process's peak resident set size (VmHWM), in bytes; 0 if unknown.
int64_t PeakRssBytes();

// The id that ties the trace event of a send to that of its receive: the
// same on both sides (job, attempt, minibatch, microbatch, direction and
// the stage boundary crossed: `boundary` b is between stages b and b+1).
// Never 0, and under 2^52 so that JSON readers keep it exact.
uint64_t FlowId(const std::string& job_id, int attempt, int64_t minibatch,
                int microbatch, bool gradient, int boundary);

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_RUNTIME_PROGRESS_H_
