#include "common/comm/gloo_communicator.h"

#include <chrono>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/comm/gloo_address.h"
#include "common/status.h"
#include "gloo/common/error.h"
#include "gloo/context.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/transport/unbound_buffer.h"

namespace aqueduct {

namespace {

// Slots: user messages use 2*tag (length) and 2*tag+1 (bytes), tags below
// 2^61; all-reduces use the top range.
constexpr uint64_t kReduceBase = uint64_t{1} << 62;

std::chrono::milliseconds Left(absl::Time deadline) {
  const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
  return std::chrono::milliseconds(std::max<int64_t>(ms, 1));
}

// Gloo reports timeouts and I/O errors as exceptions.
absl::Status FromGloo(const std::exception& e, const std::string& what) {
  const std::string message = e.what();
  if (message.find("Timed out") != std::string::npos) {
    return absl::DeadlineExceededError(
        absl::StrCat("timed out ", what, ": ", message));
  }
  return absl::UnavailableError(absl::StrCat(what, ": ", message));
}

// Gloo's store interface over a RendezvousStore. Gloo expects exceptions.
// A rank's pair addresses are scrubbed on their way out (gloo_address.h):
// only the addresses reach the store, not the stack bytes around them.
class StoreAdapter final : public gloo::rendezvous::Store {
 public:
  StoreAdapter(RendezvousStore* store, absl::Duration timeout)
      : store_(store), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    std::string value(data.begin(), data.end());
    absl::Status s =
        IsGlooAddressKey(key) ? ScrubGlooAddresses(&value) : absl::OkStatus();
    if (s.ok()) s = store_->Set(key, value);
    if (!s.ok()) throw gloo::IoException(std::string(s.message()));
  }
  std::vector<char> get(const std::string& key) override {
    auto v = store_->Get(key, timeout_);
    if (!v.ok()) throw gloo::IoException(std::string(v.status().message()));
    return std::vector<char>(v->begin(), v->end());
  }
  void wait(const std::vector<std::string>& keys) override {
    for (const std::string& k : keys) (void)get(k);
  }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds&) override {
    wait(keys);
  }

 private:
  RendezvousStore* store_;
  absl::Duration timeout_;
};

}  // namespace

// One Gloo unbound buffer with a transfer in flight, known to its
// communicator while it lives so that Abort() can end its wait.
class GlooBuffer {
 public:
  // Posts a send (or receive) of `bytes` at `data` on `slot`. Errors,
  // including an aborted communicator, surface from Wait.
  GlooBuffer(GlooCommunicator* comm, bool send, int peer, uint64_t slot,
             void* data, size_t bytes)
      : comm_(comm), send_(send), peer_(peer), slot_(slot) {
    try {
      buffer_ = comm_->context_->createUnboundBuffer(data, bytes);
      comm_->Track(buffer_.get());
      if (send_) {
        buffer_->send(peer, slot);
      } else {
        buffer_->recv(peer, slot);
      }
    } catch (const std::exception& e) {
      error_ = FromGloo(e, What());
    }
  }
  ~GlooBuffer() {
    if (buffer_ != nullptr) comm_->Untrack(buffer_.get());
  }
  GlooBuffer(const GlooBuffer&) = delete;
  GlooBuffer& operator=(const GlooBuffer&) = delete;

  absl::Status Wait(absl::Time deadline) {
    if (!error_.ok() || done_) return error_;
    if (comm_->aborted_.load()) return Aborted();
    try {
      // Gloo returns false when the wait was aborted; a timeout throws.
      const bool completed = send_ ? buffer_->waitSend(Left(deadline))
                                   : buffer_->waitRecv(Left(deadline));
      if (!completed) return Aborted();
    } catch (const std::exception& e) {
      error_ = FromGloo(e, What());
      return error_;
    }
    done_ = true;
    return absl::OkStatus();
  }

 private:
  absl::Status Aborted() {
    error_ = absl::CancelledError(
        absl::StrCat("rank ", comm_->rank_, " aborted ", What()));
    return error_;
  }

  // What this transfer is, for errors (built only then: this is per
  // message). Slots are 2 * tag (+ 1 for the bytes after a length).
  std::string What() const {
    return absl::StrCat(send_ ? "sending tag " : "receiving tag ", slot_ / 2,
                        send_ ? " to rank " : " from rank ", peer_);
  }

