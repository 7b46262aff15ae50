// The worker agent: registers with the coordinator (retrying with
// exponential backoff and jitter while it is unreachable), heartbeats,
// reports the runtime's progress a few times a second, stops jobs the
// coordinator says are over, and re-registers under a new incarnation if the
// coordinator fenced it or let its lease expire (its old job is then
// stopped: the coordinator has failed it).
//
// Thread-safe. Start() spawns the agent's thread; Stop() deregisters and
// joins it.
#ifndef AQUEDUCT_WORKER_AGENT_H_
#define AQUEDUCT_WORKER_AGENT_H_

#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "proto/service.grpc.pb.h"
#include "worker/runtime/stage_runtime.h"

namespace aqueduct {

struct AgentOptions {
  std::string coordinator_address;
  // Identity sent on registration (the incarnation is generated).
  WorkerInfo info;
  absl::Duration rpc_timeout = absl::Seconds(5);
  absl::Duration initial_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(5);
  absl::Duration progress_interval = absl::Milliseconds(250);
};

class WorkerAgent {
 public:
  WorkerAgent(const AgentOptions& options, StageRuntime* runtime);
  ~WorkerAgent();

  void Start();
  // Deregisters (best effort, bounded by the RPC timeout) and stops.
  void Stop();
  // Blocks until registered or `timeout`; true if registered.
  bool WaitRegistered(absl::Duration timeout);
  WorkerInfo info() const;

 private:
  void Loop();
  bool Register();  // One attempt.
  void NewIncarnation();
  void SendProgress();

  AgentOptions options_;
  StageRuntime* runtime_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
  mutable absl::Mutex mu_;
  WorkerInfo info_ ABSL_GUARDED_BY(mu_);
  bool registered_ ABSL_GUARDED_BY(mu_) = false;
  absl::Duration heartbeat_interval_ ABSL_GUARDED_BY(mu_) = absl::Seconds(1);
  std::atomic<bool> stopping_{false};
  std::mt19937_64 rng_;
  std::thread thread_;
};

// A fresh random incarnation id.
std::string NewIncarnationId();

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_AGENT_H_
