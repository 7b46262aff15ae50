#include "common/comm/nccl/nccl_communicator.h"

#include <unistd.h>

#include <cstring>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/device/cuda/cuda_status.h"
#include "common/logging.h"
#include "common/status.h"

extern char** environ;

namespace aqueduct {

std::string NcclEnvironment() {
  std::string out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (absl::StartsWith(*e, "NCCL_")) {
      absl::StrAppend(&out, out.empty() ? "" : " ", *e);
    }
  }
  return out;
}

NcclCommunicator::NcclCommunicator(int rank, int size, std::string prefix)
    : rank_(rank), size_(size), prefix_(std::move(prefix)) {}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Connect(
    RendezvousStore* store, const std::string& prefix, int rank, int size,
    int device_ordinal, absl::Duration timeout) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL rank ", rank, " of ", size, " is out of range"));
  }
  const std::string key = prefix + "nccl_unique_id";
  const absl::Time deadline = absl::Now() + timeout;
  ncclUniqueId id;
  if (rank == 0) {
    AQ_NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&id));
    RETURN_IF_ERROR(store->Set(
        key, std::string(reinterpret_cast<const char*>(&id), sizeof(id))));
  } else {
    absl::StatusOr<std::string> value = store->Get(key, timeout);
    if (!value.ok()) {
      return Annotate(
          value.status(),
          absl::StrCat("NCCL rank ", rank, " of ", size,
                       ": no unique id from rank 0 at '", key, "'"));
    }
    if (value->size() != sizeof(id)) {
      return absl::DataLossError(absl::StrCat("NCCL unique id at '", key,
                                              "' has ", value->size(),
                                              " bytes, expected ", sizeof(id)));
    }
    std::memcpy(&id, value->data(), sizeof(id));
  }
  std::unique_ptr<NcclCommunicator> comm(
      new NcclCommunicator(rank, size, prefix));
  comm->op_timeout_ = timeout;
  AQ_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_ordinal));
  AQ_CUDA_RETURN_IF_ERROR(
      cudaStreamCreateWithFlags(&comm->stream_, cudaStreamNonBlocking));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so that init and every group can be given a deadline
  const ncclResult_t init =
      ncclCommInitRankConfig(&comm->comm_, size, id, rank, &config);
  if (init != ncclSuccess && init != ncclInProgress) {
    return NcclStatus(init, "ncclCommInitRankConfig", __FILE__, __LINE__);
  }
  RETURN_IF_ERROR(comm->AwaitComm(deadline, "ncclCommInitRankConfig"));
  AQ_LOG_INFO("NCCL rank {}/{} on cuda:{} connected ({})", rank, size,
              device_ordinal, NcclEnvironment());
  return comm;
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ != nullptr) {
    if (broken_.ok() && Wait(absl::Now() + absl::Seconds(10)).ok()) {
      ncclCommFinalize(comm_);
      (void)AwaitComm(absl::Now() + absl::Seconds(10), "ncclCommFinalize");
    }
    if (broken_.ok()) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
  }
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

absl::Status NcclCommunicator::Abort(absl::Status why) {
  if (broken_.ok()) {
    broken_ = why;
    AQ_LOG_WARN("NCCL rank {}/{}: aborting communicator: {}", rank_, size_,
                why.ToString());
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  return why;
}

absl::Status NcclCommunicator::CheckUsable() const {
  if (!broken_.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "NCCL communicator '", prefix_, "' was aborted: ", broken_.message()));
  }
  return absl::OkStatus();
}

absl::Status NcclCommunicator::PollAsync(const char* what, bool* busy) {
  ncclResult_t state = ncclSuccess;
  const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
  if (r != ncclSuccess) {
    return Abort(NcclStatus(r, "ncclCommGetAsyncError", __FILE__, __LINE__));
  }
  if (state != ncclSuccess && state != ncclInProgress) {
    return Abort(Annotate(NcclStatus(state, what, __FILE__, __LINE__),
                          "a peer failed or vanished"));
  }
  *busy = state == ncclInProgress;
  return absl::OkStatus();
}

absl::Status NcclCommunicator::CheckDeadline(absl::Time deadline,
                                             const char* what) {
  if (abort_requested_.load()) {
    return Abort(absl::CancelledError(
        absl::StrCat(what, " on NCCL rank ", rank_, "/", size_,
                     ": the communicator was stopped")));
  }
  if (absl::Now() < deadline) return absl::OkStatus();
  return Abort(absl::DeadlineExceededError(
      absl::StrCat(what, " on NCCL rank ", rank_, "/", size_,
                   " did not complete by its deadline (a peer is hung or "
                   "gone)")));
}

absl::Status NcclCommunicator::AwaitComm(absl::Time deadline,
                                         const char* what) {
  while (true) {
    bool busy = false;
    RETURN_IF_ERROR(PollAsync(what, &busy));
    if (!busy) return absl::OkStatus();
    RETURN_IF_ERROR(CheckDeadline(deadline, what));
    usleep(100);
  }
}

