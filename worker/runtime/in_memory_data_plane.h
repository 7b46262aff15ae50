// A data plane within one process, for in-process tests of the stage
// runtime: the ranks of a job (runtimes on threads) share an InMemoryHub,
// and, when the job's pipeline.transport is "nccl", an InMemoryChannelHub
// standing in for NCCL (tensors on device channels, headers on the
// communicator). Ranks meet through the rendezvous store as over Gloo:
// each publishes "<rendezvous_key>mem/<rank>" and waits for the others.
//
// When a rank's communicator is destroyed (its stage ended, failed or was
// stopped), the hub marks the rank gone, so its peers' waits end with
// UNAVAILABLE as over TCP when a worker's connections close; messages it
// sent before stay deliverable.
//
// Thread-safety: thread-safe.
#ifndef AQUEDUCT_WORKER_RUNTIME_IN_MEMORY_DATA_PLANE_H_
#define AQUEDUCT_WORKER_RUNTIME_IN_MEMORY_DATA_PLANE_H_

#include <map>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "common/comm/in_memory.h"
#include "common/comm/in_memory_channels.h"
#include "worker/runtime/data_plane.h"

namespace aqueduct {

class InMemoryDataPlaneFactory final : public DataPlaneFactory {
 public:
  absl::StatusOr<DataPlane> Connect(const JobLayout& layout,
                                    const std::string& rendezvous_key,
                                    RendezvousStore* store,
                                    absl::Duration timeout,
                                    const std::atomic<bool>* stop) override;

  // Tensors sent over in-memory device channels so far (all jobs).
  int channel_sends();

 private:
  struct Job {
    std::shared_ptr<InMemoryHub> hub;
    std::shared_ptr<InMemoryChannelHub> channels;
  };
  // The hubs of the job under `rendezvous_key`, made by its first rank.
  absl::StatusOr<Job> JobFor(const std::string& rendezvous_key, int world_size);

  absl::Mutex mu_;
  std::map<std::string, Job> jobs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_RUNTIME_IN_MEMORY_DATA_PLANE_H_
