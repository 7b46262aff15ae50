#include "worker/runtime/in_memory_data_plane.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace aqueduct {

namespace {

// An InMemoryCommunicator whose rank is gone from the hub once it is
// destroyed (as a worker's TCP connections close).
class ClosingCommunicator final : public Communicator {
 public:
  ClosingCommunicator(std::shared_ptr<InMemoryHub> hub, int rank)
      : hub_(hub), comm_(std::move(hub), rank) {}
  ~ClosingCommunicator() override { hub_->KillRank(comm_.rank()); }

  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  std::unique_ptr<Work> Send(int peer, uint64_t tag,
                             std::string message) override {
    return comm_.Send(peer, tag, std::move(message));
  }
  std::unique_ptr<RecvWork> Recv(int peer, uint64_t tag) override {
    return comm_.Recv(peer, tag);
  }
  absl::Status AllReduce(const std::vector<int>& group, uint64_t sequence,
                         float* data, size_t n, absl::Time deadline) override {
    return comm_.AllReduce(group, sequence, data, n, deadline);
  }
  void Abort() override { comm_.Abort(); }
  int64_t bytes_sent() const override { return comm_.bytes_sent(); }
  int64_t bytes_received() const override { return comm_.bytes_received(); }

 private:
  std::shared_ptr<InMemoryHub> hub_;
  InMemoryCommunicator comm_;
};

}  // namespace

absl::StatusOr<InMemoryDataPlaneFactory::Job> InMemoryDataPlaneFactory::JobFor(
    const std::string& rendezvous_key, int world_size) {
  absl::MutexLock lock(&mu_);
  Job& job = jobs_[rendezvous_key];
  if (job.hub == nullptr) {
    job.hub = std::make_shared<InMemoryHub>(world_size);
    job.channels = std::make_shared<InMemoryChannelHub>();
  }
  if (job.hub->size() != world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("job ", rendezvous_key, " has ", job.hub->size(),
                     " ranks; this one says ", world_size));
  }
  return job;
}

absl::StatusOr<DataPlane> InMemoryDataPlaneFactory::Connect(
    const JobLayout& layout, const std::string& rendezvous_key,
    RendezvousStore* store, absl::Duration timeout,
    const std::atomic<bool>* stop) {
  // Tests stop ranks that are connected or about to be: the waits below
  // end at their deadline, not at a stop.
  (void)stop;
  if (layout.rank < 0 || layout.rank >= layout.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", layout.rank, " is not in a job of ", layout.world_size));
  }
  ASSIGN_OR_RETURN(Job job, JobFor(rendezvous_key, layout.world_size));
  const std::string prefix = rendezvous_key + "mem/";
  RETURN_IF_ERROR(store->Set(absl::StrCat(prefix, layout.rank), "up"));
  const absl::Time deadline = absl::Now() + timeout;
  for (int r = 0; r < layout.world_size; ++r) {
    RETURN_IF_ERROR(
        store
            ->Get(absl::StrCat(prefix, r),
                  std::max(absl::ZeroDuration(), deadline - absl::Now()))
            .status());
  }
  DataPlane plane;
  plane.comm = std::make_unique<ClosingCommunicator>(job.hub, layout.rank);
  if (layout.policy.transport == v1::TRANSPORT_NCCL) {
    plane.channels =
        std::make_unique<InMemoryDeviceChannels>(job.channels, layout.rank);
  }
  return plane;
}

int InMemoryDataPlaneFactory::channel_sends() {
  absl::MutexLock lock(&mu_);
  int sends = 0;
  for (auto& [key, job] : jobs_) {
    absl::MutexLock hub_lock(&job.channels->mu);
    sends += job.channels->sends;
  }
  return sends;
}

}  // namespace aqueduct
