// NCCL device channels: for each (kind, from rank, to rank) a pipeline
// needs, a two-rank NcclCommunicator (the sender is its rank 0) with its
// own stream, so the transfers of one direction and kind between two
// workers complete in order and never queue behind another channel's (a
// receive posted ahead cannot block a send). Each transfer records an event
// on the channel's stream; Wait(ticket) polls that event with NCCL's
// asynchronous error checks and the deadline.
//
// Never run on a GPU yet (docs/gpu.md). Built only with the CUDA toolkit.
#ifndef AQUEDUCT_COMMON_COMM_NCCL_NCCL_CHANNELS_H_
#define AQUEDUCT_COMMON_COMM_NCCL_NCCL_CHANNELS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/comm/device_channel.h"
#include "common/comm/rendezvous_store.h"

namespace aqueduct {

// Connects the channels among `keys` that `rank` takes part in, on GPU
// `device_ordinal`, through `store` under `prefix`. Every rank of the job
// passes the same keys; channels are connected in the keys' sorted order
// on every rank, so two ranks never wait for each other on different
// channels. Fails naming the channel that could not connect by `timeout`.
absl::StatusOr<std::unique_ptr<DeviceChannels>> ConnectNcclChannels(
    RendezvousStore* store, const std::string& prefix, int rank,
    std::vector<ChannelKey> keys, int device_ordinal, absl::Duration timeout);

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_COMM_NCCL_NCCL_CHANNELS_H_
