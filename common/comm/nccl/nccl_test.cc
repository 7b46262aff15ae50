// The NCCL communicator. Rendezvous failures and argument checks run on every
// machine; transfers need two GPUs and skip (saying so) otherwise, both
// between two threads and between two processes.
#include <cuda_runtime_api.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/comm/file_store.h"
#include "common/comm/local_store.h"
#include "common/comm/nccl/nccl_communicator.h"
#include "gtest/gtest.h"

namespace aqueduct {

// Set (to the store's directory) in the environment of the second process.
constexpr char kChildEnv[] = "AQ_NCCL_TEST_RANK1_STORE";
absl::Status RunRank(RendezvousStore* store, int rank);

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

constexpr size_t kFloats = 1 << 18;

}  // namespace

// One rank's part of the exchange: a send/recv with the other rank, then an
// all-reduce; what arrived is checked against what the other rank sent.
absl::Status RunRank(RendezvousStore* store, int rank) {
  auto comm =
      NcclCommunicator::Connect(store, "t/", rank, 2, rank, absl::Seconds(30));
  if (!comm.ok()) return comm.status();
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
  absl::Status s = (*comm)->SendRecv(peer, send, kFloats * sizeof(float), peer,
                                     recv, kFloats * sizeof(float), nullptr);
  if (s.ok()) s = (*comm)->AllReduce(send, kFloats, nullptr);
  if (s.ok()) s = (*comm)->Wait(absl::Now() + absl::Seconds(30));
  std::vector<float> received(kFloats), reduced(kFloats);
  cudaMemcpy(received.data(), recv, kFloats * sizeof(float),
             cudaMemcpyDeviceToHost);
  cudaMemcpy(reduced.data(), send, kFloats * sizeof(float),
             cudaMemcpyDeviceToHost);
  cudaFree(send);
  cudaFree(recv);
  if (!s.ok()) return s;
  for (size_t i = 0; i < kFloats; i += 4099) {
    const float theirs = peer * 1000.0f + i % 997;
    const float sum = 1000.0f + 2.0f * (i % 997);
    if (received[i] != theirs || reduced[i] != sum) {
      return absl::DataLossError(
          absl::StrCat("rank ", rank, " element ", i, ": received ",
                       received[i], " (expected ", theirs, "), reduced ",
                       reduced[i], " (expected ", sum, ")"));
    }
  }
  return absl::OkStatus();
}

namespace {

// Empty where two GPUs are here; otherwise why the test skips: fewer
// GPUs, no driver. Any other CUDA error is recorded as a failure.
std::string NeedTwoGpus() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaSuccess && count >= 2) return "";
  if (e != cudaSuccess && e != cudaErrorNoDevice &&
      e != cudaErrorInsufficientDriver) {
    ADD_FAILURE() << "cudaGetDeviceCount: " << cudaGetErrorName(e) << ": "
                  << cudaGetErrorString(e);
  }
  return absl::StrCat(
      "needs 2 CUDA devices, found ",
      e != cudaSuccess ? cudaGetErrorName(e) : std::to_string(count),
      "; NCCL transfers not exercised");
}

// Two ranks as threads of this process, one GPU each.
TEST(NcclCommunicatorTest, SendRecvAndAllReduceOnTwoGpus) {
  if (const std::string why = NeedTwoGpus(); !why.empty()) GTEST_SKIP() << why;
  LocalRendezvousStore store;
  std::vector<absl::Status> results(2);
  std::thread t0([&] { results[0] = RunRank(&store, 0); });
  std::thread t1([&] { results[1] = RunRank(&store, 1); });
  t0.join();
  t1.join();
  EXPECT_TRUE(results[0].ok()) << results[0];
  EXPECT_TRUE(results[1].ok()) << results[1];
}

// Two ranks as two processes (as two worker daemons are): this binary runs
// itself again as rank 1 (see main), the ranks meeting through a store in a
// shared directory.
TEST(NcclCommunicatorTest, SendRecvAndAllReduceBetweenTwoProcesses) {
  if (const std::string why = NeedTwoGpus(); !why.empty()) GTEST_SKIP() << why;
  const char* base = std::getenv("TEST_TMPDIR");
  std::string dir =
      absl::StrCat(base != nullptr ? base : "/tmp", "/nccl_store_XXXXXX");
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  const std::string env_store = absl::StrCat(kChildEnv, "=", dir);
  std::vector<char*> env;
  for (char** e = environ; *e != nullptr; ++e) env.push_back(*e);
  env.push_back(const_cast<char*>(env_store.c_str()));
  env.push_back(nullptr);
  char self[] = "/proc/self/exe";
  char* argv[] = {self, nullptr};
  pid_t child = 0;
  ASSERT_EQ(posix_spawn(&child, self, nullptr, nullptr, argv, env.data()), 0);
  FileRendezvousStore store(dir);
  const absl::Status mine = RunRank(&store, 0);
  // The child has as long as the exchange's own deadlines, then some.
  int status = 0;
  const absl::Time deadline = absl::Now() + absl::Seconds(90);
  while (waitpid(child, &status, WNOHANG) == 0) {
    if (absl::Now() > deadline) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      FAIL() << "rank 1's process did not finish within 90 s";
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(mine.ok()) << mine;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "rank 1's process failed (status " << status << ")";
}

}  // namespace
}  // namespace aqueduct

// Run as rank 1 of the two-process test when kChildEnv names the store's
// directory; otherwise the test suite.
int main(int argc, char** argv) {
  if (const char* dir = std::getenv(aqueduct::kChildEnv); dir != nullptr) {
    aqueduct::FileRendezvousStore store(dir);
    const absl::Status s = aqueduct::RunRank(&store, 1);
    if (!s.ok()) std::fprintf(stderr, "rank 1: %s\n", s.ToString().c_str());
    return s.ok() ? 0 : 1;
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
