// ProcessGroup's ring collectives over in-memory and Gloo (TCP loopback)
// communicators, ranks as threads: the sums and gathers, the same bits on
// every member, the bytes each member sends (the formula in the header),
// two groups of a mesh at once, and the errors (bad ranks, a silent
// member's deadline, an abort).
#include "common/comm/process_group.h"

#include <cmath>
#include <functional>
#include <thread>

#include "common/comm/gloo_communicator.h"
#include "common/comm/in_memory.h"
#include "common/comm/local_store.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

std::vector<std::unique_ptr<Communicator>> InMemory(int n) {
  auto hub = std::make_shared<InMemoryHub>(n);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < n; ++r) {
    comms.push_back(std::make_unique<InMemoryCommunicator>(hub, r));
  }
  return comms;
}

std::vector<std::unique_ptr<Communicator>> Gloo(int n) {
  LocalRendezvousStore store;
  std::vector<std::unique_ptr<Communicator>> comms(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto c = GlooCommunicator::Connect(&store, "pg/", r, n, "127.0.0.1",
                                         absl::Seconds(20));
      EXPECT_TRUE(c.ok()) << c.status();
      if (c.ok()) comms[r] = std::move(*c);
    });
  }
  for (auto& t : threads) t.join();
  return comms;
}

// Runs body(rank) on a thread per rank.
void OnEveryRank(int n, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back(body, r);
  for (auto& t : threads) t.join();
}

std::vector<int> AllRanks(int n) {
  std::vector<int> ranks(n);
  for (int r = 0; r < n; ++r) ranks[r] = r;
  return ranks;
}

float ValueOf(int rank, size_t i) {
  return std::sin(static_cast<float>(rank * 1000 + static_cast<int>(i))) /
         static_cast<float>(rank + 1);
}

absl::Time Soon() { return absl::Now() + absl::Seconds(20); }

class ProcessGroupTest : public ::testing::TestWithParam<bool> {
 protected:
  std::vector<std::unique_ptr<Communicator>> Connect(int n) {
    // Gloo needs a peer: a group of one is in memory on both.
    return GetParam() && n > 1 ? Gloo(n) : InMemory(n);
  }
};

TEST_P(ProcessGroupTest, AllReduceSumsToTheSameBitsOnEveryMember) {
  for (int p : {1, 2, 3, 4, 5}) {
    for (size_t n : {size_t{1}, size_t{3}, size_t{1000}}) {
      auto comms = Connect(p);
      std::vector<std::vector<float>> data(p);
      std::vector<int64_t> sent(p);
      OnEveryRank(p, [&](int r) {
        auto group = ProcessGroup::Make(comms[r].get(), AllRanks(p), 0, "g");
        ASSERT_TRUE(group.ok()) << group.status();
        data[r].resize(n);
        for (size_t i = 0; i < n; ++i) data[r][i] = ValueOf(r, i);
        EXPECT_TRUE((*group)->AllReduce(data[r].data(), n, Soon()).ok());
        sent[r] = (*group)->bytes_sent();
      });
      int64_t total_sent = 0;
      for (int r = 0; r < p; ++r) {
        EXPECT_EQ(data[r], data[0]) << "p " << p << " n " << n << " rank " << r;
        total_sent += sent[r];
      }
      for (size_t i = 0; i < n; ++i) {
        double want = 0;
        for (int r = 0; r < p; ++r) want += ValueOf(r, i);
        ASSERT_NEAR(data[0][i], want, 1e-5) << "p " << p << " i " << i;
      }
      // 2 (p - 1) / p of the buffer per member, summed over the members.
      EXPECT_EQ(total_sent, static_cast<int64_t>(2 * (p - 1) * n * 4))
          << "p " << p << " n " << n;
    }
  }
}

TEST_P(ProcessGroupTest, AllGatherAndReduceScatterOfEqualParts) {
  const int p = 3;
  const size_t n = 5;
  auto comms = Connect(p);
  std::vector<std::vector<float>> gathered(p), scattered(p);
  std::vector<int64_t> sent(p);
  OnEveryRank(p, [&](int r) {
    auto group = ProcessGroup::Make(comms[r].get(), AllRanks(p), 1, "g");
    ASSERT_TRUE(group.ok()) << group.status();
    std::vector<float> mine(n), all(p * n);
    for (size_t i = 0; i < n; ++i) mine[i] = ValueOf(r, i);
    for (size_t i = 0; i < p * n; ++i) all[i] = ValueOf(r, i);
    gathered[r].resize(p * n);
    scattered[r].resize(n);
    EXPECT_TRUE(
        (*group)->AllGather(mine.data(), n, gathered[r].data(), Soon()).ok());
    const std::vector<float> before = all;
    EXPECT_TRUE((*group)
                    ->ReduceScatter(all.data(), n, scattered[r].data(), Soon())
                    .ok());
    EXPECT_EQ(all, before);  // `in` is left unchanged
    sent[r] = (*group)->bytes_sent();
  });
  for (int r = 0; r < p; ++r) {
    for (int q = 0; q < p; ++q) {
      for (size_t i = 0; i < n; ++i) {
        EXPECT_EQ(gathered[r][q * n + i], ValueOf(q, i));
        double want = 0;
        for (int s = 0; s < p; ++s) want += ValueOf(s, r * n + i);
        EXPECT_NEAR(scattered[r][i], want, 1e-5);
      }
    }
    // (p - 1) parts of n floats each, per collective.
    EXPECT_EQ(sent[r], static_cast<int64_t>(2 * (p - 1) * n * 4));
  }
}

