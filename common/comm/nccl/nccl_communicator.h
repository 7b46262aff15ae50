// NcclCommunicator: GPU-to-GPU transfers between the ranks of a job over
// NCCL (NVLink/PCIe peer-to-peer on one host, NCCL's network transport across
// hosts). Rank 0 creates the unique id and publishes it through the
// coordinator's rendezvous store; every wait has a deadline.
//
// All NCCL work runs on a dedicated communication stream. A send waits (on
// the GPU, not the host) for an event the producer recorded on its compute
// stream, so the send of minibatch i overlaps the compute of minibatch i+1;
// RecordDone() gives the compute stream an event to wait on before it reads
// received data. The communicator is created non-blocking: Wait() polls
// ncclCommGetAsyncError and the stream until `deadline`, and a peer that hung
// or died turns into an aborted communicator and a DEADLINE_EXCEEDED or
// UNAVAILABLE status, not a hung worker.
//
// AllReduce sums over every rank of this communicator: replicated stages
// create one communicator per replica group (its own store prefix).
//
// Never run on a GPU yet (docs/gpu.md). Thread-compatible: one owner thread.
#ifndef AQUEDUCT_COMMON_COMM_NCCL_NCCL_COMMUNICATOR_H_
#define AQUEDUCT_COMMON_COMM_NCCL_NCCL_COMMUNICATOR_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/comm/rendezvous_store.h"

namespace aqueduct {

class NcclCommunicator {
 public:
  // Every rank calls this with the same prefix, world size and its own
  // rank and GPU. Fails naming the problem (missing unique id after
  // `timeout`, no such GPU, NCCL init error) with the communicator aborted.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Connect(
      RendezvousStore* store, const std::string& prefix, int rank, int size,
      int device_ordinal, absl::Duration timeout);
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  cudaStream_t stream() const { return stream_; }

  // Queues a send of `bytes` at `data` (device memory) to `peer`, after
  // `ready` (an event on the producer's stream; null: no wait).
  absl::Status Send(int peer, const void* data, size_t bytes,
                    cudaEvent_t ready);
  // Queues a receive of `bytes` from `peer` into `data`.
  absl::Status Recv(int peer, void* data, size_t bytes);
  // Queues a send and a receive as one NCCL group (both directions of a
  // pipeline boundary in one step without deadlock).
  absl::Status SendRecv(int send_peer, const void* send_data, size_t send_bytes,
                        int recv_peer, void* recv_data, size_t recv_bytes,
                        cudaEvent_t ready);
  // Queues an in-place sum of `n` floats across all ranks, after `ready`.
  absl::Status AllReduce(float* data, size_t n, cudaEvent_t ready);
  // Records `event` on the communication stream: compute waits on it
  // (cudaStreamWaitEvent) before reading what was received.
  absl::Status RecordDone(cudaEvent_t event);
  // Waits for all queued communication, checking NCCL's asynchronous error
  // state; at `deadline` aborts the communicator and returns
  // DEADLINE_EXCEEDED. After an abort every call fails.
  absl::Status Wait(absl::Time deadline);
  // Waits, as Wait does, until `event` (recorded with RecordDone) has
  // happened: one transfer, while later ones may still be queued.
  absl::Status WaitEvent(cudaEvent_t event, absl::Time deadline);
  // From any thread: the owner's current or next wait aborts the
  // communicator and returns CANCELLED (a job being stopped).
  void RequestAbort() { abort_requested_ = true; }

 private:
  NcclCommunicator(int rank, int size, std::string prefix);
  // One look at NCCL's asynchronous state: an error aborts the
  // communicator; *busy is true while an operation is still in progress.
  absl::Status PollAsync(const char* what, bool* busy);
  // DEADLINE_EXCEEDED (and abort) once `deadline` has passed.
  absl::Status CheckDeadline(absl::Time deadline, const char* what);
  // Polls the communicator until its pending operation completes.
  absl::Status AwaitComm(absl::Time deadline, const char* what);
  // Polls query(target) (cudaStreamQuery or cudaEventQuery) until it
  // succeeds, checking NCCL's asynchronous state and the deadline.
  absl::Status PollUntil(cudaError_t (*query)(void*), void* target,
                         const char* call, const char* what,
                         absl::Time deadline);
  absl::Status Abort(absl::Status why);
  absl::Status CheckUsable() const;

  const int rank_;
  const int size_;
  const std::string prefix_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  absl::Status broken_;
  absl::Duration op_timeout_ = absl::Seconds(60);
  std::atomic<bool> abort_requested_{false};
};

// The NCCL_* environment variables in effect, "NAME=value" separated by
// spaces (logged at start so that a run's NCCL settings are on record).
std::string NcclEnvironment();

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_COMM_NCCL_NCCL_COMMUNICATOR_H_
