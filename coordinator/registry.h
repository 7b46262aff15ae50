// The worker registry: who is registered, with which incarnation, and
// whether their lease holds. Pure logic over an injected clock.
//
// Leases: a worker heartbeats every heartbeat_interval; after missing
// `suspect_after_missed` intervals it is SUSPECT (not given new work), and
// after `dead_after` without a heartbeat it is DEAD (its job fails). DEAD,
// LEFT (deregistered) and FENCED (superseded) are final for an incarnation:
// its later calls get FAILED_PRECONDITION and it must register again, which
// a restarted worker does with a new incarnation anyway.
//
// Registration with the same incarnation is idempotent; a new incarnation of
// a known worker id fences the old one. A worker whose major version differs
// from the coordinator's is refused, naming both versions.
//
// Not thread-safe: the coordinator holds its own mutex around it.
#ifndef AQUEDUCT_COORDINATOR_REGISTRY_H_
#define AQUEDUCT_COORDINATOR_REGISTRY_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "proto/service_types.h"

namespace aqueduct {

struct RegistryOptions {
  absl::Duration heartbeat_interval = absl::Seconds(1);
  int suspect_after_missed = 3;
  absl::Duration dead_after = absl::Seconds(10);
  // The coordinator's version; workers must share its major version.
  std::string version;
};

// A worker's state changed (reported by Tick and by Register when it fences).
struct WorkerTransition {
  std::string worker_id;
  std::string incarnation;
  WorkerState from;
  WorkerState to;
  // The job it was assigned to, if any.
  std::string job_id;
  std::string detail;
};

class Registry {
 public:
  Registry(const RegistryOptions& options, const Clock* clock);

  // Registers or re-registers. INVALID_ARGUMENT for a missing id,
  // incarnation or address; FAILED_PRECONDITION for a major-version
  // mismatch or a re-registration of a fenced/dead incarnation.
  // `transitions` receives the fencing of an older incarnation, if any.
  absl::Status Register(const WorkerInfo& info,
                        std::vector<WorkerTransition>* transitions);

  // Renews the lease. NOT_FOUND for an unknown worker; FAILED_PRECONDITION
  // for a stale incarnation or a lease that already expired.
  absl::Status Heartbeat(const std::string& worker_id,
                         const std::string& incarnation);

  // Checks that (worker_id, incarnation) is the live registration, for any
  // call a worker makes (progress reports).
  absl::Status CheckLive(const std::string& worker_id,
                         const std::string& incarnation) const;

  // Marks the worker LEFT. Same errors as Heartbeat.
  absl::Status Deregister(const std::string& worker_id,
                          const std::string& incarnation,
                          std::vector<WorkerTransition>* transitions);

  // Re-evaluates every lease against the clock; returns what changed.
  std::vector<WorkerTransition> Tick();

  // Declares the worker DEAD before its lease runs out (it refused a
  // connection: its process is gone). Returns the transition, or nothing
  // when it is unknown or already final.
  std::vector<WorkerTransition> MarkDead(const std::string& worker_id,
                                         const std::string& detail);

  // Healthy workers with no job, in registration order.
  std::vector<std::string> IdleHealthyWorkers() const;
  // Assignment bookkeeping (the job manager's).
  void Assign(const std::string& worker_id, const std::string& job_id,
              int stage, int replica);
  void Release(const std::string& worker_id, const std::string& job_id);

  std::vector<WorkerStatus> List() const;
  // NOT_FOUND for an unknown worker.
  absl::StatusOr<WorkerStatus> Get(const std::string& worker_id) const;

  const RegistryOptions& options() const { return options_; }

 private:
  struct Entry {
    WorkerStatus status;
    absl::Time last_heartbeat;
    int64_t order = 0;
  };
  WorkerState StateAt(const Entry& e, absl::Time now) const;
  absl::Status CheckIncarnation(const Entry& e, const std::string& worker_id,
                                const std::string& incarnation) const;

  RegistryOptions options_;
  const Clock* clock_;
  std::map<std::string, Entry> workers_;
  int64_t next_order_ = 0;
};

const char* WorkerStateName(WorkerState state);

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_REGISTRY_H_
