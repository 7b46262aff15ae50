#include "common/comm/gloo_communicator.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/comm/gloo_address.h"
#include "common/status.h"
#include "gloo/common/error.h"
#include "gloo/context.h"
#include "gloo/transport/context.h"
#include "gloo/transport/pair.h"
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

bool Cancelled(const std::atomic<bool>* cancel) {
  return cancel != nullptr && cancel->load();
}

// How often a connect looks at its cancel flag: a store wait is cut into
// slices this long, and the pair watch ticks at a tenth of it.
constexpr absl::Duration kStoreSlice = absl::Milliseconds(250);
constexpr absl::Duration kWatchTick = absl::Milliseconds(25);

// Waits up to `timeout` for `key`, slice by slice so that a stop is seen
// (the store's own wait does not observe one).
absl::StatusOr<std::string> WaitForKey(RendezvousStore* store,
                                       const std::string& key,
                                       absl::Duration timeout,
                                       const std::atomic<bool>* cancel) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    if (Cancelled(cancel)) {
      return absl::CancelledError(absl::StrCat("stopped waiting for ", key));
    }
    const absl::Duration left =
        std::max(deadline - absl::Now(), absl::ZeroDuration());
    absl::StatusOr<std::string> value =
        store->Get(key, std::min(left, kStoreSlice));
    if (value.ok() || !absl::IsDeadlineExceeded(value.status()) ||
        absl::Now() >= deadline) {
      return value;
    }
  }
}

// Ends a pair's connect from another thread when the connect's deadline
// passes or its cancel flag is set. Gloo's Pair::connect waits up to 5x the
// context's timeout and observes nothing else (a peer whose packets are
// dropped holds it that long); closing the pair ends that wait at once.
// Thread-safe; one pair armed at a time.
class PairWatch {
 public:
  explicit PairWatch(const std::atomic<bool>* cancel)
      : cancel_(cancel), thread_([this] { Loop(); }) {}
  ~PairWatch() {
    {
      absl::MutexLock lock(&mu_);
      done_ = true;
    }
    thread_.join();
  }
  PairWatch(const PairWatch&) = delete;
  PairWatch& operator=(const PairWatch&) = delete;

  void Arm(gloo::transport::Pair* pair, absl::Time deadline) {
    absl::MutexLock lock(&mu_);
    pair_ = pair;
    deadline_ = deadline;
    fired_ = false;
  }
  // Whether the watch closed the armed pair. After this returns, the
  // watch no longer touches it.
  bool Disarm() {
    absl::MutexLock lock(&mu_);
    pair_ = nullptr;
    return fired_;
  }

 private:
  void Loop() {
    absl::MutexLock lock(&mu_);
    while (!done_) {
      mu_.AwaitWithTimeout(absl::Condition(&done_), kWatchTick);
      if (pair_ != nullptr &&
          (Cancelled(cancel_) || absl::Now() >= deadline_)) {
        pair_->close();  // The connect wakes up and returns.
        pair_ = nullptr;
        fired_ = true;
      }
    }
  }

  const std::atomic<bool>* const cancel_;
  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  gloo::transport::Pair* pair_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::Time deadline_ ABSL_GUARDED_BY(mu_);
  bool fired_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // Last: starts once the rest is set.
};

// Connects this rank's pair with `peer`, whose address for it is
// `address`, within `timeout`.
absl::Status ConnectPair(gloo::transport::Pair& pair,
                         const std::vector<char>& address, int rank, int peer,
                         absl::Duration timeout, PairWatch& watch,
                         const std::atomic<bool>* cancel) {
  const std::string where =
      DescribeGlooAddress(absl::string_view(address.data(), address.size()), 0)
          .value_or("an address it could not describe");
  watch.Arm(&pair, absl::Now() + timeout);
  std::string error;
  try {
    pair.connect(address);
  } catch (const std::exception& e) {
    error = e.what();
  }
  const bool closed = watch.Disarm();
  if (Cancelled(cancel)) {
    return absl::CancelledError(absl::StrCat(
        "rank ", rank, " stopped connecting to rank ", peer, " at ", where));
  }
  if (closed || error.find("imeout") != std::string::npos ||
      error.find("imed out") != std::string::npos) {
    return absl::DeadlineExceededError(
        absl::StrCat("timed out connecting to rank ", peer, " at ", where,
                     " (waited ", absl::FormatDuration(timeout), ")"));
  }
  if (!error.empty()) {
    return absl::UnavailableError(
        absl::StrCat("connecting to rank ", peer, " at ", where, ": ", error));
  }
  return absl::OkStatus();
}