// The in-place pair over uneven parts: reduce-scatter then all-gather
// gives AllReduce's bits (ZeRO's gradients and weights travel this way).
TEST_P(ProcessGroupTest, InPlaceReduceScatterThenAllGatherEqualsAllReduce) {
  for (int p : {1, 2, 3, 4}) {
    for (size_t n : {size_t{1}, size_t{7}, size_t{1001}}) {
      auto comms = Connect(p);
      std::vector<std::vector<float>> split(p), whole(p);
      OnEveryRank(p, [&](int r) {
        auto group = ProcessGroup::Make(comms[r].get(), AllRanks(p), 2, "g");
        ASSERT_TRUE(group.ok()) << group.status();
        split[r].resize(n);
        for (size_t i = 0; i < n; ++i) split[r][i] = ValueOf(r, i);
        whole[r] = split[r];
        ASSERT_TRUE(
            (*group)->ReduceScatterInPlace(split[r].data(), n, Soon()).ok());
        // Only this member's part is kept: the rest must come back whole.
        const auto part = ProcessGroup::PartOf(n, p, r);
        for (size_t i = 0; i < n; ++i) {
          if (i < part.begin || i >= part.end) split[r][i] = -1.0f;
        }
        ASSERT_TRUE(
            (*group)->AllGatherInPlace(split[r].data(), n, Soon()).ok());
        ASSERT_TRUE((*group)->AllReduce(whole[r].data(), n, Soon()).ok());
      });
      for (int r = 0; r < p; ++r) {
        EXPECT_EQ(split[r], whole[r]) << "p " << p << " n " << n;
        EXPECT_EQ(whole[r], whole[0]);
      }
    }
  }
}

// A 2 x 2 mesh: ranks {0, 1} and {2, 3} reduce on channel 0 while {0, 2}
// and {1, 3} reduce on channel 1, at once, over one communicator each.
TEST_P(ProcessGroupTest, GroupsOfTwoAxesRunAtOnce) {
  auto comms = Connect(4);
  std::vector<float> row(4), column(4);
  OnEveryRank(4, [&](int r) {
    auto a = ProcessGroup::Make(comms[r].get(), {r & 2, (r & 2) + 1}, 0, "a");
    auto b = ProcessGroup::Make(comms[r].get(), {r & 1, (r & 1) + 2}, 1, "b");
    ASSERT_TRUE(a.ok() && b.ok());
    float x = static_cast<float>(r + 1), y = static_cast<float>(10 * (r + 1));
    std::thread other(
        [&] { EXPECT_TRUE((*b)->AllReduce(&y, 1, Soon()).ok()); });
    EXPECT_TRUE((*a)->AllReduce(&x, 1, Soon()).ok());
    other.join();
    row[r] = x;
    column[r] = y;
  });
  EXPECT_EQ(row, (std::vector<float>{3, 3, 7, 7}));
  EXPECT_EQ(column, (std::vector<float>{40, 60, 40, 60}));
}

TEST_P(ProcessGroupTest, ASilentMemberEndsInItsDeadlineNamingTheGroup) {
  auto comms = Connect(2);
  auto group = ProcessGroup::Make(comms[0].get(), {0, 1}, 0, "tensor group");
  ASSERT_TRUE(group.ok());
  std::vector<float> data(8, 1.0f);
  const absl::Status status = (*group)->AllReduce(
      data.data(), data.size(), absl::Now() + absl::Milliseconds(300));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_NE(status.message().find("tensor group all-reduce (rank 0 of 2)"),
            std::string::npos)
      << status;
}

TEST_P(ProcessGroupTest, AbortEndsAWaitingCollective) {
  auto comms = Connect(2);
  auto group = ProcessGroup::Make(comms[0].get(), {0, 1}, 0, "g");
  ASSERT_TRUE(group.ok());
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(100));
    comms[0]->Abort();
  });
  std::vector<float> data(8, 1.0f);
  const absl::Status status =
      (*group)->AllReduce(data.data(), data.size(), Soon());
  stopper.join();
  EXPECT_FALSE(status.ok());
}

INSTANTIATE_TEST_SUITE_P(Transports, ProcessGroupTest, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "Gloo" : "InMemory";
                         });

TEST(ProcessGroupMakeTest, RefusesRanksThatCannotFormAGroup) {
  auto comms = InMemory(3);
  EXPECT_FALSE(ProcessGroup::Make(comms[0].get(), {1, 2}, 0, "g").ok());
  EXPECT_FALSE(ProcessGroup::Make(comms[0].get(), {0, 0}, 0, "g").ok());
  EXPECT_FALSE(ProcessGroup::Make(comms[0].get(), {0, 3}, 0, "g").ok());
  EXPECT_FALSE(ProcessGroup::Make(comms[0].get(), {0, 1}, 64, "g").ok());
  auto ok = ProcessGroup::Make(comms[2].get(), {2, 0}, 0, "g");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ((*ok)->rank(), 0);
  EXPECT_EQ((*ok)->size(), 2);
}

}  // namespace
}  // namespace aqueduct
