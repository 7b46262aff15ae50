// The daemon's data plane: a Gloo communicator over TCP among the ranks of
// a job, plus NCCL device channels (GPU to GPU) for the tensors when the
// job's pipeline.transport is "nccl". Ranks find each other through the
// rendezvous store (the coordinator's, in the daemon) under
// "<rendezvous_key>gloo/" and "<rendezvous_key>nccl/".
//
// Gloo's sockets listen on the advertised address only (a wildcard such as
// 0.0.0.0 is refused), and the addresses a rank puts in the store carry no
// other bytes of its memory (common/comm/gloo_address.h). Neither Gloo nor
// NCCL encrypts or authenticates what it sends: the workers' data links
// must be a trusted network or an encrypted one (WireGuard, IPsec).
//
// This is the one place that knows whether the binary has CUDA: NCCL
// channels exist only in CUDA builds; elsewhere a job asking for them fails
// with FAILED_PRECONDITION.
//
// Thread-safety: thread-safe (holds only its options).
#ifndef AQUEDUCT_WORKER_RUNTIME_GLOO_DATA_PLANE_H_
#define AQUEDUCT_WORKER_RUNTIME_GLOO_DATA_PLANE_H_

#include <string>

#include "common/device/factory.h"
#include "worker/runtime/data_plane.h"

namespace aqueduct {

struct GlooDataPlaneOptions {
  // The address peers reach this worker at, and the only one the data
  // plane listens on.
  std::string advertise_host = "127.0.0.1";
  // The worker's device: NCCL channels need a CUDA device, on this ordinal.
  DeviceSpec device;
};

class GlooDataPlaneFactory final : public DataPlaneFactory {
 public:
  explicit GlooDataPlaneFactory(GlooDataPlaneOptions options)
      : options_(std::move(options)) {}

  absl::StatusOr<DataPlane> Connect(const JobLayout& layout,
                                    const std::string& rendezvous_key,
                                    RendezvousStore* store,
                                    absl::Duration timeout,
                                    const std::atomic<bool>* stop) override;

 private:
  const GlooDataPlaneOptions options_;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_RUNTIME_GLOO_DATA_PLANE_H_
