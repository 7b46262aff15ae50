#include "worker/link_probe.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "gtest/gtest.h"
#include "spdlog/sinks/ostream_sink.h"

namespace aqueduct {
namespace {

TEST(LinkProbeTest, MeasuresLoopback) {
  auto server = LinkProbeServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  auto m =
      MeasureLink("127.0.0.1", (*server)->port(), 32 << 20, absl::Seconds(30));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->bytes, 32 << 20);
  EXPECT_GT(m->bytes_per_second, 0);
  EXPECT_GT(m->round_trip_ms, 0);
  // The server keeps serving.
  auto again =
      MeasureLink("localhost", (*server)->port(), 1000, absl::Seconds(10));
  EXPECT_TRUE(again.ok()) << again.status();
}

TEST(LinkProbeTest, ErrorsAreClear) {
  // A port nobody listens on: take one and close it.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  close(fd);
  auto refused = MeasureLink("127.0.0.1", port, 10, absl::Seconds(5));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable)
      << refused.status();
  EXPECT_FALSE(MeasureLink("127.0.0.1", port, 0, absl::Seconds(1)).ok());
  EXPECT_EQ(LinkProbeServer::Start("not-an-ip", 0).status().code(),
            absl::StatusCode::kInvalidArgument);

  // A listener that never answers: the deadline holds.
  const int silent = socket(AF_INET, SOCK_STREAM, 0);
  addr.sin_port = 0;
  ASSERT_EQ(bind(silent, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(silent, 1), 0);
  getsockname(silent, reinterpret_cast<sockaddr*>(&addr), &len);
  auto late = MeasureLink("127.0.0.1", ntohs(addr.sin_port), 10,
                          absl::Milliseconds(300));
  EXPECT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded)
      << late.status();
  close(silent);
}

// The server is unauthenticated: a probe is at most 64 MiB, and a peer
// that connects and says nothing holds it for 5 s, not 60.
TEST(LinkProbeTest, ProbesAreBoundedAndASilentPeerLetsGo) {
  auto server = LinkProbeServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ(MeasureLink("127.0.0.1", (*server)->port(), (int64_t{64} << 20) + 1,
                        absl::Seconds(5))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  const int idle = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>((*server)->port()));
  ASSERT_EQ(connect(idle, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const absl::Time start = absl::Now();
  auto m = MeasureLink("127.0.0.1", (*server)->port(), 1000, absl::Seconds(20));
  EXPECT_TRUE(m.ok()) << m.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(15));
  close(idle);
}

// One connection that sends 16 bytes of junk (no magic) and waits until
// the server has read them and closed it.
void SendJunk(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(send(fd, "GET / HTTP/1.1\r\n", 16, MSG_NOSIGNAL), 16);
  char c;
  EXPECT_LE(recv(fd, &c, 1, 0), 0);  // The server closed it.
  close(fd);
}

int Warnings(const std::string& log) {
  int n = 0;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    if (absl::StrContains(line, "link probe from a peer failed")) ++n;
  }
  return n;
}

// Any host may connect: junk is refused, the server goes on measuring, and
// the warnings junk causes are at most one a second (a peer once wrote
// 7,500 lines a second into a worker's log), counting those left out.
TEST(LinkProbeTest, JunkIsRefusedAndItsWarningsAreRateLimited) {
  std::ostringstream log;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log);
  logging::Get()->sinks().push_back(sink);  // Before the server's thread.
  auto server = LinkProbeServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  const absl::Time start = absl::Now();
  for (int i = 0; i < 200; ++i) SendJunk(port);
  auto m = MeasureLink("127.0.0.1", port, 1000, absl::Seconds(10));
  EXPECT_TRUE(m.ok()) << m.status();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  // A second later the next failure is logged with the count left out.
  absl::SleepFor(absl::Milliseconds(1100));
  SendJunk(port);
  (*server).reset();  // Joins the server's thread: no more logging.
  logging::Get()->sinks().pop_back();
  const int warnings = Warnings(log.str());
  EXPECT_GE(warnings, 2) << log.str();
  EXPECT_LE(warnings, 3 + static_cast<int>(seconds)) << log.str();
  EXPECT_TRUE(absl::StrContains(log.str(), "more since the previous warning"))
      << log.str();
}

}  // namespace
}  // namespace aqueduct