  GlooCommunicator* comm_;
  const bool send_;
  const int peer_;
  const uint64_t slot_;
  std::unique_ptr<gloo::transport::UnboundBuffer> buffer_;
  absl::Status error_;
  bool done_ = false;
};

namespace {

// A send of `bytes` at `data`: optionally a length first (the
// length-prefixed path), then the bytes, from memory this object keeps
// alive (its own string, or the caller's `keep_alive`).
class GlooSend final : public Work {
 public:
  GlooSend(GlooCommunicator* comm, int peer, uint64_t tag, std::string owned,
           const void* data, size_t bytes,
           std::shared_ptr<const void> keep_alive, bool exact)
      : owned_(std::move(owned)), keep_alive_(std::move(keep_alive)) {
    if (data == nullptr) {
      data = owned_.data();
      bytes = owned_.size();
    }
    length_ = static_cast<uint64_t>(bytes);
    if (!exact) {
      header_ = std::make_unique<GlooBuffer>(comm, true, peer, 2 * tag,
                                             &length_, sizeof(length_));
    }
    if (bytes > 0) {
      // Gloo's buffer type is mutable; a send only reads it.
      body_ = std::make_unique<GlooBuffer>(comm, true, peer, 2 * tag + 1,
                                           const_cast<void*>(data), bytes);
    }
  }
  absl::Status Wait(absl::Time deadline) override {
    if (header_ != nullptr) RETURN_IF_ERROR(header_->Wait(deadline));
    if (body_ != nullptr) RETURN_IF_ERROR(body_->Wait(deadline));
    keep_alive_.reset();
    return absl::OkStatus();
  }

 private:
  std::string owned_;
  std::shared_ptr<const void> keep_alive_;
  uint64_t length_ = 0;
  std::unique_ptr<GlooBuffer> header_, body_;
};

// A receive of a known size into the caller's memory.
class GlooRecvBuffer final : public Work {
 public:
  GlooRecvBuffer(GlooCommunicator* comm, int peer, uint64_t tag, void* data,
                 size_t bytes)
      : comm_(comm), bytes_(bytes) {
    if (bytes > 0) {
      body_ = std::make_unique<GlooBuffer>(comm, false, peer, 2 * tag + 1, data,
                                           bytes);
    }
  }
  absl::Status Wait(absl::Time deadline) override {
    if (counted_) return absl::OkStatus();
    if (body_ != nullptr) RETURN_IF_ERROR(body_->Wait(deadline));
    comm_->CountReceived(bytes_);
    counted_ = true;
    return absl::OkStatus();
  }

 private:
  GlooCommunicator* comm_;
  size_t bytes_;
  bool counted_ = false;
  std::unique_ptr<GlooBuffer> body_;
};

// A receive of a known size: one transfer straight into the result.
class GlooRecvExact final : public RecvWork {
 public:
  GlooRecvExact(GlooCommunicator* comm, int peer, uint64_t tag, size_t bytes)
      : message_(bytes, '\0'), body_(comm, peer, tag, message_.data(), bytes) {}
  absl::StatusOr<std::string> Wait(absl::Time deadline) override {
    RETURN_IF_ERROR(body_.Wait(deadline));
    return std::move(message_);
  }

 private:
  std::string message_;
  GlooRecvBuffer body_;
};

// A length, then that many bytes.
class GlooRecv final : public RecvWork {
 public:
  GlooRecv(GlooCommunicator* comm, int peer, uint64_t tag)
      : comm_(comm),
        peer_(peer),
        tag_(tag),
        header_(comm, false, peer, 2 * tag, &length_, sizeof(length_)) {}
  absl::StatusOr<std::string> Wait(absl::Time deadline) override {
    RETURN_IF_ERROR(header_.Wait(deadline));
    std::string message(length_, '\0');
    GlooRecvBuffer body(comm_, peer_, tag_, message.data(), message.size());
    RETURN_IF_ERROR(body.Wait(deadline));
    return message;
  }

 private:
  GlooCommunicator* comm_;
  int peer_;
  uint64_t tag_;
  uint64_t length_ = 0;
  GlooBuffer header_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GlooCommunicator>> GlooCommunicator::Connect(
    RendezvousStore* store, const std::string& prefix, int rank, int size,
    const std::string& hostname, absl::Duration timeout) {
  if (rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is outside a world of ", size));
  }
  // Bound to that address only (not every interface), by number so that
  // Gloo binds exactly what was checked.
  absl::StatusOr<std::string> address = DataPlaneBindAddress(hostname);
  if (!address.ok()) return address.status();
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = *address;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context->setTimeout(
        std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout)));
    StoreAdapter adapter(store, timeout);
    gloo::rendezvous::PrefixStore prefixed(prefix, adapter);
    context->connectFullMesh(prefixed, device);
    return std::unique_ptr<GlooCommunicator>(
        new GlooCommunicator(std::move(context), rank, size));
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("connecting rank ", rank, " of ",
                                               size, " through '", prefix,
                                               "': ", e.what()));
  }
}

