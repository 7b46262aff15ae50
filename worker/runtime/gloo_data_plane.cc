#include "worker/runtime/gloo_data_plane.h"

#ifdef AQ_HAVE_CUDA
#include "common/comm/nccl/nccl_channels.h"
#endif

#include "common/comm/gloo_communicator.h"
#include "common/status.h"

namespace aqueduct {

namespace {

// The device channels of a pipeline with pipeline.transport "nccl".
absl::StatusOr<std::unique_ptr<DeviceChannels>> ConnectChannels(
    const JobLayout& layout, const std::string& prefix, RendezvousStore* store,
    const DeviceSpec& device, absl::Duration timeout) {
#ifdef AQ_HAVE_CUDA
  return ConnectNcclChannels(store, prefix, layout.rank,
                             PipelineChannelKeys(layout.pipeline),
                             device.ordinal, timeout);
#else
  (void)layout;
  (void)prefix;
  (void)store;
  (void)device;
  (void)timeout;
  return absl::FailedPreconditionError(
      "pipeline.transport=nccl: this worker was built without CUDA");
#endif
}

}  // namespace

absl::StatusOr<DataPlane> GlooDataPlaneFactory::Connect(
    const JobLayout& layout, const std::string& rendezvous_key,
    RendezvousStore* store, absl::Duration timeout,
    const std::atomic<bool>* stop) {
  const bool nccl = layout.policy.transport == v1::TRANSPORT_NCCL;
  // Before connecting to peers, so that every worker of the job fails
  // alike rather than some with a closed connection.
  if (nccl && options_.device.kind != DeviceKind::kCuda) {
    return absl::FailedPreconditionError(
        "pipeline.transport=nccl needs every worker of the job on a GPU "
        "(--device=cuda:N); this worker runs on the CPU");
  }
  DataPlane plane;
  ASSIGN_OR_RETURN(plane.comm, GlooCommunicator::Connect(
                                   store, rendezvous_key + "gloo/", layout.rank,
                                   layout.world_size, options_.advertise_host,
                                   timeout, stop));
  if (nccl) {
    ASSIGN_OR_RETURN(plane.channels,
                     ConnectChannels(layout, rendezvous_key + "nccl/", store,
                                     options_.device, timeout));
  }
  return plane;
}

}  // namespace aqueduct
