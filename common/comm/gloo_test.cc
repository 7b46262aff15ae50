// GlooCommunicator over real TCP on loopback, ranks as threads; what its
// rendezvous leaves in the store (gloo_address.h); connects that a stop or
// their deadline ends while a peer never answers.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <utility>

#include "common/comm/gloo_address.h"
#include "common/comm/gloo_communicator.h"
#include "common/comm/local_store.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

std::vector<std::unique_ptr<GlooCommunicator>> ConnectAll(
    int n, LocalRendezvousStore* kept = nullptr) {
  LocalRendezvousStore own;
  LocalRendezvousStore& store = kept != nullptr ? *kept : own;
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

// What each rank put in the store: its addresses, and nothing else of its
// memory (the bytes of each sockaddr_storage past the IPv4 address are
// zero), bound to the advertised address only.
TEST(GlooTest, StoredAddressesAreTheAdvertisedAddressAndNothingElse) {
  LocalRendezvousStore store;
  auto comms = ConnectAll(4, &store);
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(comms[r]) << r;
    auto value = store.Get("test//" + std::to_string(r), absl::Seconds(1));
    ASSERT_TRUE(value.ok()) << value.status();
    ASSERT_EQ(value->size(), 3 * kGlooAddressBytes) << r;
    for (size_t i = 0; i < 3; ++i) {
      auto described = DescribeGlooAddress(*value, i);
      ASSERT_TRUE(described.ok()) << described.status();
      EXPECT_EQ(described->rfind("127.0.0.1:", 0), 0u) << *described;
      const char* record = value->data() + i * kGlooAddressBytes;
      for (size_t b = offsetof(sockaddr_in, sin_zero);
           b < sizeof(sockaddr_storage); ++b) {
        ASSERT_EQ(record[b], 0)
            << "rank " << r << " address " << i << " byte " << b;
      }
    }
  }
}

