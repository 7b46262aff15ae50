#include "common/comm/communicator.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace aqueduct {

namespace {

// RecvBuffer over RecvExact: the message is copied into place on Wait.
class CopyingRecv final : public Work {
 public:
  CopyingRecv(std::unique_ptr<RecvWork> recv, int peer, uint64_t tag,
              void* data, size_t bytes)
      : recv_(std::move(recv)),
        peer_(peer),
        tag_(tag),
        data_(data),
        bytes_(bytes) {}
  absl::Status Wait(absl::Time deadline) override {
    absl::StatusOr<std::string> message = recv_->Wait(deadline);
    if (!message.ok()) return message.status();
    if (message->size() != bytes_) {
      return absl::DataLossError(
          absl::StrCat("tag ", tag_, " from rank ", peer_, ": received ",
                       message->size(), " bytes into a buffer of ", bytes_));
    }
    if (bytes_ > 0) std::memcpy(data_, message->data(), bytes_);
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<RecvWork> recv_;
  int peer_;
  uint64_t tag_;
  void* data_;
  size_t bytes_;
};

}  // namespace

std::unique_ptr<Work> Communicator::SendBuffer(
    int peer, uint64_t tag, const void* data, size_t bytes,
    std::shared_ptr<const void> keep_alive) {
  (void)keep_alive;  // The bytes are copied before this returns.
  return SendExact(peer, tag,
                   std::string(static_cast<const char*>(data), bytes));
}

std::unique_ptr<Work> Communicator::RecvBuffer(int peer, uint64_t tag,
                                               void* data, size_t bytes) {
  return std::make_unique<CopyingRecv>(RecvExact(peer, tag, bytes), peer, tag,
                                       data, bytes);
}

}  // namespace aqueduct
