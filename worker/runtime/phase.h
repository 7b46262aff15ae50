// The phases of a worker's stage runtime, and their names in
// WorkerRuntimeStatus.phase and the logs.
//
//   kIdle -> kAssigned -> kRunning -> kFinished | kFailed | kStopped
//   kAssigned -> kStopped (stopped before it started)
//
// Thread-safety: a value type and a stateless function.
#ifndef AQUEDUCT_WORKER_RUNTIME_PHASE_H_
#define AQUEDUCT_WORKER_RUNTIME_PHASE_H_

namespace aqueduct {

enum class RuntimePhase {
  kIdle,
  kAssigned,
  kRunning,
  kFinished,
  kFailed,
  kStopped,
};

// "idle", "assigned", "running", "finished", "failed", "stopped".
constexpr const char* PhaseName(RuntimePhase phase) {
  switch (phase) {
    case RuntimePhase::kIdle:
      return "idle";
    case RuntimePhase::kAssigned:
      return "assigned";
    case RuntimePhase::kRunning:
      return "running";
    case RuntimePhase::kFinished:
      return "finished";
    case RuntimePhase::kFailed:
      return "failed";
    case RuntimePhase::kStopped:
      return "stopped";
  }
  return "unknown";
}

// Whether a job in `phase` holds the worker (assigned or running).
constexpr bool HoldsWorker(RuntimePhase phase) {
  return phase == RuntimePhase::kAssigned || phase == RuntimePhase::kRunning;
}

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_RUNTIME_PHASE_H_
