// Communicator: point-to-point messages between the ranks of a job and
// all-reduce within a group of ranks. Implementations: InMemoryCommunicator
// (tests; common/comm/in_memory.h) and, on the data plane, Gloo over TCP.
//
// Messages are byte strings identified by (source, destination, tag); a
// receive matches the oldest message with its source and tag. Sends are
// asynchronous and never block on the receiver beyond buffering; every wait
// has a deadline.
//
// Thread-safety: a Communicator may be used from several threads (one
// sender and one receiver loop, say) at once.
#ifndef AQUEDUCT_COMMON_COMM_COMMUNICATOR_H_
#define AQUEDUCT_COMMON_COMM_COMMUNICATOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace aqueduct {

class RecvWork {
 public:
  virtual ~RecvWork() = default;
  // The message, or DEADLINE_EXCEEDED naming the peer and tag, or the
  // transport's error.
  virtual absl::StatusOr<std::string> Wait(absl::Time deadline) = 0;
};

class SendWork {
 public:
  virtual ~SendWork() = default;
  // OK once the message is handed to the transport (or delivered).
  virtual absl::Status Wait(absl::Time deadline) = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::unique_ptr<SendWork> Send(int peer, uint64_t tag,
                                         std::string message) = 0;
  virtual std::unique_ptr<RecvWork> Recv(int peer, uint64_t tag) = 0;
  // Messages whose size both sides know (pipeline frames, all-reduce
  // buffers): one transfer, no length prefix. A message sent with SendExact
  // must be received with RecvExact of the same size, and vice versa.
  virtual std::unique_ptr<SendWork> SendExact(int peer, uint64_t tag,
                                              std::string message) {
    return Send(peer, tag, std::move(message));
  }
  virtual std::unique_ptr<RecvWork> RecvExact(int peer, uint64_t tag,
                                              size_t bytes) {
    (void)bytes;
    return Recv(peer, tag);
  }
  // Sums `data` element-wise across `group` (ranks, ascending, including
  // this one); every member gets the sum. `sequence` distinguishes
  // successive all-reduces of the same group.
  virtual absl::Status AllReduce(const std::vector<int>& group,
                                 uint64_t sequence, float* data, size_t n,
                                 absl::Time deadline) = 0;
  // Bytes handed to and taken from the transport so far.
  virtual int64_t bytes_sent() const = 0;
  virtual int64_t bytes_received() const = 0;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_COMM_COMMUNICATOR_H_
