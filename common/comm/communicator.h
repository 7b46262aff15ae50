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

// A send, or a receive into caller-owned memory, in progress.
class Work {
 public:
  virtual ~Work() = default;
  // A send: OK once the message is handed to the transport (or delivered).
  // A receive into a buffer: OK once the bytes are there. Otherwise
  // DEADLINE_EXCEEDED naming the peer and tag, or the transport's error.
  virtual absl::Status Wait(absl::Time deadline) = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::unique_ptr<Work> Send(int peer, uint64_t tag,
                                     std::string message) = 0;
  virtual std::unique_ptr<RecvWork> Recv(int peer, uint64_t tag) = 0;
  // Messages whose size both sides know (pipeline frames, all-reduce
  // buffers): one transfer, no length prefix. A message sent with SendExact
  // must be received with RecvExact of the same size, and vice versa.
  virtual std::unique_ptr<Work> SendExact(int peer, uint64_t tag,
                                          std::string message) {
    return Send(peer, tag, std::move(message));
  }
  virtual std::unique_ptr<RecvWork> RecvExact(int peer, uint64_t tag,
                                              size_t bytes) {
    (void)bytes;
    return Recv(peer, tag);
  }
  // Transfers of caller-owned memory, for tensors: no copy and no
  // allocation on the way where the transport allows it (Gloo sends and
  // receives in place). `bytes` must match on both sides, as for
  // SendExact/RecvExact (which they are compatible with). The memory must
  // stay valid, and a send's unchanged, until Wait has returned; a send
  // holds `keep_alive` until then. The defaults copy through
  // SendExact/RecvExact.
  virtual std::unique_ptr<Work> SendBuffer(
      int peer, uint64_t tag, const void* data, size_t bytes,
      std::shared_ptr<const void> keep_alive);
  virtual std::unique_ptr<Work> RecvBuffer(int peer, uint64_t tag, void* data,
                                           size_t bytes);
  // Sums `data` element-wise across `group` (ranks, ascending, including
  // this one); every member gets the sum. `sequence` distinguishes
  // successive all-reduces of the same group.
  virtual absl::Status AllReduce(const std::vector<int>& group,
                                 uint64_t sequence, float* data, size_t n,
                                 absl::Time deadline) = 0;
  // Makes every wait in progress, and every later operation, end promptly
  // with CANCELLED (a StopJob while a stage waits on a silent peer). Any
  // thread may call it; the communicator is not usable afterwards.
  virtual void Abort() = 0;
  // Bytes handed to and taken from the transport so far.
  virtual int64_t bytes_sent() const = 0;
  virtual int64_t bytes_received() const = 0;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_COMM_COMMUNICATOR_H_
