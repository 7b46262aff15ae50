// The worker registry: who is registered, with which incarnation, and
// whether their lease holds. Pure logic over an injected clock.
//
// Leases: a worker heartbeats every heartbeat_interval; after missing
// `suspect_after_missed` intervals it is SUSPECT (not given new work), and
// after `dead_after` without a heartbeat it is DEAD (its job fails) --
// unless its job vouches for it (Vouch: the job kept committing steps,
// which a pipeline cannot do without every stage), when it is UNREACHABLE
// instead: cut off from the coordinator, not dead, its job left running,
// and DEAD once the vouching stops for `dead_after`. DEAD,
// LEFT (deregistered) and FENCED (superseded) are final for an incarnation:
// its later calls get FAILED_PRECONDITION and it must register again, which
// a restarted worker does with a new incarnation anyway.
//
// Time: leases run on the clock's monotonic reading (Clock::Now), so
// setting the system's clock changes nothing; the times shown
// (registered_at_ms, last_heartbeat_ms) are wall time. A coordinator that
// did not run for more than `stall_after` (SIGSTOP, a paused VM, a long
// swap) notices it on its next reading of the clock and gives every lease a
// fresh `dead_after`: silence it could not have heard is nobody's fault.
// A worker that stays silent after that dies as usual.
//
// Registration with the same incarnation is idempotent; a new incarnation of
// a known worker id fences the old one (and the job it ran restarts): that
// is how a restarted worker process takes its name back before its old
// lease runs out. Who may register a given id at all is decided before the
// registry, from the caller's credential (the gRPC adapter), so that a
// stranger cannot fence a live worker. A worker whose major version differs
// from the coordinator's is refused, naming both versions.
//
// Bounds: every field of a WorkerInfo is checked (CheckWorkerInfo) and at
// most `max_workers` ids are registered. DEAD and LEFT workers are
// forgotten `forget_after` after they ended (ForgetFinal), so that
// registrations that come and go do not pile up. An incarnation's own id
// is never shown to other callers by the coordinator (ListWorkers hides
// it), which keeps a stranger from speaking for a worker even without
// credentials.
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
  // Most worker ids registered at once (RESOURCE_EXHAUSTED beyond).
  int max_workers = 100000;
  // DEAD and LEFT workers are removed this long after they ended.
  absl::Duration forget_after = absl::Minutes(10);
  // A gap longer than this between two readings of the clock is a stall of
  // the coordinator itself (every lease starts afresh). Zero: max(dead_after
  // / 2, 1 s). The coordinator reads it at least every 100 ms (its tick).
  absl::Duration stall_after = absl::ZeroDuration();
};

// Bounds on a WorkerInfo's fields.
inline constexpr size_t kMaxWorkerIdBytes = 128;
inline constexpr size_t kMaxWorkerTextBytes = 256;

// OK when every field of `info` is within its bounds (ids of
// [A-Za-z0-9._:@-], at most kMaxWorkerIdBytes; `address` host:port with a
// valid port, at most 255 bytes; other strings at most kMaxWorkerTextBytes
// without control characters; numbers finite and non-negative);
// INVALID_ARGUMENT naming the first field that is not.
absl::Status CheckWorkerInfo(const WorkerInfo& info);
// OK when `worker_id` and `incarnation` are well-formed names (a call of a
// worker about itself); INVALID_ARGUMENT naming the field otherwise.
absl::Status CheckWorkerName(const std::string& worker_id,
                             const std::string& incarnation);

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

  // Registers or re-registers. INVALID_ARGUMENT for a field out of bounds
  // (CheckWorkerInfo); FAILED_PRECONDITION for a major-version mismatch or
  // a re-registration of a fenced/dead incarnation; RESOURCE_EXHAUSTED for
  // a new id when max_workers are registered. `transitions` receives the
  // fencing of an older incarnation, if any.
  absl::Status Register(const WorkerInfo& info,
                        std::vector<WorkerTransition>* transitions);

  // Renews the lease. INVALID_ARGUMENT for a malformed id or incarnation;
  // NOT_FOUND for an unknown worker; FAILED_PRECONDITION for a stale
  // incarnation or a lease that already expired (the message does not say
  // which incarnation is live). `before`, if given, receives the state Tick
  // last saw (UNREACHABLE: the worker is heard from again).
  absl::Status Heartbeat(const std::string& worker_id,
                         const std::string& incarnation,
                         WorkerState* before = nullptr);

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

  // Removes the workers that have been DEAD or LEFT for forget_after (as
  // Tick last saw them) and returns them as they were.
  std::vector<WorkerStatus> ForgetFinal();

  // Declares the worker DEAD before its lease runs out (it refused a
  // connection: its process is gone). Returns the transition, or nothing
  // when it is unknown or already final.
  std::vector<WorkerTransition> MarkDead(const std::string& worker_id,
                                         const std::string& detail);

  // The worker's job committed a step that needed it at a time when it
  // was silent: until `until`, an expired lease makes it UNREACHABLE
  // rather than DEAD. Unknown workers are ignored; Release forgets it.
  void Vouch(const std::string& worker_id, absl::Time until);

  // Healthy workers with no job, in registration order.
  std::vector<std::string> IdleHealthyWorkers() const;
  // Assignment bookkeeping (the job manager's).
  void Assign(const std::string& worker_id, const std::string& job_id,
              int stage, int replica);
  void Release(const std::string& worker_id, const std::string& job_id);

  // Every worker, in registration order.
  std::vector<WorkerStatus> List() const;
  // A page of workers in id order: those after `after` ("" for the
  // first), at most `max_count` of them and, past the first, at most
  // `max_bytes` serialized. `more` says whether any follow.
  std::vector<WorkerStatus> ListPage(const std::string& after, size_t max_count,
                                     size_t max_bytes, bool* more) const;
  size_t size() const { return workers_.size(); }
  // NOT_FOUND for an unknown worker.
  absl::StatusOr<WorkerStatus> Get(const std::string& worker_id) const;

  const RegistryOptions& options() const { return options_; }
  // Stalls of the coordinator noticed so far (each gave every lease a fresh
  // grace).
  int64_t stalls() const { return stalls_; }

 private:
  struct Entry {
    WorkerStatus status;
    absl::Time last_heartbeat;
    int64_t order = 0;
    // When it became DEAD or LEFT (the clock for forgetting it).
    absl::Time final_since = absl::InfiniteFuture();
    // Until when its job vouches for it (Vouch).
    absl::Time vouched_until = absl::InfinitePast();
  };
  // Reads the monotonic clock, noticing a stall of the coordinator (a gap
  // of more than StallThreshold since the last reading).
  absl::Time Observe() const;
  absl::Duration StallThreshold() const;
  WorkerState StateAt(const Entry& e, absl::Time now) const;
  WorkerStatus StatusAt(const Entry& e, absl::Time now) const;
  absl::Status CheckIncarnation(const Entry& e, const std::string& worker_id,
                                const std::string& incarnation) const;

  RegistryOptions options_;
  const Clock* clock_;
  std::map<std::string, Entry> workers_;
  int64_t next_order_ = 0;
  // Observe's: the latest reading, and the end of the latest stall (no
  // lease counts silence from before it). Mutable: a const query reads the
  // clock too. The coordinator's mutex guards them with the rest.
  mutable absl::Time last_seen_ = absl::InfinitePast();
  mutable absl::Time grace_from_ = absl::InfinitePast();
  mutable int64_t stalls_ = 0;
};

const char* WorkerStateName(WorkerState state);

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_REGISTRY_H_
