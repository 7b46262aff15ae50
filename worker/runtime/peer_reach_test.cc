// Naming the peer of a data-plane error, and telling a host that answers
// from one that does not, over real sockets on loopback.
#include "worker/runtime/peer_reach.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

TEST(PeerReachTest, PeerRankOfReadsTheCommunicatorsWording) {
  EXPECT_EQ(PeerRankOf("timed out receiving tag 12 from rank 2: Timed out"), 2);
  EXPECT_EQ(PeerRankOf("timed out sending tag 3 to rank 11"), 11);
  EXPECT_EQ(PeerRankOf("connecting rank 1 of 4 through 'k': timed out "
                       "connecting to rank 3 at 10.0.0.3:4000"),
            3);
  EXPECT_EQ(PeerRankOf("the checkpoint in /x is of a model of 3 layers"),
            std::nullopt);
  EXPECT_EQ(PeerRankOf("from rank x"), std::nullopt);
}

// A listening socket on an ephemeral port; its "127.0.0.1:port".
struct Listener {
  Listener() {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in in{};
    in.sin_family = AF_INET;
    in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&in), sizeof(in)), 0);
    EXPECT_EQ(listen(fd, 4), 0);
    socklen_t len = sizeof(in);
    getsockname(fd, reinterpret_cast<sockaddr*>(&in), &len);
    address = absl::StrCat("127.0.0.1:", ntohs(in.sin_port));
  }
  ~Listener() { close(fd); }
  int fd;
  std::string address;
};

TEST(PeerReachTest, AHostThatAcceptsOrRefusesAnswers) {
  std::string closed;
  {
    Listener listener;
    const PeerReach open = ProbeTcp(listener.address, absl::Seconds(2));
    EXPECT_TRUE(open.answers) << open.detail;
    EXPECT_EQ(open.detail, "connected");
    EXPECT_TRUE(open.accepted);
    closed = listener.address;
  }
  // Nobody listens there now: the host refuses, so it is reachable.
  const PeerReach refused = ProbeTcp(closed, absl::Seconds(2));
  EXPECT_TRUE(refused.answers) << refused.detail;
  EXPECT_EQ(refused.detail, "refused");
  EXPECT_FALSE(refused.accepted);
}

TEST(PeerReachTest, AnAddressThatIsNotHostPortDoesNotAnswer) {
  const PeerReach bad = ProbeTcp("no-port", absl::Seconds(1));
  EXPECT_FALSE(bad.answers);
  EXPECT_NE(bad.detail.find("'no-port' is not host:port"), std::string::npos);
}

}  // namespace
}  // namespace aqueduct
