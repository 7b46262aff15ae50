// Tests of common/daemon's process helpers (issue 22): SIGPIPE ignored, the
// lock that keeps
// a second coordinator off a state directory (item 9), and the cap on
// accepted connections with its shedding at EMFILE (item 1), on plain
// loopback listeners. This binary links common/daemon, so the accept4 its
// listeners call is the daemons' (the one gRPC and the HTTP server call).
#include "common/daemon.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A daemon outlives a write to a peer that died: Gloo writes with writev,
// which raises SIGPIPE (the recovery test's survivor died of it, silently,
// when its peer was killed mid-send). In a child, since the preparation
// changes the process.
TEST(PrepareDaemonProcessTest, AWriteToADeadPeerFailsInsteadOfKilling) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    PrepareDaemonProcess();
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) _exit(2);
    close(fds[1]);
    char byte = 0;
    struct iovec iov = {&byte, 1};
    const ssize_t n = writev(fds[0], &iov, 1);
    _exit(n < 0 && errno == EPIPE ? 0 : 3);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_FALSE(WIFSIGNALED(status)) << "killed by signal " << WTERMSIG(status)
                                    << " (SIGPIPE is " << SIGPIPE << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(FileLockTest, ASecondLockFailsNamingTheHoldersPid) {
  const std::string path = ::testing::TempDir() + "/state.lock";
  absl::StatusOr<std::unique_ptr<FileLock>> first = FileLock::Acquire(path);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ((*first)->pid_error(), "");
  EXPECT_EQ(ReadText(path), absl::StrCat(getpid(), "\n"));
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);

  // flock(2) locks belong to the open file: a second open conflicts even
  // in the same process, as a second coordinator's would.
  absl::StatusOr<std::unique_ptr<FileLock>> second = FileLock::Acquire(path);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(second.status().message(),
            absl::StrCat(path, " is held by pid ", getpid()));

  // Released with its holder (a process's exit releases it too); the file
  // stays, and the next holder writes its pid over the old one.
  first->reset();
  absl::StatusOr<std::unique_ptr<FileLock>> third = FileLock::Acquire(path);
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(ReadText(path), absl::StrCat(getpid(), "\n"));
}

TEST(FileLockTest, AnUnopenableLockFileIsNamed) {
  const std::string path = ::testing::TempDir() + "/no-such-dir/state.lock";
  absl::StatusOr<std::unique_ptr<FileLock>> lock = FileLock::Acquire(path);
  EXPECT_EQ(lock.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(lock.status().message().find(path), absl::string_view::npos)
      << lock.status();
}

// A non-blocking loopback listener (as gRPC's) on an ephemeral port.
int Listen(int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      listen(fd, 128) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return -1;
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (fd < 0 ||
      connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return -1;
  }
  return fd;
}

// Accepts until the listener has nothing pending (EAGAIN); the sockets
// kept go to `kept`. Returns the errno that ended it.
int AcceptAll(int listener, std::vector<int>* kept) {
  while (true) {
    const int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return errno;
    kept->push_back(fd);
  }
}

// True when the peer closed `fd` (EOF or reset) within 5 s.
bool ClosedByPeer(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, 5000) != 1) return false;
  char byte;
  return recv(fd, &byte, 1, 0) <= 0;
}

void CloseAll(std::vector<int>* fds) {
  for (int fd : *fds) close(fd);
  fds->clear();
}

TEST(ConnectionCapTest, ConnectionsBeyondTheCapAreClosedAtOnce) {
  ASSERT_GE(DescriptorLimit(), 200);
  ASSERT_EQ(LimitIncomingConnections(20), 20);
  int port = 0;
  const int listener = Listen(&port);
  ASSERT_GE(listener, 0) << std::strerror(errno);
  const int64_t refused_before = RefusedConnections();
  std::vector<int> clients, kept;
  for (int i = 0; i < 30; ++i) {
    clients.push_back(Connect(port));
    ASSERT_GE(clients.back(), 0) << std::strerror(errno);
  }
  EXPECT_EQ(AcceptAll(listener, &kept), EAGAIN);
  EXPECT_EQ(kept.size(), 20u);
  EXPECT_EQ(RefusedConnections() - refused_before, 10);
  // The backlog is accepted in order: the last 10 clients were refused.
  for (int i = 20; i < 30; ++i) EXPECT_TRUE(ClosedByPeer(clients[i])) << i;

  // Closed connections free their places (noticed at most every 100 ms).
  for (int i = 0; i < 5; ++i) close(kept[i]);
  kept.erase(kept.begin(), kept.begin() + 5);
  absl::SleepFor(absl::Milliseconds(150));
  for (int i = 0; i < 5; ++i) {
    clients.push_back(Connect(port));
    ASSERT_GE(clients.back(), 0) << std::strerror(errno);
  }
  EXPECT_EQ(AcceptAll(listener, &kept), EAGAIN);
  EXPECT_EQ(kept.size(), 20u);
  EXPECT_EQ(RefusedConnections() - refused_before, 10);
  CloseAll(&kept);
  CloseAll(&clients);
  close(listener);
  LimitIncomingConnections(kDefaultMaxConnections);
}

// Out of descriptors, a non-blocking listener's accept4 drops the pending
// connection and says EAGAIN, never EMFILE (after which gRPC 1.51 stops
// listening for good); once descriptors are free it accepts again.
TEST(ConnectionCapTest, OutOfDescriptorsTheListenerKeepsListening) {
  LimitIncomingConnections(kDefaultMaxConnections);
  int port = 0;
  const int listener = Listen(&port);
  ASSERT_GE(listener, 0) << std::strerror(errno);
  const int pending = Connect(port);
  ASSERT_GE(pending, 0) << std::strerror(errno);
  struct rlimit old_limit;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &old_limit), 0);
  struct rlimit low = old_limit;
  low.rlim_cur = 256;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<int> fillers;
  for (int fd; (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) {
    fillers.push_back(fd);
  }
  ASSERT_EQ(errno, EMFILE);
  const int64_t refused_before = RefusedConnections();
  std::vector<int> kept;
  EXPECT_EQ(AcceptAll(listener, &kept), EAGAIN);
  EXPECT_TRUE(kept.empty());
  EXPECT_EQ(RefusedConnections() - refused_before, 1);
  CloseAll(&fillers);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &old_limit), 0);
  EXPECT_TRUE(ClosedByPeer(pending));
  close(pending);

  const int client = Connect(port);
  ASSERT_GE(client, 0) << std::strerror(errno);
  EXPECT_EQ(AcceptAll(listener, &kept), EAGAIN);
  EXPECT_EQ(kept.size(), 1u);
  CloseAll(&kept);
  close(client);
  close(listener);
}

}  // namespace
}  // namespace aqueduct
