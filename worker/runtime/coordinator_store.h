// The coordinator's rendezvous store (StoreSet/StoreGet RPCs) as a
// RendezvousStore for the Gloo communicator. Thread-safe.
#ifndef AQUEDUCT_WORKER_RUNTIME_COORDINATOR_STORE_H_
#define AQUEDUCT_WORKER_RUNTIME_COORDINATOR_STORE_H_

#include <chrono>
#include <memory>
#include <string>

#include "common/comm/gloo_communicator.h"
#include "common/grpc_status.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "proto/service.grpc.pb.h"

namespace aqueduct {

class CoordinatorStore final : public RendezvousStore {
 public:
  explicit CoordinatorStore(const std::string& address)
      : stub_(v1::Coordinator::NewStub(grpc::CreateChannel(
            address, grpc::InsecureChannelCredentials()))) {}

  absl::Status Set(const std::string& key, const std::string& value) override {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(10));
    v1::StoreSetRequest request;
    request.set_key(key);
    request.set_value(value);
    v1::StoreSetResponse response;
    return FromGrpcStatus(stub_->StoreSet(&ctx, request, &response));
  }

  absl::StatusOr<std::string> Get(const std::string& key,
                                  absl::Duration wait) override {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     absl::ToChronoMilliseconds(wait) +
                     std::chrono::seconds(5));
    v1::StoreGetRequest request;
    request.set_key(key);
    request.set_wait_ms(absl::ToInt64Milliseconds(wait));
    v1::StoreGetResponse response;
    const grpc::Status s = stub_->StoreGet(&ctx, request, &response);
    if (!s.ok()) return FromGrpcStatus(s);
    return response.value();
  }

 private:
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_RUNTIME_COORDINATOR_STORE_H_
