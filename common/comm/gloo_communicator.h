// GlooCommunicator: the Communicator over TCP with Debian's Gloo. Ranks find
// each other through a rendezvous store (the coordinator's, in a job) and
// open a full mesh of TCP pairs. A message of any size travels as two Gloo
// transfers on a pair of slots derived from its tag: an 8-byte length, then
// the bytes. Between two ranks, messages in one direction must be received
// in the order they were sent (Gloo's TCP pairs deliver in order; the
// pipeline's schedules send and receive each direction in minibatch order).
// All-reduce sums on the group's first rank in rank order (a deterministic
// order) and sends the sum back.
//
// Thread-safety: thread-safe (Gloo pairs serialise their I/O).
#ifndef AQUEDUCT_COMMON_COMM_GLOO_COMMUNICATOR_H_
#define AQUEDUCT_COMMON_COMM_GLOO_COMMUNICATOR_H_

#include <atomic>
#include <memory>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/comm/communicator.h"
#include "common/comm/rendezvous_store.h"

namespace gloo {
class Context;
namespace transport {
class UnboundBuffer;
}
}  // namespace gloo

namespace aqueduct {

class GlooCommunicator final : public Communicator {
 public:
  // Connects `size` ranks: every rank calls this with the same prefix.
  // `hostname` is the address peers reach this rank at, and the only one
  // its sockets listen on (INVALID_ARGUMENT for a wildcard such as
  // 0.0.0.0; gloo_address.h). Each wait (for a rank's addresses in the
  // store, for one pair's TCP connection) is bounded by `timeout`: past it,
  // DEADLINE_EXCEEDED naming the rank (and, for a connection, its address);
  // UNAVAILABLE for another failure. When `cancel` (may be null) becomes
  // true, the connect ends within about 50 ms with CANCELLED, whatever it
  // waits on (a worker's stop must free it even while a peer never
  // answers). Gloo's traffic is not encrypted: ranks must talk over a
  // trusted (or an encrypted) network.
  static absl::StatusOr<std::unique_ptr<GlooCommunicator>> Connect(
      RendezvousStore* store, const std::string& prefix, int rank, int size,
      const std::string& hostname, absl::Duration timeout,
      const std::atomic<bool>* cancel = nullptr);
  ~GlooCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::unique_ptr<Work> Send(int peer, uint64_t tag,
                             std::string message) override;
  std::unique_ptr<RecvWork> Recv(int peer, uint64_t tag) override;
  std::unique_ptr<Work> SendExact(int peer, uint64_t tag,
                                  std::string message) override;
  std::unique_ptr<RecvWork> RecvExact(int peer, uint64_t tag,
                                      size_t bytes) override;
  std::unique_ptr<Work> SendBuffer(
      int peer, uint64_t tag, const void* data, size_t bytes,
      std::shared_ptr<const void> keep_alive) override;
  std::unique_ptr<Work> RecvBuffer(int peer, uint64_t tag, void* data,
                                   size_t bytes) override;
  absl::Status AllReduce(const std::vector<int>& group, uint64_t sequence,
                         float* data, size_t n, absl::Time deadline) override;
  void Abort() override;
  int64_t bytes_sent() const override { return sent_; }
  // Called by the receives when bytes have landed.
  void CountReceived(size_t bytes) { received_ += static_cast<int64_t>(bytes); }
  int64_t bytes_received() const override { return received_; }

 private:
  friend class GlooBuffer;
  GlooCommunicator(std::shared_ptr<gloo::Context> context, int rank, int size)
      : context_(std::move(context)), rank_(rank), size_(size) {}

  std::shared_ptr<gloo::Context> context_;
  const int rank_, size_;
  std::atomic<int64_t> sent_{0};
  std::atomic<int64_t> received_{0};

  // Buffers with a transfer in flight, for Abort().
  void Track(gloo::transport::UnboundBuffer* buffer);
  void Untrack(gloo::transport::UnboundBuffer* buffer);
  absl::Mutex mu_;
  std::set<gloo::transport::UnboundBuffer*> live_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> aborted_{false};
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_COMM_GLOO_COMMUNICATOR_H_
