// The worker agent: registers with the coordinator (retrying with
// exponential backoff and jitter while it is unreachable), heartbeats,
// reports the runtime's progress a few times a second, stops jobs the
// coordinator says are over, and follows the lease protocol
// (docs/protocol.md, "Leases and incarnations"):
// - FAILED_PRECONDITION on a heartbeat or a registration (the incarnation
//   was fenced, its lease expired, or it left): the coordinator has failed
//   the worker's job, so the agent stops it, takes a new incarnation and
//   registers again;
// - NOT_FOUND on a heartbeat (the coordinator restarted and forgot the
//   worker): it registers again under the same incarnation.
// Progress reports the coordinator could not be reached for (UNAVAILABLE or
// DEADLINE_EXCEEDED) are kept, up to a bound, and delivered in order once
// it answers again: delivery is at least once (a report whose answer timed
// out may have been applied). Reports it refused are dropped, and so are
// those kept when the worker registers again.
//
// It talks to the coordinator through a CoordinatorClient and takes every
// timing decision (backoff, heartbeat and progress schedules) on an
// injected Clock. RunOnce() is one step of its loop; Start() runs the loop
// on a thread that sleeps, interruptibly, until the step it returned is
// due, so tests can drive RunOnce() by hand on a FakeClock instead.
//
// Thread-safe. Start() spawns the agent's thread; Stop() joins it, reports
// the last progress and deregisters. RunOnce() must not be called while
// the thread runs.
#ifndef AQUEDUCT_WORKER_AGENT_H_
#define AQUEDUCT_WORKER_AGENT_H_

#include <deque>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/coordinator_client.h"
#include "proto/service_types.h"

namespace aqueduct {

class StageRuntime;

struct AgentOptions {
  // The coordinator's host:port; used only by the constructor that builds
  // its own gRPC client.
  std::string coordinator_address;
  // Identity sent on registration (an empty incarnation is generated).
  WorkerInfo info;
  // Sent on registration: the secret the coordinator must present when it
  // calls this worker's service.
  std::string control_token;
  absl::Duration rpc_timeout = absl::Seconds(5);
  absl::Duration initial_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(5);
  absl::Duration progress_interval = absl::Milliseconds(250);
  // The coordinator's heartbeat interval is raised to at least this.
  absl::Duration min_heartbeat_interval = absl::Milliseconds(50);
  // Progress kept while the coordinator is unreachable; beyond this the
  // oldest reports are dropped.
  int64_t max_unsent_progress_bytes = int64_t{16} << 20;
  // Most progress bytes in one ReportProgress call (at least one report).
  int64_t max_report_bytes = int64_t{4} << 20;
  // Seeds the backoff jitter; 0 picks a random seed.
  uint64_t seed = 0;
};

// What the agent needs of the worker's stage runtime (StageRuntime in the
// daemon). Implementations must be thread-safe.
class AgentRuntime {
 public:
  virtual ~AgentRuntime() = default;
  // Progress since the previous call (empty when nothing happened).
  virtual std::vector<StageProgress> TakeProgress() = 0;
  // The job assigned or running ("" when idle).
  virtual std::string current_job() const = 0;
  // Stops `job_id` if it runs (a no-op otherwise).
  virtual absl::Status Stop(const std::string& job_id,
                            const std::string& reason) = 0;
  // The job attempt and stage assigned or running, claimed when the worker
  // registers again (nullopt when idle).
  virtual std::optional<v1::StageClaim> Claim() const { return std::nullopt; }
  // Stops `job_id` only if its attempt `attempt` runs (a later attempt,
  // assigned meanwhile, keeps running).
  virtual absl::Status StopAttempt(const std::string& job_id, int attempt,
                                   const std::string& reason) {
    (void)attempt;
    return Stop(job_id, reason);
  }
  // The coordinator asks `job_id` to checkpoint at `version`.
  virtual void RequestCheckpoint(const std::string& job_id, int64_t version) {
    (void)job_id;
    (void)version;
  }
};

class WorkerAgent {
 public:
  // `runtime`, `client` and `clock` are not owned and must outlive the
  // agent.
  WorkerAgent(const AgentOptions& options, AgentRuntime* runtime,
              CoordinatorClient* client, const Clock* clock);
  // The daemon's agent: the stage runtime, `client` (e.g. a gRPC client to
  // the coordinator) and the real clock. Both must outlive the agent.
  WorkerAgent(const AgentOptions& options, StageRuntime* runtime,
              CoordinatorClient* client);
  ~WorkerAgent();  // Stop().

