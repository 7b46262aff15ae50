// NCCL point-to-point bandwidth between two GPUs of this machine: Aqueduct's
// NcclCommunicator (non-blocking communicator, deadline polling, its own
// stream) against raw ncclSend/ncclRecv on a plain blocking communicator
// (what nccl-tests' sendrecv_perf does), side by side in one run, best of
// three rounds per size. Two ranks as threads, one GPU each. Prints one JSON
// line per size. Needs two GPUs; exits 2 saying so otherwise. Never run yet:
// there is no GPU on the development machines (docs/gpu.md).
//
//   nccl_bench [--iters 20]
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "common/comm/local_store.h"
#include "common/comm/nccl/nccl_communicator.h"

namespace aqueduct {
namespace {

using Clock = std::chrono::steady_clock;

// Seconds for `iters` one-way transfers of `bytes` from rank 0 to rank 1
// through the raw API.
double RawRound(ncclComm_t comm, cudaStream_t stream, int rank, void* buf,
                size_t bytes, int iters) {
  cudaStreamSynchronize(stream);
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) {
    if (rank == 0) {
      ncclSend(buf, bytes, ncclUint8, 1, comm, stream);
    } else {
      ncclRecv(buf, bytes, ncclUint8, 0, comm, stream);
    }
  }
  cudaStreamSynchronize(stream);
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double AqRound(NcclCommunicator* comm, int rank, void* buf, size_t bytes,
               int iters) {
  (void)comm->Wait(absl::Now() + absl::Seconds(60));
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) {
    absl::Status s = rank == 0 ? comm->Send(1, buf, bytes, nullptr)
                               : comm->Recv(0, buf, bytes);
    if (!s.ok()) {
      std::fprintf(stderr, "nccl_bench: %s\n", s.ToString().c_str());
      std::exit(1);
    }
  }
  (void)comm->Wait(absl::Now() + absl::Seconds(60));
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

int Main(int argc, char** argv) {
  int iters = 20;
  if (argc == 3 && std::string(argv[1]) == "--iters")
    iters = std::atoi(argv[2]);
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count < 2) {
    std::fprintf(stderr, "nccl_bench: needs 2 CUDA devices (found %d)\n",
                 count);
    return 2;
  }
  const std::vector<size_t> sizes = {64 << 10, 1 << 20, 16 << 20, 256 << 20};
  ncclUniqueId raw_id;
  ncclGetUniqueId(&raw_id);
  LocalRendezvousStore store;
  std::vector<std::vector<double>> raw_s(
      2, std::vector<double>(sizes.size(), 1e30)),
      aq_s = raw_s;
  auto run = [&](int rank) {
    cudaSetDevice(rank);
    ncclComm_t raw;
    ncclCommInitRank(&raw, 2, raw_id, rank);
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    auto aq = NcclCommunicator::Connect(&store, "bench/", rank, 2, rank,
                                        absl::Seconds(60));
    if (!aq.ok()) {
      std::fprintf(stderr, "nccl_bench: %s\n", aq.status().ToString().c_str());
      std::exit(1);
    }
    void* buf = nullptr;
    cudaMalloc(&buf, sizes.back());
    for (size_t k = 0; k < sizes.size(); ++k) {
      RawRound(raw, stream, rank, buf, sizes[k], 2);  // warm-up
      AqRound(aq->get(), rank, buf, sizes[k], 2);
      for (int round = 0; round < 3; ++round) {
        raw_s[rank][k] = std::min(
            raw_s[rank][k], RawRound(raw, stream, rank, buf, sizes[k], iters));
        aq_s[rank][k] = std::min(
            aq_s[rank][k], AqRound(aq->get(), rank, buf, sizes[k], iters));
      }
    }
    cudaFree(buf);
    ncclCommDestroy(raw);
    cudaStreamDestroy(stream);
  };
  std::thread t0(run, 0), t1(run, 1);
  t0.join();
  t1.join();
  for (size_t k = 0; k < sizes.size(); ++k) {
    // The receiver's time covers the whole transfer.
    const double raw_gbs = iters * sizes[k] / raw_s[1][k] / 1e9;
    const double aq_gbs = iters * sizes[k] / aq_s[1][k] / 1e9;
    std::printf(
        "{\"bytes\":%zu,\"aqueduct_gbps\":%.2f,\"raw_nccl_gbps\":%.2f,"
        "\"ratio\":%.3f}\n",
        sizes[k], aq_gbs, raw_gbs, aq_gbs / raw_gbs);
  }
  return 0;
}

}  // namespace
}  // namespace aqueduct

int main(int argc, char** argv) { return aqueduct::Main(argc, argv); }
