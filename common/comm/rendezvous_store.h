// RendezvousStore: where the ranks of a job publish and look up what they
// need to connect (Gloo addresses, the NCCL unique id). Implementations:
// CoordinatorStore (the coordinator's key-value store over gRPC) and
// LocalRendezvousStore (one process). Implementations are thread-safe.
#ifndef AQUEDUCT_COMMON_COMM_RENDEZVOUS_STORE_H_
#define AQUEDUCT_COMMON_COMM_RENDEZVOUS_STORE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace aqueduct {

// Where ranks publish and look up their addresses.
class RendezvousStore {
 public:
  virtual ~RendezvousStore() = default;
  virtual absl::Status Set(const std::string& key,
                           const std::string& value) = 0;
  // Waits up to `wait` for the key.
  virtual absl::StatusOr<std::string> Get(const std::string& key,
                                          absl::Duration wait) = 0;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_COMM_RENDEZVOUS_STORE_H_
