// WorkerHandler: the Worker service's logic, without gRPC (the coordinator
// calls it through GrpcWorkerService, worker/service.h, which only
// authenticates the caller and translates). Assignments go to the stage
// runtime, whose own thread runs the job; profiling runs on a thread of its
// own, one profile at a time with one more queued, and the call waits for
// it no longer than its deadline (the profile goes on and is dropped, so a
// caller that gave up does not leave a gRPC thread measuring); link probes
// run in the call, one target after another, each bounded by the request
// and the call's deadline.
//
// Thread-safe.
#ifndef AQUEDUCT_WORKER_HANDLER_H_
#define AQUEDUCT_WORKER_HANDLER_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/device/factory.h"
#include "common/executor.h"
#include "proto/control.pb.h"
#include "worker/runtime/stage_runtime.h"

namespace aqueduct {

class WorkerHandler {
 public:
  // `info` returns the worker's current identity (for GetStatus); Profile
  // measures on a fresh `device` (CPU: `threads` BLAS threads).
  WorkerHandler(StageRuntime* runtime, DeviceSpec device, int threads,
                std::function<WorkerInfo()> info);

  absl::Status AssignStage(const StageAssignment& assignment);
  absl::Status StartJob(const v1::StartJobRequest& request);
  absl::Status StopJob(const v1::StopJobRequest& request);
  // DEADLINE_EXCEEDED when the profile is not done by `deadline` (on the
  // monotonic clock, common/clock.h); RESOURCE_EXHAUSTED when a profile
  // runs and another waits already.
  absl::StatusOr<ModelProfile> Profile(const v1::ProfileRequest& request,
                                       absl::Time deadline);
  WorkerRuntimeStatus GetStatus() const;
  // `call_end` (monotonic) bounds every probe; `cancelled` is polled
  // between targets.
  absl::StatusOr<v1::MeasureLinksResponse> MeasureLinks(
      const v1::MeasureLinksRequest& request, absl::Time call_end,
      const std::function<bool()>& cancelled);

 private:
  StageRuntime* const runtime_;
  const DeviceSpec device_;
  const int threads_;
  const std::function<WorkerInfo()> info_;
  // Declared last: destroyed first, running (or dropping) what is queued.
  BoundedExecutor profiler_{"profiler", 1, 1};
};

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_HANDLER_H_
