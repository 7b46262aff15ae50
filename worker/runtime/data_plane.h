// The data plane of a pipeline job: the communicator a stage sends frame
// headers (and, by default, tensors) and weights over, and the device
// channels that carry tensors device to device when the job's transport
// asks for them (pipeline.transport "nccl"). A DataPlaneFactory connects one
// worker's rank to the others of its job through a rendezvous store; the
// stage runtime is given one, so that what it connects over (Gloo and NCCL
// in the daemon: worker/runtime/gloo_data_plane.h; in-memory hubs in
// tests: worker/runtime/in_memory_data_plane.h) is decided where the
// runtime is built.
//
// Thread-safety: DataPlane::Abort may be called from any thread while the
// stage uses the data plane. Factories are thread-safe (several runtimes of
// one process may connect at once).
#ifndef AQUEDUCT_WORKER_RUNTIME_DATA_PLANE_H_
#define AQUEDUCT_WORKER_RUNTIME_DATA_PLANE_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/comm/communicator.h"
#include "common/comm/device_channel.h"
#include "common/comm/rendezvous_store.h"
#include "worker/runtime/layout.h"

namespace aqueduct {

// One rank's connections to the other ranks of its job.
struct DataPlane {
  std::unique_ptr<Communicator> comm;
  // Tensors travel over these when set; otherwise over `comm`.
  std::unique_ptr<DeviceChannels> channels;

  // Ends every wait in progress on either, and every later one, with
  // CANCELLED (a stop). Any thread.
  void Abort() const;
};

class DataPlaneFactory {
 public:
  virtual ~DataPlaneFactory() = default;
  // Connects rank `layout.rank` of `layout.world_size` to the others of its
  // job, which call this with the same layout and `rendezvous_key` (the
  // prefix of every key the ranks exchange through `store`). Blocks until
  // every rank has connected; DEADLINE_EXCEEDED or UNAVAILABLE naming the
  // problem by `timeout`; FAILED_PRECONDITION when the job's transport
  // cannot run on this worker (checked before anything is connected, so
  // every worker of the job fails alike). When `stop` (may be null)
  // becomes true the connect ends soon after with CANCELLED, whatever it
  // waits on: a stopped job must free its worker even while a peer never
  // answers. `store` and `stop` are not owned.
  virtual absl::StatusOr<DataPlane> Connect(const JobLayout& layout,
                                            const std::string& rendezvous_key,
                                            RendezvousStore* store,
                                            absl::Duration timeout,
                                            const std::atomic<bool>* stop) = 0;
};

// The device channels a pipeline needs: one per kind (activations,
// gradients) and pair of ranks that exchange tensors, identical on every
// rank.
std::vector<ChannelKey> PipelineChannelKeys(const PipelineLayout& layout);

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_RUNTIME_DATA_PLANE_H_
