// grpc.health.v1 for the daemons, on gRPC's default health service. Each
// daemon reports two service names:
// - "" (readiness): the daemon can do its work. The coordinator once its
//   journal is loaded and it serves; a worker while it is registered with
//   its coordinator.
// - "liveness": SERVING while the process serves at all. A liveness probe
//   must not restart a worker that merely waits for its coordinator (the
//   worker keeps training through a coordinator restart), so it asks this
//   name, not readiness.
// Both names are reported on every server added (the daemon's own server,
// reachable with its TLS credentials and no bearer token: the health
// service is not behind the adapters' authentication) and, with a health
// listen address, on a plaintext server that carries grpc.health.v1 alone.
// That one is for probes that cannot present TLS credentials (Kubernetes'
// gRPC probe, which speaks plaintext): it tells nothing but these two
// states, so it may listen off loopback without --insecure.
//
// Thread-safe.
#ifndef AQUEDUCT_COMMON_GRPC_HEALTH_H_
#define AQUEDUCT_COMMON_GRPC_HEALTH_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/server.h"

namespace aqueduct {

class HealthReporter {
 public:
  // The service name a liveness probe asks.
  static constexpr char kLivenessService[] = "liveness";

  // Enables gRPC's default health service for every server built from now
  // on and, unless `listen` is empty, serves it alone in plaintext on
  // `listen` (host:port; port 0 picks one, see port()). Readiness starts
  // NOT_SERVING, liveness SERVING. INVALID_ARGUMENT naming `flag` if it
  // cannot listen there.
  static absl::StatusOr<std::unique_ptr<HealthReporter>> Start(
      const std::string& listen, const std::string& flag);

  ~HealthReporter();  // Shutdown().
  HealthReporter(const HealthReporter&) = delete;
  HealthReporter& operator=(const HealthReporter&) = delete;

  // The plaintext health server's port (0 without one).
  int port() const { return port_; }

  // Also reports on `server`'s default health service (the server was built
  // after Start()). Not owned; it must stay alive until Shutdown().
  void AddServer(grpc::Server* server);

  void SetReady(bool ready);

  // Calls `ready` every `interval` on a thread of its own and reports what
  // it returns, until Shutdown(). At most one poller.
  void Poll(std::function<bool()> ready, absl::Duration interval);

  // Stops polling, reports NOT_SERVING under both names and stops the
  // plaintext server. Idempotent; blocks for at most about a second.
  void Shutdown();

 private:
  HealthReporter() = default;
  void ReportLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::unique_ptr<grpc::Server> server_;  // null without a listen address
  int port_ = 0;

  absl::Mutex mu_;
  std::vector<grpc::Server*> servers_ ABSL_GUARDED_BY(mu_);
  bool ready_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread poller_;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_GRPC_HEALTH_H_
