// The NCCL communicator. Rendezvous failures and argument checks run on every
// machine; transfers need two GPUs and skip (saying so) otherwise.
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <thread>
#include <vector>

#include "common/comm/local_store.h"
#include "common/comm/nccl/nccl_communicator.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

TEST(NcclCommunicatorTest, MissingUniqueIdFailsByTheDeadline) {
  LocalRendezvousStore store;
  const absl::Time start = absl::Now();
  auto comm = NcclCommunicator::Connect(&store, "job1/", /*rank=*/1,
                                        /*size=*/2, /*device_ordinal=*/0,
                                        absl::Milliseconds(200));
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(comm.status().message().find(
                "no unique id from rank 0 at 'job1/nccl_unique_id'"),
            absl::string_view::npos)
      << comm.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(NcclCommunicatorTest, CorruptUniqueIdIsRejected) {
  LocalRendezvousStore store;
  ASSERT_TRUE(store.Set("j/nccl_unique_id", "short").ok());
  auto comm =
      NcclCommunicator::Connect(&store, "j/", 1, 2, 0, absl::Milliseconds(200));
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(comm.status().message().find("has 5 bytes"),
            absl::string_view::npos)
      << comm.status();
}

TEST(NcclCommunicatorTest, RankOutOfRange) {
  LocalRendezvousStore store;
  auto comm =
      NcclCommunicator::Connect(&store, "j/", 2, 2, 0, absl::Seconds(1));
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(NcclCommunicatorTest, EnvironmentIsReported) {
  setenv("NCCL_DEBUG", "WARN", 1);
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  const std::string env = NcclEnvironment();
  EXPECT_NE(env.find("NCCL_DEBUG=WARN"), std::string::npos) << env;
  EXPECT_NE(env.find("NCCL_SOCKET_IFNAME=lo"), std::string::npos) << env;
  unsetenv("NCCL_DEBUG");
  unsetenv("NCCL_SOCKET_IFNAME");
}

// Two ranks as threads of this process, one GPU each.
TEST(NcclCommunicatorTest, SendRecvAndAllReduceOnTwoGpus) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count < 2) {
    GTEST_SKIP() << "needs 2 CUDA devices, found "
                 << (e != cudaSuccess ? cudaGetErrorName(e)
                                      : std::to_string(count).c_str())
                 << "; NCCL transfers not exercised";
  }
  LocalRendezvousStore store;
  constexpr size_t kFloats = 1 << 18;
  std::vector<absl::Status> results(2);
  std::vector<std::vector<float>> received(2), reduced(2);
  auto run = [&](int rank) {
    auto comm = NcclCommunicator::Connect(&store, "t/", rank, 2, rank,
                                          absl::Seconds(30));
    if (!comm.ok()) {
      results[rank] = comm.status();
      return;
    }
    cudaSetDevice(rank);
    std::vector<float> host(kFloats);
    for (size_t i = 0; i < kFloats; ++i) host[i] = rank * 1000.0f + i % 997;
    float* send = nullptr;
    float* recv = nullptr;
    cudaMalloc(&send, kFloats * sizeof(float));
    cudaMalloc(&recv, kFloats * sizeof(float));
    cudaMemcpy(send, host.data(), kFloats * sizeof(float),
               cudaMemcpyHostToDevice);
    const int peer = 1 - rank;
    absl::Status s =
        (*comm)->SendRecv(peer, send, kFloats * sizeof(float), peer, recv,
                          kFloats * sizeof(float), nullptr);
    if (s.ok()) s = (*comm)->AllReduce(send, kFloats, nullptr);
    if (s.ok()) s = (*comm)->Wait(absl::Now() + absl::Seconds(30));
    received[rank].resize(kFloats);
    reduced[rank].resize(kFloats);
    cudaMemcpy(received[rank].data(), recv, kFloats * sizeof(float),
               cudaMemcpyDeviceToHost);
    cudaMemcpy(reduced[rank].data(), send, kFloats * sizeof(float),
               cudaMemcpyDeviceToHost);
    cudaFree(send);
    cudaFree(recv);
    results[rank] = s;
  };
  std::thread t0(run, 0), t1(run, 1);
  t0.join();
  t1.join();
  ASSERT_TRUE(results[0].ok()) << results[0];
  ASSERT_TRUE(results[1].ok()) << results[1];
  for (size_t i = 0; i < kFloats; i += 4099) {
    EXPECT_EQ(received[0][i], 1000.0f + i % 997);
    EXPECT_EQ(received[1][i], static_cast<float>(i % 997));
    EXPECT_EQ(reduced[0][i], 1000.0f + 2.0f * (i % 997));
    EXPECT_EQ(reduced[1][i], reduced[0][i]);
  }
}

}  // namespace
}  // namespace aqueduct
