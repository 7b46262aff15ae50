// The per-layer profiler: runs each layer of a job's model on a device for a
// few warm-up and measured iterations at the job's batch size and reports,
// per layer, the median forward and backward milliseconds, the output
// activation bytes and the parameter bytes (PipeDream's profile quantities),
// as a ModelProfile (proto/plan.proto). Also measures the device's dense
// GEMM throughput, and the short GEMM probe a worker reports its speed with
// at registration (the planner's per-worker speed, docs/operations.md
// "Workers of unequal speed").
//
// Not thread-safe: one call at a time per device.
#ifndef AQUEDUCT_WORKER_PROFILER_H_
#define AQUEDUCT_WORKER_PROFILER_H_

#include "absl/status/statusor.h"
#include "common/device/device.h"
#include "common/file_system.h"
#include "proto/types.h"

namespace aqueduct {

struct ProfilerOptions {
  int warmup_iterations = 2;
  int measured_iterations = 5;
  // Measure GEMM throughput too (a 1024^3 sgemm).
  bool measure_gemm = true;
  // The device's memory, which profiling the whole model must fit (0: the
  // host's physical memory, what a CPU worker registers).
  int64_t memory_bytes = 0;
  // Where the spec's data may be read (a worker's --data_root; every path
  // for `aq profile`).
  FileAccess files = FileAccess::Anywhere();
  // A worker's --slowdown (tests and benchmarks of unequal workers): after
  // each timed pass the profiler sleeps (slowdown - 1) times the pass's
  // time inside the timed interval, as PipelineStage does, so that the
  // profile measures the slowed worker. At least 1 (CheckSlowdown).
  double slowdown = 1.0;
};

// OK for a finite slowdown >= 1; else INVALID_ARGUMENT saying what it
// must be (the caller names its flag or field).
absl::Status CheckSlowdown(double slowdown);

// INVALID_ARGUMENT for a bad spec or options; RESOURCE_EXHAUSTED, before
// anything is allocated, when the model's parameters (with the copies the
// profiler keeps) and one minibatch's activations would not fit
// options.memory_bytes, naming the layer that holds the most.
absl::StatusOr<ModelProfile> ProfileModel(const JobSpec& spec, Device* device,
                                          const ProfilerOptions& options);

// Dense fp32 GEMM throughput (GFLOP/s) of an n x n x n product, the median
// of `iterations` runs, each slowed by `slowdown` (ProfilerOptions').
absl::StatusOr<double> MeasureGemmGflops(Device* device, int n, int iterations,
                                         double slowdown = 1.0);

// The worker's speed probe (DeviceInfo.gemm_gflops at registration): the
// throughput of the fastest of `iterations` n x n x n GEMMs, each slowed
// by `slowdown`. The fastest, not the median: other processes on the host
// only ever add time, and workers started together probe together.
absl::StatusOr<double> MeasureSpeedProbe(Device* device, int n, int iterations,
                                         double slowdown = 1.0);

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_PROFILER_H_