// A gloo::Context whose full mesh is connected here rather than by Gloo's
// rendezvous::Context::connectFullMesh, so that every wait of it has a
// deadline and ends on a stop. The same exchange (less the host names,
// which only Gloo's shared-memory transports read): each rank publishes
// its pair addresses, scrubbed (gloo_address.h), under "<prefix>/<rank>",
// then connects its pairs in rank order.
class MeshContext final : public gloo::Context {
 public:
  MeshContext(int rank, int size) : gloo::Context(rank, size) {}

  // Throws what Gloo throws (pair creation, socket errors).
  absl::Status ConnectMesh(RendezvousStore* store, const std::string& prefix,
                           std::shared_ptr<gloo::transport::Device> device,
                           absl::Duration timeout,
                           const std::atomic<bool>* cancel) {
    std::shared_ptr<gloo::transport::Context> transport =
        device->createContext(rank, size);
    transport->setTimeout(getTimeout());
    std::string mine;
    for (int i = 0; i < size; ++i) {
      if (i == rank) continue;
      auto& pair = transport->createPair(i);
      pair->setLocalRank(0);
      const std::vector<char> bytes = pair->address().bytes();
      mine.append(bytes.begin(), bytes.end());
    }
    RETURN_IF_ERROR(ScrubGlooAddresses(&mine));
    RETURN_IF_ERROR(store->Set(absl::StrCat(prefix, "/", rank), mine));
    PairWatch watch(cancel);
    for (int i = 0; i < size; ++i) {
      if (i == rank) continue;
      absl::StatusOr<std::string> all =
          WaitForKey(store, absl::StrCat(prefix, "/", i), timeout, cancel);
      if (!all.ok()) {
        return absl::Status(all.status().code(),
                            absl::StrCat("waiting for the addresses of rank ",
                                         i, ": ", all.status().message()));
      }
      if (all->size() != (size - 1) * kGlooAddressBytes) {
        return absl::UnavailableError(absl::StrCat(
            "rank ", i, " published ", all->size(), " bytes of addresses, not ",
            (size - 1) * kGlooAddressBytes));
      }
      // Rank i lists an address for every rank but itself, in rank order.
      const size_t index = rank > i ? rank - 1 : rank;
      const char* begin = all->data() + index * kGlooAddressBytes;
      RETURN_IF_ERROR(
          ConnectPair(*transport->getPair(i),
                      std::vector<char>(begin, begin + kGlooAddressBytes), rank,
                      i, timeout, watch, cancel));
    }
    device_ = std::move(device);
    transportContext_ = std::move(transport);
    return absl::OkStatus();
  }
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
    const std::string& hostname, absl::Duration timeout,
    const std::atomic<bool>* cancel) {
  if (rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is outside a world of ", size));
  }
  // Bound to that address only (not every interface), by number so that
  // Gloo binds exactly what was checked.
  absl::StatusOr<std::string> address = DataPlaneBindAddress(hostname);
  if (!address.ok()) return address.status();
  const std::string what = absl::StrCat("connecting rank ", rank, " of ", size,
                                        " through '", prefix, "': ");
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = *address;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<MeshContext>(rank, size);
    context->setTimeout(
        std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout)));
    const absl::Status connected =
        context->ConnectMesh(store, prefix, std::move(device), timeout, cancel);
    if (!connected.ok()) {
      return absl::Status(connected.code(),
                          absl::StrCat(what, connected.message()));
    }
    return std::unique_ptr<GlooCommunicator>(
        new GlooCommunicator(std::move(context), rank, size));
  } catch (const std::exception& e) {
    if (Cancelled(cancel)) {
      return absl::CancelledError(absl::StrCat(what, "stopped"));
    }
    return absl::UnavailableError(absl::StrCat(what, e.what()));
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