TEST(GlooTest, ScrubbingKeepsTheAddressAndZeroesTheRest) {
  // Two copies of the same address over different stack garbage.
  auto record = [](unsigned char garbage) {
    std::string bytes(kGlooAddressBytes, static_cast<char>(garbage));
    sockaddr_in in;
    std::memset(&in, garbage, sizeof(in));
    in.sin_family = AF_INET;
    in.sin_port = htons(4242);
    in.sin_addr.s_addr = htonl(0x0a000001);  // 10.0.0.1
    std::memcpy(bytes.data(), &in, sizeof(in));
    const ssize_t seq = 7;
    std::memcpy(bytes.data() + sizeof(sockaddr_storage), &seq, sizeof(seq));
    return bytes;
  };
  std::string a = record(0xAB) + record(0x5C);
  std::string b = record(0x11) + record(0xEE);
  ASSERT_NE(a, b);
  ASSERT_TRUE(ScrubGlooAddresses(&a).ok());
  ASSERT_TRUE(ScrubGlooAddresses(&b).ok());
  EXPECT_EQ(a, b);
  EXPECT_EQ(*DescribeGlooAddress(a, 1), "10.0.0.1:4242");
  ssize_t seq = 0;
  std::memcpy(&seq, a.data() + sizeof(sockaddr_storage), sizeof(seq));
  EXPECT_EQ(seq, 7);  // The sequence number is kept.

  std::string odd(kGlooAddressBytes + 3, '\0');
  EXPECT_EQ(ScrubGlooAddresses(&odd).code(),
            absl::StatusCode::kInvalidArgument);
  std::string unknown(kGlooAddressBytes, '\x7f');
  const std::string before = unknown;
  EXPECT_EQ(ScrubGlooAddresses(&unknown).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(unknown, before);
  EXPECT_TRUE(IsGlooAddressKey("job/x/gloo//12"));
  EXPECT_FALSE(IsGlooAddressKey("job/x/gloo//rank_1"));
}

TEST(GlooTest, TheDataPlaneBindsTheAdvertisedAddressOnly) {
  EXPECT_EQ(*DataPlaneBindAddress("127.0.0.1"), "127.0.0.1");
  for (const std::string wildcard : {"0.0.0.0", "::"}) {
    auto any = DataPlaneBindAddress(wildcard);
    EXPECT_EQ(any.status().code(), absl::StatusCode::kInvalidArgument)
        << wildcard;
    EXPECT_NE(any.status().message().find("'" + wildcard + "' is a wildcard"),
              std::string::npos)
        << any.status();
  }
  // An address of another host cannot be bound here.
  EXPECT_EQ(DataPlaneBindAddress("192.0.2.1").status().code(),
            absl::StatusCode::kUnavailable);
  LocalRendezvousStore store;
  auto c = GlooCommunicator::Connect(&store, "wild/", 0, 2, "0.0.0.0",
                                     absl::Seconds(1));
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
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

// Rank 1's address for rank 0 as Gloo stores it: 127.0.0.2 (above rank
// 0's 127.0.0.1, so rank 0 is the pair's listening side), where nobody
// will ever connect from: rank 0's connect waits for a peer that never
// comes, as when the peer's packets are dropped.
std::string SilentPeerAddress() {
  std::string record(kGlooAddressBytes, '\0');
  sockaddr_in in{};
  in.sin_family = AF_INET;
  in.sin_port = htons(9);
  in.sin_addr.s_addr = htonl(0x7f000002);
  std::memcpy(record.data(), &in, sizeof(in));
  return record;
}

// Connects rank 0 of 2 under `prefix` on its own thread; `cancel` is set
// `cancel_after` later (never when infinite). Returns the result and how
// long after the cancel (or the start, without one) it came.
std::pair<absl::Status, absl::Duration> ConnectAndCancel(
    LocalRendezvousStore& store, const std::string& prefix,
    absl::Duration timeout, absl::Duration cancel_after) {
  std::atomic<bool> cancel{false};
  absl::Status result;
  absl::Time done;
  std::thread t([&] {
    result = GlooCommunicator::Connect(&store, prefix, 0, 2, "127.0.0.1",
                                       timeout, &cancel)
                 .status();
    done = absl::Now();
  });
  absl::Time from = absl::Now();
  if (cancel_after != absl::InfiniteDuration()) {
    absl::SleepFor(cancel_after);
    from = absl::Now();
    cancel = true;
  }
  t.join();
  return {result, done - from};
}

// The connects' timeout where a stop must end them: long enough that no
// scheduling delay reaches it (a stop ends them within a store slice or a
// watch tick), short enough that a stop that is not seen still fails the
// test within its size.
constexpr absl::Duration kStoppedConnectTimeout = absl::Seconds(20);

// A stop ends a connect that waits on a peer that never answers at once,
// not at the deadline (Gloo alone waits 5x that): CANCELLED, well before
// the deadline whatever the machine's load.
TEST(GlooTest, CancelEndsAConnectToAPeerThatNeverAnswers) {
  LocalRendezvousStore store;
  ASSERT_TRUE(store.Set("silent//1", SilentPeerAddress()).ok());
  auto [status, after] = ConnectAndCancel(
      store, "silent/", kStoppedConnectTimeout, absl::Milliseconds(300));
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  EXPECT_NE(status.message().find("rank 1 at 127.0.0.2:9"), std::string::npos)
      << status;
  EXPECT_LT(after, kStoppedConnectTimeout / 2) << after;
}

// A stop ends a wait for a peer's addresses that never come.
TEST(GlooTest, CancelEndsAWaitForAPeerThatNeverPublishes) {
  LocalRendezvousStore store;
  auto [status, after] = ConnectAndCancel(
      store, "absent/", kStoppedConnectTimeout, absl::Milliseconds(300));
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  EXPECT_LT(after, kStoppedConnectTimeout / 2) << after;
}

// Without a stop, a pair's connect ends at the timeout (not 5x it, as
// Gloo's own wait would), naming the rank and the address it could not
// reach. The bound is halfway to Gloo's 5x, far from both.
TEST(GlooTest, ConnectToASilentPeerTimesOutNamingIt) {
  LocalRendezvousStore store;
  ASSERT_TRUE(store.Set("late//1", SilentPeerAddress()).ok());
  const absl::Duration timeout = absl::Seconds(2);
  auto [status, after] =
      ConnectAndCancel(store, "late/", timeout, absl::InfiniteDuration());
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_NE(status.message().find("timed out connecting to rank 1 at "
                                  "127.0.0.2:9"),
            std::string::npos)
      << status;
  EXPECT_GE(after, timeout);
  EXPECT_LT(after, timeout * 3) << after;
}

}  // namespace
}  // namespace aqueduct
