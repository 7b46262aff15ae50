// InMemoryDeviceChannels: DeviceChannels between ranks of one process over
// host memory, for tests of code that moves device memory (the pipeline's
// frames on a transport like NCCL) with the CPU device. Sends copy at once;
// receives are filled in the order they were queued, when the matching send
// arrives. Thread-safe.
#ifndef AQUEDUCT_COMMON_COMM_IN_MEMORY_CHANNELS_H_
#define AQUEDUCT_COMMON_COMM_IN_MEMORY_CHANNELS_H_

#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/comm/device_channel.h"

namespace aqueduct {

class InMemoryChannelHub {
 public:
  struct State {
    std::deque<std::string> sent;                 // Not yet received.
    std::deque<std::pair<void*, size_t>> posted;  // Receives not yet filled.
    uint64_t received = 0;                        // Receives filled.
    uint64_t sends = 0, recvs = 0;                // Tickets issued.
    std::string error;                            // A size mismatch.
  };
  absl::Mutex mu;
  std::map<ChannelKey, State> states ABSL_GUARDED_BY(mu);
  int sends ABSL_GUARDED_BY(mu) = 0;  // For tests: transfers made.
};

class InMemoryDeviceChannels final : public DeviceChannels {
 public:
  InMemoryDeviceChannels(std::shared_ptr<InMemoryChannelHub> hub, int rank)
      : hub_(std::move(hub)), rank_(rank) {}

  DeviceChannel* Get(int kind, int from, int to) override {
    if (from != rank_ && to != rank_) return nullptr;
    const ChannelKey key{kind, from, to};
    absl::MutexLock lock(&mu_);
    auto& channel = channels_[key];
    if (channel == nullptr) {
      channel = std::make_unique<Channel>(this, key, from == rank_);
    }
    return channel.get();
  }

  void Abort() override {
    absl::MutexLock lock(&hub_->mu);
    aborted_ = true;
  }

 private:
  class Channel final : public DeviceChannel {
   public:
    Channel(InMemoryDeviceChannels* owner, ChannelKey key, bool sender)
        : owner_(owner), key_(key), sender_(sender) {}

    absl::StatusOr<uint64_t> Send(const void* data, size_t bytes) override {
      if (!sender_) return absl::InternalError("send on a receiving channel");
      InMemoryChannelHub& hub = *owner_->hub_;
      absl::MutexLock lock(&hub.mu);
      InMemoryChannelHub::State& s = hub.states[key_];
      ++hub.sends;
      if (!s.posted.empty()) {
        auto [dst, size] = s.posted.front();
        s.posted.pop_front();
        Fill(s, dst, size, static_cast<const char*>(data), bytes);
      } else {
        s.sent.emplace_back(static_cast<const char*>(data), bytes);
      }
      return s.sends++;
    }

    absl::StatusOr<uint64_t> Recv(void* data, size_t bytes) override {
      if (sender_) return absl::InternalError("receive on a sending channel");
      InMemoryChannelHub& hub = *owner_->hub_;
      absl::MutexLock lock(&hub.mu);
      InMemoryChannelHub::State& s = hub.states[key_];
      if (!s.sent.empty()) {
        const std::string message = std::move(s.sent.front());
        s.sent.pop_front();
        Fill(s, data, bytes, message.data(), message.size());
      } else {
        s.posted.emplace_back(data, bytes);
      }
      return s.recvs++;
    }

    absl::Status Wait(uint64_t ticket, absl::Time deadline) override {
      InMemoryChannelHub& hub = *owner_->hub_;
      absl::MutexLock lock(&hub.mu);
      InMemoryChannelHub::State& s = hub.states[key_];
      auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(hub.mu) {
        return owner_->aborted_ || s.received > ticket || !s.error.empty();
      };
      // Sends complete at once; a receiver waits for its receive.
      if (!sender_) hub.mu.AwaitWithDeadline(absl::Condition(&done), deadline);
      const std::string what =
          absl::StrCat("channel ", key_.kind, " from rank ", key_.from,
                       " to rank ", key_.to);
      if (owner_->aborted_) return absl::CancelledError(what + " aborted");
      if (!s.error.empty()) return absl::DataLossError(what + ": " + s.error);
      if (!sender_ && s.received <= ticket) {
        return absl::DeadlineExceededError(what + ": timed out receiving");
      }
      return absl::OkStatus();
    }

   private:
    static void Fill(InMemoryChannelHub::State& s, void* dst, size_t size,
                     const char* src, size_t bytes) {
      if (size != bytes) {
        s.error =
            absl::StrCat("sent ", bytes, " bytes into a receive of ", size);
      } else if (bytes > 0) {
        std::memcpy(dst, src, bytes);
      }
      ++s.received;
    }

    InMemoryDeviceChannels* owner_;
    const ChannelKey key_;
    const bool sender_;
  };

  std::shared_ptr<InMemoryChannelHub> hub_;
  const int rank_;
  absl::Mutex mu_;
  std::map<ChannelKey, std::unique_ptr<Channel>> channels_ ABSL_GUARDED_BY(mu_);
  bool aborted_ = false;  // Guarded by hub_->mu.
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_COMM_IN_MEMORY_CHANNELS_H_
