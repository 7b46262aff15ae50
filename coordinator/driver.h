// The job driver (issue 22): what happens to a job between PENDING and
// RUNNING, on the core's executor (one task per job). Profile the model on
// the first reserved worker (unless the job came with a profile), plan,
// record the plan and the assignment, assign the stages, start them. The
// job may be cancelled or failed meanwhile: every step that touches the
// table takes the core's mutex and checks the job is still PLANNING the
// same attempt. A worker that refuses an assignment because it still ends
// an earlier attempt of the job is asked again for up to
// worker_rpc_timeout before the refusal counts as the attempt's failure.
// Worker RPCs run without the mutex, each with a deadline.
//
// Thread-safety: thread-safe; Drive takes the core's mutex (`mu`) for
// each step that reads or records.
#ifndef AQUEDUCT_COORDINATOR_DRIVER_H_
#define AQUEDUCT_COORDINATOR_DRIVER_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/executor.h"
#include "coordinator/job_events.h"
#include "coordinator/job_table.h"
#include "coordinator/options.h"
#include "coordinator/planning.h"
#include "coordinator/profile_cache.h"
#include "coordinator/registry.h"
#include "coordinator/worker_client.h"
#include "proto/service_types.h"

namespace aqueduct {

class JobDriver {
 public:
  // `mu` guards `registry` and `jobs` (the core's mutex); `executor` runs
  // the plans made ahead (the core's, joined before this is destroyed).
  // Keeps the references; all must outlive it.
  JobDriver(const CoordinatorOptions& options, absl::Mutex& mu,
            Registry& registry, JobTable& jobs, JobEvents& events,
            const WorkerClientFactory& worker_clients, JournalAccessor journal,
            BoundedExecutor& executor);

  // Drives the PLANNING job `job_id` to RUNNING (or fails or restarts
  // it); blocks on worker RPCs. Call without the core's mutex.
  void Drive(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);

  // The plan of `spec` for `workers` workers from `profile`, on one level
  // at the spec's bandwidth, with the pipeline decided into it (schedule
  // "auto" picks one that fits `worker_memory` bytes per worker; 0:
  // unknown).
  static absl::StatusOr<PartitionPlan> PlanFor(
      const JobSpec& spec, const ModelProfile& profile, int workers,
      int64_t worker_memory = 0, double step_latency_s = kRingStepLatencyS);

 private:
  // What Drive reads of the job, under the mutex, once.
  struct Input {
    JobSpec spec;
    ModelProfile profile;
    bool has_profile = false;
    std::vector<std::string> reserved, addresses;
    // Each reserved worker's memory (0: not known), for CheckPlanFits.
    std::vector<int64_t> memory_bytes;
    // Each reserved worker's link probe port (0: none).
    std::vector<int> link_probe_ports;
    // Each reserved worker's host, compute threads and host cores (0: not
    // reported), for the collectives' latency (planning.h).
    std::vector<HostShare> shares;
    // Each reserved worker's device (empty: not known); the model is
    // profiled once on each kind of device among them.
    std::vector<v1::DeviceInfo> devices;
    // Each reserved worker's speed relative to the fastest, from their
    // speed probes (coordinator/speeds.h); empty when they are equally
    // fast, or of several kinds (planned on the slowest kind's profile).
    std::vector<double> speeds;
    int attempt = 0;
    v1::CheckpointManifest restore;
    std::map<int, PartitionPlan> ready_plans;
  };
  using Assignments = std::vector<std::pair<std::string, StageAssignment>>;

  // False when the job is no longer PLANNING.
  bool ReadInput(const std::string& job_id, Input* in) ABSL_LOCKS_EXCLUDED(mu_);
  // Puts reserved worker order[r] (and all that `in` knows of it) at r.
  static void ReorderWorkers(const std::vector<int>& order, Input& in);
  absl::StatusOr<PartitionPlan> ProfileAndPlan(Input& in);
  // The model's profile: measured on the first reserved worker (the
  // fastest, when their speeds differ), or an earlier job's of the same
  // model on the same kind of worker (options.reuse_profiles).
  absl::Status Profile(Input& in);
  // The profile of the kind of device reserved worker `i` has, from the
  // cache or measured on that worker.
  absl::StatusOr<ModelProfile> ProfileOn(const Input& in, size_t i);
  // pipeline.topology "measured" (coordinator/topology.h): the reserved
  // workers measure their links, `in`'s workers are reordered group by
  // group and the plan is made on the measured levels; on the spec's flat
  // level, with the reason in plan.topology.note, when measuring fails.
  absl::StatusOr<PartitionPlan> PlanOnMeasuredLinks(Input& in);
  // Makes the plans for fewer workers than `in` has, and keeps them with
  // the job (ready_plans) for restarts.
  void PlanAhead(const std::string& job_id, const Input& in)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Records the plan and the assignment; frees workers the plan leaves
  // idle. False when the job is no longer PLANNING.
  bool RecordPlan(const std::string& job_id, const Input& in,
                  const PartitionPlan& plan, Assignments* assignments)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status AssignAndStart(const std::string& job_id, int attempt,
                              const Assignments& assignments)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The stages are started: the job RUNNING, its start journaled, the
  // plans for fewer workers made ahead.
  void MarkRunning(const std::string& job_id, const Input& in)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The job of `job_id` when it is still PLANNING `attempt`; else null.
  Job* PlanningLocked(const std::string& job_id, int attempt)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails the job (whatever it is doing now, as long as it has not ended).
  void Fail(const std::string& job_id, const std::string& reason)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A worker could not be assigned or started: probe and restart (or fail
  // when no restarts are left).
  void Restart(const std::string& job_id, int attempt,
               const std::string& reason) ABSL_LOCKS_EXCLUDED(mu_);

  const CoordinatorOptions& options_;
  absl::Mutex& mu_;
  Registry& registry_ ABSL_GUARDED_BY(mu_);
  JobTable& jobs_ ABSL_GUARDED_BY(mu_);
  JobEvents& events_ ABSL_GUARDED_BY(mu_);
  const WorkerClientFactory& worker_clients_;
  const JournalAccessor journal_;
  BoundedExecutor& executor_;
  ProfileCache profiles_;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_DRIVER_H_