GlooCommunicator::~GlooCommunicator() = default;

void GlooCommunicator::Track(gloo::transport::UnboundBuffer* buffer) {
  absl::MutexLock lock(&mu_);
  live_.insert(buffer);
  if (aborted_.load()) {
    buffer->abortWaitRecv();
    buffer->abortWaitSend();
  }
}

void GlooCommunicator::Untrack(gloo::transport::UnboundBuffer* buffer) {
  absl::MutexLock lock(&mu_);
  live_.erase(buffer);
}

void GlooCommunicator::Abort() {
  absl::MutexLock lock(&mu_);
  aborted_ = true;
  for (gloo::transport::UnboundBuffer* buffer : live_) {
    buffer->abortWaitRecv();
    buffer->abortWaitSend();
  }
}

std::unique_ptr<Work> GlooCommunicator::Send(int peer, uint64_t tag,
                                             std::string message) {
  sent_ += static_cast<int64_t>(message.size());
  return std::make_unique<GlooSend>(this, peer, tag, std::move(message),
                                    nullptr, 0, nullptr, /*exact=*/false);
}

std::unique_ptr<Work> GlooCommunicator::SendExact(int peer, uint64_t tag,
                                                  std::string message) {
  sent_ += static_cast<int64_t>(message.size());
  return std::make_unique<GlooSend>(this, peer, tag, std::move(message),
                                    nullptr, 0, nullptr, /*exact=*/true);
}

std::unique_ptr<Work> GlooCommunicator::SendBuffer(
    int peer, uint64_t tag, const void* data, size_t bytes,
    std::shared_ptr<const void> keep_alive) {
  sent_ += static_cast<int64_t>(bytes);
  return std::make_unique<GlooSend>(this, peer, tag, std::string(), data, bytes,
                                    std::move(keep_alive),
                                    /*exact=*/true);
}

std::unique_ptr<Work> GlooCommunicator::RecvBuffer(int peer, uint64_t tag,
                                                   void* data, size_t bytes) {
  return std::make_unique<GlooRecvBuffer>(this, peer, tag, data, bytes);
}

std::unique_ptr<RecvWork> GlooCommunicator::RecvExact(int peer, uint64_t tag,
                                                      size_t bytes) {
  return std::make_unique<GlooRecvExact>(this, peer, tag, bytes);
}

std::unique_ptr<RecvWork> GlooCommunicator::Recv(int peer, uint64_t tag) {
  return std::make_unique<GlooRecv>(this, peer, tag);
}

absl::Status GlooCommunicator::AllReduce(const std::vector<int>& group,
                                         uint64_t sequence, float* data,
                                         size_t n, absl::Time deadline) {
  if (group.size() <= 1) return absl::OkStatus();
  const uint64_t tag = kReduceBase / 2 + sequence;
  const int root = group[0];
  const size_t bytes = n * sizeof(float);
  if (rank_ != root) {
    std::vector<float> sum(n);
    auto sum_work = RecvBuffer(root, tag, sum.data(), bytes);
    RETURN_IF_ERROR(
        SendBuffer(root, tag, data, bytes, nullptr)->Wait(deadline));
    RETURN_IF_ERROR(sum_work->Wait(deadline));
    std::memcpy(data, sum.data(), bytes);
    return absl::OkStatus();
  }
  // The root adds the others' contributions in rank order.
  std::vector<float> part(n);
  for (size_t g = 1; g < group.size(); ++g) {
    RETURN_IF_ERROR(
        RecvBuffer(group[g], tag, part.data(), bytes)->Wait(deadline));
    for (size_t i = 0; i < n; ++i) data[i] += part[i];
  }
  std::vector<std::unique_ptr<Work>> sends;
  for (size_t g = 1; g < group.size(); ++g) {
    sends.push_back(SendBuffer(group[g], tag, data, bytes, nullptr));
  }
  for (auto& s : sends) RETURN_IF_ERROR(s->Wait(deadline));
  return absl::OkStatus();
}

}  // namespace aqueduct
