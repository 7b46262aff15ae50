// The coordinator's rendezvous store (the StoreSet/StoreGet/StoreAdd RPCs)
// as a RendezvousStore, for the Gloo communicator and NCCL channels of a
// pipeline job. Goes through a CoordinatorClient, so tests pass a fake.
//
// Thread-safe (as the CoordinatorClient it uses).
#ifndef AQUEDUCT_WORKER_RUNTIME_COORDINATOR_STORE_H_
#define AQUEDUCT_WORKER_RUNTIME_COORDINATOR_STORE_H_

#include <algorithm>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
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
  // (naming the key) if it is not set by then. The coordinator bounds its
  // waiting calls (--max_waiting_calls): when it is busy (RESOURCE_EXHAUSTED)
  // the wait goes on by polling, with backoff, until the same deadline.
  absl::StatusOr<std::string> Get(const std::string& key,
                                  absl::Duration wait) override {
    const absl::Time deadline = absl::Now() + wait;
    absl::Duration backoff = absl::Milliseconds(20);
    while (true) {
      v1::StoreGetRequest request;
      request.set_key(key);
      const absl::Duration left =
          std::max(deadline - absl::Now(), absl::ZeroDuration());
      request.set_wait_ms(absl::ToInt64Milliseconds(left));
      absl::StatusOr<v1::StoreGetResponse> response =
          client_->StoreGet(request, left + kGetSlack);
      if (response.ok()) return std::move(*response->mutable_value());
      if (!absl::IsResourceExhausted(response.status()) ||
          absl::Now() + backoff >= deadline) {
        return response.status();
      }
      absl::SleepFor(backoff);
      backoff = std::min(backoff * 2, absl::Milliseconds(500));
    }
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