absl::Status NcclCommunicator::Send(int peer, const void* data, size_t bytes,
                                    cudaEvent_t ready) {
  return SendRecv(peer, data, bytes, -1, nullptr, 0, ready);
}

absl::Status NcclCommunicator::Recv(int peer, void* data, size_t bytes) {
  return SendRecv(-1, nullptr, 0, peer, data, bytes, nullptr);
}

absl::Status NcclCommunicator::SendRecv(int send_peer, const void* send_data,
                                        size_t send_bytes, int recv_peer,
                                        void* recv_data, size_t recv_bytes,
                                        cudaEvent_t ready) {
  RETURN_IF_ERROR(CheckUsable());
  for (int peer : {send_peer, recv_peer}) {
    if (peer != -1 && (peer < 0 || peer >= size_ || peer == rank_)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "NCCL rank ", rank_, ": bad peer ", peer, " (world ", size_, ")"));
    }
  }
  if (ready != nullptr) {
    AQ_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, ready, 0));
  }
  const absl::Time deadline = absl::Now() + op_timeout_;
  // With a non-blocking communicator, calls inside a group may return
  // ncclInProgress; only ncclGroupEnd's completion is awaited.
  auto ok = [](ncclResult_t r) {
    return r == ncclSuccess || r == ncclInProgress;
  };
  ncclResult_t r = ncclGroupStart();
  if (!ok(r)) return NcclStatus(r, "ncclGroupStart", __FILE__, __LINE__);
  if (send_peer != -1) {
    r = ncclSend(send_data, send_bytes, ncclUint8, send_peer, comm_, stream_);
    if (!ok(r)) {
      ncclGroupEnd();
      return Abort(NcclStatus(r, "ncclSend", __FILE__, __LINE__));
    }
  }
  if (recv_peer != -1) {
    r = ncclRecv(recv_data, recv_bytes, ncclUint8, recv_peer, comm_, stream_);
    if (!ok(r)) {
      ncclGroupEnd();
      return Abort(NcclStatus(r, "ncclRecv", __FILE__, __LINE__));
    }
  }
  r = ncclGroupEnd();
  if (!ok(r)) return Abort(NcclStatus(r, "ncclGroupEnd", __FILE__, __LINE__));
  return AwaitComm(deadline, "ncclGroupEnd (send/recv)");
}

absl::Status NcclCommunicator::AllReduce(float* data, size_t n,
                                         cudaEvent_t ready) {
  RETURN_IF_ERROR(CheckUsable());
  if (ready != nullptr) {
    AQ_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, ready, 0));
  }
  const absl::Time deadline = absl::Now() + op_timeout_;
  const ncclResult_t r =
      ncclAllReduce(data, data, n, ncclFloat32, ncclSum, comm_, stream_);
  if (r != ncclSuccess && r != ncclInProgress) {
    return Abort(NcclStatus(r, "ncclAllReduce", __FILE__, __LINE__));
  }
  return AwaitComm(deadline, "ncclAllReduce");
}

absl::Status NcclCommunicator::RecordDone(cudaEvent_t event) {
  RETURN_IF_ERROR(CheckUsable());
  AQ_CUDA_RETURN_IF_ERROR(cudaEventRecord(event, stream_));
  return absl::OkStatus();
}

absl::Status NcclCommunicator::PollUntil(cudaError_t (*query)(void*),
                                         void* target, const char* call,
                                         const char* what,
                                         absl::Time deadline) {
  RETURN_IF_ERROR(CheckUsable());
  while (true) {
    const cudaError_t q = query(target);
    if (q == cudaSuccess) return absl::OkStatus();
    if (q != cudaErrorNotReady) {
      return Abort(CudaStatus(q, call, __FILE__, __LINE__));
    }
    bool busy = false;
    RETURN_IF_ERROR(PollAsync(what, &busy));
    RETURN_IF_ERROR(CheckDeadline(deadline, what));
    usleep(50);
  }
}

absl::Status NcclCommunicator::Wait(absl::Time deadline) {
  constexpr const char* kWhat = "communication stream";
  RETURN_IF_ERROR(PollUntil(
      [](void* s) { return cudaStreamQuery(static_cast<cudaStream_t>(s)); },
      stream_, "cudaStreamQuery", kWhat, deadline));
  return AwaitComm(deadline, kWhat);
}

absl::Status NcclCommunicator::WaitEvent(cudaEvent_t event,
                                         absl::Time deadline) {
  return PollUntil(
      [](void* e) { return cudaEventQuery(static_cast<cudaEvent_t>(e)); },
      event, "cudaEventQuery", "a transfer", deadline);
}

}  // namespace aqueduct
