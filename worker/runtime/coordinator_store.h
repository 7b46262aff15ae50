// The coordinator's rendezvous store (the StoreSet/StoreGet/StoreAdd RPCs)
// as a RendezvousStore, for the Gloo communicator and NCCL channels of a
// pipeline job. Goes through a CoordinatorClient, so tests pass a fake.
//
// Thread-safe (as the CoordinatorClient it uses).
#ifndef AQUEDUCT_WORKER_RUNTIME_COORDINATOR_STORE_H_
#define AQUEDUCT_WORKER_RUNTIME_COORDINATOR_STORE_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/comm/rendezvous_store.h"
#include "common/coordinator_client.h"

namespace aqueduct {

class CoordinatorStore final : public RendezvousStore {
 public:
  // Deadline of a Set or Add, and what a Get's deadline adds to its wait.
  static constexpr absl::Duration kSetTimeout = absl::Seconds(10);
  static constexpr absl::Duration kGetSlack = absl::Seconds(5);

  // Over `client`, which must outlive the store.
  explicit CoordinatorStore(CoordinatorClient* client) : client_(client) {}

  absl::Status Set(const std::string& key, const std::string& value) override {
    v1::StoreSetRequest request;
    request.set_key(key);
    request.set_value(value);
    return client_->StoreSet(request, kSetTimeout);
  }

  // Waits up to `wait` on the coordinator for the key; DEADLINE_EXCEEDED
  // (naming the key) if it is not set by then.
  absl::StatusOr<std::string> Get(const std::string& key,
                                  absl::Duration wait) override {
    v1::StoreGetRequest request;
    request.set_key(key);
    request.set_wait_ms(absl::ToInt64Milliseconds(wait));
    absl::StatusOr<v1::StoreGetResponse> response =
        client_->StoreGet(request, wait + kGetSlack);
    if (!response.ok()) return response.status();
    return std::move(*response->mutable_value());
  }

  // Adds `delta` to the counter at `key` (0 if unset); returns its new value.
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) {
    v1::StoreAddRequest request;
    request.set_key(key);
    request.set_delta(delta);
    absl::StatusOr<v1::StoreAddResponse> response =
        client_->StoreAdd(request, kSetTimeout);
    if (!response.ok()) return response.status();
    return response->value();
  }

 private:
  CoordinatorClient* const client_;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_RUNTIME_COORDINATOR_STORE_H_