  WorkerAgent(const WorkerAgent&) = delete;
  WorkerAgent& operator=(const WorkerAgent&) = delete;

  void Start();
  // Stops the loop, reports the progress left and deregisters (best
  // effort, each call bounded by the RPC timeout). Idempotent.
  void Stop();
  // Blocks until registered or `timeout` (real time); true if registered.
  bool WaitRegistered(absl::Duration timeout);
  WorkerInfo info() const;
  bool registered() const;

  // One step: registers if unregistered and its backoff has passed,
  // heartbeats if due, reports progress if due. Returns when the next step
  // is due, on the agent's clock. Blocks only for the RPCs it makes.
  absl::Time RunOnce();

 private:
  struct Unsent {
    StageProgress progress;
    int64_t bytes = 0;
  };

  WorkerAgent(const AgentOptions& options,
              std::unique_ptr<AgentRuntime> owned_runtime,
              CoordinatorClient* client);

  void Loop();
  // Sleeps until `deadline` on the clock or Stop(); false once stopping.
  bool SleepUntil(absl::Time deadline);
  // One registration attempt; schedules the next one on failure.
  bool RegisterLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_mu_);
  void HeartbeatLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_mu_);
  // The incarnation is final: stops its job, takes a new incarnation.
  void LoseIncarnationLocked(const absl::Status& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_mu_);
  // Registering again. The kept progress is dropped when it belongs to a
  // job the coordinator has failed (`keep_progress` false); it is kept for
  // a coordinator that restarted, which takes the running job back when
  // the worker registers with its claim.
  void SetUnregisteredLocked(absl::Time register_at, bool keep_progress)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_mu_);
  void SendProgressLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_mu_);
  void KeepProgressLocked(StageProgress progress)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_mu_);
  // Sends the oldest kept reports (up to max_report_bytes); false if the
  // coordinator could not be reached and they are kept.
  bool SendUnsentBatchLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_mu_);
  absl::Duration NextBackoffLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_mu_);
  void Deregister();

  const AgentOptions options_;
  // Set only by the daemon's constructor.
  std::unique_ptr<AgentRuntime> owned_runtime_;
  std::unique_ptr<CoordinatorClient> owned_client_;
  AgentRuntime* const runtime_;
  CoordinatorClient* const client_;
  const Clock* const clock_;

  // Shared with callers of info(), registered(), WaitRegistered(), Stop().
  mutable absl::Mutex mu_;
  WorkerInfo info_ ABSL_GUARDED_BY(mu_);
  bool registered_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  // The loop's state, held for a whole step (and by Stop's last report).
  // Lock order: loop_mu_, then mu_.
  absl::Mutex loop_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  absl::Duration heartbeat_interval_ ABSL_GUARDED_BY(loop_mu_) =
      absl::Seconds(1);
  absl::Duration backoff_ ABSL_GUARDED_BY(loop_mu_);
  absl::Time next_register_ ABSL_GUARDED_BY(loop_mu_) = absl::InfinitePast();
  absl::Time next_heartbeat_ ABSL_GUARDED_BY(loop_mu_) = absl::InfinitePast();
  absl::Time next_progress_ ABSL_GUARDED_BY(loop_mu_) = absl::InfinitePast();
  std::deque<Unsent> unsent_ ABSL_GUARDED_BY(loop_mu_);
  int64_t unsent_bytes_ ABSL_GUARDED_BY(loop_mu_) = 0;
  std::mt19937_64 rng_ ABSL_GUARDED_BY(loop_mu_);
  // Reports refused in a row as of an unknown worker or job while this
  // worker claims a job: kept for a restarted coordinator a few times (it
  // learns the claim when the worker registers again), then dropped.
  static constexpr int kMaxRefusedAsUnknown = 3;
  // The finished report of a stage, in summary (no losses, logs or
  // events): sent again after every registration that claims its attempt,
  // so that a coordinator that restarted after the report reached it (and
  // so never journaled it) learns that the stage finished and ends the job
  // (issue 22, item 2). The coordinator takes final figures once.
  std::optional<StageProgress> final_report_ ABSL_GUARDED_BY(loop_mu_);
  int refused_as_unknown_ ABSL_GUARDED_BY(loop_mu_) = 0;

  std::thread thread_;
};

// A fresh random incarnation id.
std::string NewIncarnationId();

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_AGENT_H_
