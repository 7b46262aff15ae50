// InMemoryCommunicator: the Communicator for in-process tests. A hub shared
// by all ranks holds queued messages and all-reduce contributions; the hub
// can be told to fail a rank (a peer that disappears) to test error paths.
//
// Thread-safe.
#ifndef AQUEDUCT_COMMON_COMM_IN_MEMORY_H_
#define AQUEDUCT_COMMON_COMM_IN_MEMORY_H_

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/comm/communicator.h"

namespace aqueduct {

class InMemoryHub {
 public:
  explicit InMemoryHub(int size)
      : size_(size), dead_(size, false), aborted_(size, false) {}
  int size() const { return size_; }
  // Every later operation touching `rank` fails with UNAVAILABLE.
  void KillRank(int rank);

 private:
  friend class InMemoryCommunicator;
  friend class InMemoryRecv;
  using Key = std::tuple<int, int, uint64_t>;  // src, dst, tag
  struct Reduction {
    // Contributions by rank; summed in group order once all have arrived,
    // so the result does not depend on arrival order.
    std::map<int, std::vector<float>> parts;
    std::vector<float> sum;
    bool done = false;
    int collected = 0;
  };
  const int size_;
  absl::Mutex mu_;
  std::map<Key, std::deque<std::string>> queues_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::vector<int>, uint64_t>, Reduction> reductions_
      ABSL_GUARDED_BY(mu_);
  std::vector<bool> dead_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> aborted_ ABSL_GUARDED_BY(mu_);
};

class InMemoryCommunicator final : public Communicator {
 public:
  InMemoryCommunicator(std::shared_ptr<InMemoryHub> hub, int rank)
      : hub_(std::move(hub)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return hub_->size(); }
  std::unique_ptr<Work> Send(int peer, uint64_t tag,
                             std::string message) override;
  std::unique_ptr<RecvWork> Recv(int peer, uint64_t tag) override;
  absl::Status AllReduce(const std::vector<int>& group, uint64_t sequence,
                         float* data, size_t n, absl::Time deadline) override;
  void Abort() override;
  int64_t bytes_sent() const override { return sent_; }
  int64_t bytes_received() const override { return received_; }

 private:
  friend class InMemoryRecv;
  std::shared_ptr<InMemoryHub> hub_;
  const int rank_;
  std::atomic<int64_t> sent_{0};
  std::atomic<int64_t> received_{0};
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_COMM_IN_MEMORY_H_
