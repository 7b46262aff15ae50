// GlooCommunicator over real TCP on loopback, ranks as threads.
#include <thread>

#include "common/comm/gloo_communicator.h"
#include "common/comm/local_store.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

std::vector<std::unique_ptr<GlooCommunicator>> ConnectAll(int n) {
  LocalRendezvousStore store;
  std::vector<std::unique_ptr<GlooCommunicator>> comms(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto c = GlooCommunicator::Connect(&store, "test/", r, n, "127.0.0.1",
                                         absl::Seconds(20));
      EXPECT_TRUE(c.ok()) << c.status();
      if (c.ok()) comms[r] = std::move(*c);
    });
  }
  for (auto& t : threads) t.join();
  return comms;
}

TEST(GlooTest, SendRecvAllSizes) {
  auto comms = ConnectAll(2);
  ASSERT_TRUE(comms[0] && comms[1]);
  const std::vector<size_t> sizes = {0, 1, 1000, 3 << 20};
  std::thread sender([&] {
    for (size_t i = 0; i < sizes.size(); ++i) {
      std::string m(sizes[i], static_cast<char>('a' + i));
      EXPECT_TRUE(comms[0]
                      ->Send(1, 100 + i, m)
                      ->Wait(absl::Now() + absl::Seconds(20))
                      .ok());
    }
  });
  // Messages between two ranks are received in the order they were sent
  // (as the pipeline does): Gloo's TCP pairs deliver in order.
  for (int i = 0; i < static_cast<int>(sizes.size()); ++i) {
    auto m = comms[1]->Recv(0, 100 + i)->Wait(absl::Now() + absl::Seconds(20));
    ASSERT_TRUE(m.ok()) << m.status();
    ASSERT_EQ(m->size(), sizes[i]);
    if (!m->empty()) {
      EXPECT_EQ((*m)[m->size() - 1], static_cast<char>('a' + i));
    }
  }
  sender.join();
  EXPECT_GT(comms[0]->bytes_sent(), 3 << 20);
  EXPECT_EQ(comms[1]->bytes_received(), comms[0]->bytes_sent());
}

TEST(GlooTest, AllReduceAndTimeout) {
  auto comms = ConnectAll(3);
  std::vector<std::vector<float>> data = {{1, 2}, {10, 20}, {100, 200}};
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      EXPECT_TRUE(comms[r]
                      ->AllReduce({0, 1, 2}, 7, data[r].data(), 2,
                                  absl::Now() + absl::Seconds(20))
                      .ok());
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(data[r], (std::vector<float>{111, 222}));
  }
  // Nobody sends: the receive gives up at its deadline.
  const absl::Time start = absl::Now();
  auto m = comms[2]->Recv(0, 999)->Wait(start + absl::Milliseconds(200));
  EXPECT_EQ(m.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(m.status().message().find("from rank 0"), std::string::npos);
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
}

TEST(GlooTest, ConnectTimesOutWithoutPeers) {
  LocalRendezvousStore store;
  auto c = GlooCommunicator::Connect(&store, "lonely/", 0, 2, "127.0.0.1",
                                     absl::Milliseconds(300));
  EXPECT_FALSE(c.ok());
}

}  // namespace
}  // namespace aqueduct
