#include "common/grpc_health.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/resource_quota.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"

namespace aqueduct {
namespace {

// Reports `ready` under "" and `live` under the liveness name on `server`.
void Report(grpc::Server* server, bool ready, bool live) {
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  if (health == nullptr) return;
  health->SetServingStatus("", ready);
  health->SetServingStatus(HealthReporter::kLivenessService, live);
}

}  // namespace

absl::StatusOr<std::unique_ptr<HealthReporter>> HealthReporter::Start(
    const std::string& listen, const std::string& flag) {
  grpc::EnableDefaultHealthCheckService(true);
  std::unique_ptr<HealthReporter> reporter(new HealthReporter());
  if (listen.empty()) return reporter;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(),
                           &reporter->port_);
  // Nobody is authenticated here: keep what a caller can make the server
  // hold small (a health request is a service name).
  builder.SetMaxReceiveMessageSize(4096);
  grpc::ResourceQuota quota("health");
  quota.SetMaxThreads(8);
  builder.SetResourceQuota(quota);
  reporter->server_ = builder.BuildAndStart();
  if (reporter->server_ == nullptr || reporter->port_ == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": cannot listen on '", listen, "'"));
  }
  AQ_LOG_INFO("grpc.health.v1 alone, in plaintext, on port {}",
              reporter->port_);
  absl::MutexLock lock(&reporter->mu_);
  reporter->servers_.push_back(reporter->server_.get());
  reporter->ReportLocked();
  return reporter;
}

HealthReporter::~HealthReporter() { Shutdown(); }

void HealthReporter::AddServer(grpc::Server* server) {
  absl::MutexLock lock(&mu_);
  servers_.push_back(server);
  if (!stopping_) Report(server, ready_, true);
}

void HealthReporter::SetReady(bool ready) {
  absl::MutexLock lock(&mu_);
  if (stopping_ || ready == ready_) return;
  ready_ = ready;
  ReportLocked();
}

void HealthReporter::ReportLocked() {
  for (grpc::Server* server : servers_) Report(server, ready_, true);
}

void HealthReporter::Poll(std::function<bool()> ready,
                          absl::Duration interval) {
  poller_ = std::thread([this, ready = std::move(ready), interval] {
    while (true) {
      // Outside mu_: `ready` may take the caller's own locks.
      const bool now_ready = ready();
      SetReady(now_ready);
      absl::MutexLock lock(&mu_);
      auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_;
      };
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping), interval)) return;
    }
  });
}

void HealthReporter::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    ready_ = false;
    for (grpc::Server* server : servers_) Report(server, false, false);
  }
  if (poller_.joinable()) poller_.join();
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::seconds(1));
    server_->Wait();
  }
}

}  // namespace aqueduct
