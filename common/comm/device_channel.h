// DeviceChannels: transfers of device memory between the stages of a
// pipeline, for devices whose memory the host cannot address directly (GPU
// to GPU over NCCL). A channel carries one direction of one kind of traffic
// between two ranks (activations from rank a to rank b, say), so a channel
// has one sender and one receiver and its transfers complete in the order
// they were queued on both sides: a receive posted ahead never blocks a
// send in the other direction, or to another peer.
//
// Implementations: the NCCL channels (common/comm/nccl/nccl_channels.h,
// CUDA builds) and InMemoryDeviceChannels (tests, host memory).
#ifndef AQUEDUCT_COMMON_COMM_DEVICE_CHANNEL_H_
#define AQUEDUCT_COMMON_COMM_DEVICE_CHANNEL_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace aqueduct {

class DeviceChannel {
 public:
  virtual ~DeviceChannel() = default;
  // Queues the sending of `bytes` at `data` (device memory, ready: the
  // caller has synchronised the producer). The memory must stay valid and
  // unchanged until the transfer has completed. Returns a ticket for Wait.
  virtual absl::StatusOr<uint64_t> Send(const void* data, size_t bytes) = 0;
  // Queues a receive of `bytes` into `data`. Returns a ticket for Wait.
  virtual absl::StatusOr<uint64_t> Recv(void* data, size_t bytes) = 0;
  // Waits until transfer `ticket` (and so every one queued before it on
  // this channel) has completed; later ones may still be in flight.
  // DEADLINE_EXCEEDED (and a broken channel) at `deadline`, the transport's
  // error if a peer failed, CANCELLED after Abort.
  virtual absl::Status Wait(uint64_t ticket, absl::Time deadline) = 0;
};

// The channels of one rank. Kinds are small integers chosen by the user
// (the pipeline uses its frame kinds).
class DeviceChannels {
 public:
  virtual ~DeviceChannels() = default;
  // The channel for `kind` traffic from rank `from` to rank `to` (one of
  // them this rank); null if this rank has no such channel.
  virtual DeviceChannel* Get(int kind, int from, int to) = 0;
  // Ends every wait in progress and every later one with CANCELLED.
  virtual void Abort() = 0;
};

// One channel's identity.
struct ChannelKey {
  int kind = 0;
  int from = 0;
  int to = 0;
  bool operator<(const ChannelKey& o) const {
    if (kind != o.kind) return kind < o.kind;
    if (from != o.from) return from < o.from;
    return to < o.to;
  }
  bool operator==(const ChannelKey& o) const {
    return kind == o.kind && from == o.from && to == o.to;
  }
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_COMM_DEVICE_CHANNEL_H_
