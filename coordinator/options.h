// The coordinator's options, parsed from flags in the daemon's main and
// passed down to the core and its components. Plain values.
#ifndef AQUEDUCT_COORDINATOR_OPTIONS_H_
#define AQUEDUCT_COORDINATOR_OPTIONS_H_

#include <cstddef>

#include "absl/time/time.h"
#include "common/file_system.h"
#include "coordinator/kv_store.h"
#include "coordinator/registry.h"

namespace aqueduct {

struct CoordinatorOptions {
  RegistryOptions registry;
  // Where checkpoints may be (--checkpoint_root): a job's checkpoint.dir,
  // the manifests committed and the versions pruned, and the manifests
  // --resume reads, only under these (checkpoint_committer.h). The default
  // allows none: a job with a checkpoint.dir is refused.
  PathRoots checkpoint_roots;
  // The rendezvous store's limits (kv_store.h).
  KvStoreOptions store;
  // Calls that wait (StoreGet with a wait, WatchJob) each hold a server
  // thread: at most this many at once (RESOURCE_EXHAUSTED beyond), and a
  // StoreGet waits at most max_store_wait whatever it asks.
  int max_waiting_calls = 64;
  absl::Duration max_store_wait = absl::Seconds(60);
  // Timeout of each AssignStage/StartJob/StopJob call to a worker.
  absl::Duration worker_rpc_timeout = absl::Seconds(10);
  // Timeout of a Profile call.
  absl::Duration profile_timeout = absl::Seconds(300);
  // Later jobs of a model reuse the profile measured for an earlier one on
  // the same kind of worker (coordinator/profile_cache.h).
  bool reuse_profiles = true;
  // Default wait for workers when the spec sets none (infinite: no
  // deadline).
  absl::Duration default_wait_for_workers = absl::InfiniteDuration();
  // Finished jobs kept in the table.
  int max_finished_jobs = 1000;
  // Threads that drive jobs (profile, plan, assign) and stop workers, and
  // the most tasks that may wait for one.
  int driver_threads = 4;
  size_t driver_queue = 10000;
  // Timeout of each GetStatus call probing a job's workers after a stage
  // failed (a dead worker refuses at once; a hung one times out).
  absl::Duration probe_timeout = absl::Seconds(2);
  // After a restart of the coordinator, how long a running job waits for
  // its workers to register again before it restarts without them (the
  // lease is added to it).
  absl::Duration adoption_grace = absl::Seconds(5);
  // The queue (jobs/queue.h): pending jobs of all users together, and
  // unfinished jobs of one owner, beyond which SubmitJob is
  // RESOURCE_EXHAUSTED; the longest a job waits for workers, whatever its
  // spec's wait_for_workers_ms says; how long a job waits before it holds
  // back the idle workers it needs from later jobs.
  int max_pending_jobs = 1000;
  int max_jobs_per_user = 64;
  absl::Duration max_wait_for_workers = absl::Hours(1);
  absl::Duration reserve_after = absl::Minutes(5);
  // The highest JobSpec.priority a user credential may set (an admin's:
  // kMaxJobPriority; an unauthenticated caller's: any).
  int max_user_priority = 0;
  // The most bytes of statuses on one ListJobs page (at least one job):
  // under gRPC's default 4 MiB receive limit, whatever the client; a
  // running job's status with its loss curve is tens of KB.
  size_t max_jobs_page_bytes = size_t{3} << 20;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_OPTIONS_H_
