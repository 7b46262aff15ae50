#include "common/comm/nccl/nccl_channels.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <deque>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/comm/nccl/nccl_communicator.h"
#include "common/device/cuda/cuda_status.h"
#include "common/status.h"

namespace aqueduct {

namespace {

class NcclChannel final : public DeviceChannel {
 public:
  NcclChannel(ChannelKey key, bool sender,
              std::unique_ptr<NcclCommunicator> comm)
      : key_(key), sender_(sender), comm_(std::move(comm)) {}
  ~NcclChannel() override {
    for (auto& [ticket, event] : events_) cudaEventDestroy(event);
  }

  absl::StatusOr<uint64_t> Send(const void* data, size_t bytes) override {
    if (!sender_) return absl::InternalError(What("send on the receiving end"));
    RETURN_IF_ERROR(comm_->Send(/*peer=*/1, data, bytes, nullptr));
    return Record();
  }

  absl::StatusOr<uint64_t> Recv(void* data, size_t bytes) override {
    if (sender_) return absl::InternalError(What("receive on the sending end"));
    RETURN_IF_ERROR(comm_->Recv(/*peer=*/0, data, bytes));
    return Record();
  }

  absl::Status Wait(uint64_t ticket, absl::Time deadline) override {
    // Events of transfers up to `ticket`; the last one implies the others
    // (one stream).
    cudaEvent_t last = nullptr;
    while (!events_.empty() && events_.front().first <= ticket) {
      if (last != nullptr) cudaEventDestroy(last);
      last = events_.front().second;
      events_.pop_front();
    }
    if (last == nullptr) return absl::OkStatus();  // Waited for before.
    const absl::Status s = comm_->WaitEvent(last, deadline);
    cudaEventDestroy(last);
    if (!s.ok()) return absl::Status(s.code(), What(s.message()));
    return absl::OkStatus();
  }

  void RequestAbort() { comm_->RequestAbort(); }

 private:
  absl::StatusOr<uint64_t> Record() {
    cudaEvent_t event = nullptr;
    AQ_CUDA_RETURN_IF_ERROR(
        cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    if (absl::Status s = comm_->RecordDone(event); !s.ok()) {
      cudaEventDestroy(event);
      return s;
    }
    events_.emplace_back(next_, event);
    return next_++;
  }
  std::string What(absl::string_view what) const {
    return absl::StrCat("NCCL channel ", key_.kind, " from rank ", key_.from,
                        " to rank ", key_.to, ": ", what);
  }

  const ChannelKey key_;
  const bool sender_;
  std::unique_ptr<NcclCommunicator> comm_;
  std::deque<std::pair<uint64_t, cudaEvent_t>> events_;
  uint64_t next_ = 0;
};

class NcclChannels final : public DeviceChannels {
 public:
  DeviceChannel* Get(int kind, int from, int to) override {
    auto it = channels_.find(ChannelKey{kind, from, to});
    return it == channels_.end() ? nullptr : it->second.get();
  }
  void Abort() override {
    for (auto& [key, channel] : channels_) channel->RequestAbort();
  }
  std::map<ChannelKey, std::unique_ptr<NcclChannel>> channels_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceChannels>> ConnectNcclChannels(
    RendezvousStore* store, const std::string& prefix, int rank,
    std::vector<ChannelKey> keys, int device_ordinal, absl::Duration timeout) {
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  auto channels = std::make_unique<NcclChannels>();
  for (const ChannelKey& key : keys) {
    if (key.from != rank && key.to != rank) continue;
    if (key.from == key.to) {
      return absl::InvalidArgumentError(
          absl::StrCat("a device channel from rank ", key.from, " to itself"));
    }
    const bool sender = key.from == rank;
    auto comm = NcclCommunicator::Connect(
        store,
        absl::StrCat(prefix, "k", key.kind, "/", key.from, "-", key.to, "/"),
        sender ? 0 : 1, 2, device_ordinal, timeout);
    if (!comm.ok()) {
      return absl::Status(comm.status().code(),
                          absl::StrCat("connecting the NCCL channel ", key.kind,
                                       " from rank ", key.from, " to rank ",
                                       key.to, ": ", comm.status().message()));
    }
    channels->channels_[key] =
        std::make_unique<NcclChannel>(key, sender, std::move(*comm));
  }
  return std::unique_ptr<DeviceChannels>(std::move(channels));
}

}  // namespace aqueduct
