#include "worker/link_probe.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace aqueduct {

namespace {

constexpr uint64_t kMagic = 0x41515052'4F424531ull;  // "AQPROBE1"
// The server is unauthenticated (any host that reaches the port may
// probe): a probe is at most 64 MiB (MeasureLinks asks 4 MiB), its header
// must come within 5 s and the whole probe within 60 s, one at a time.
constexpr int64_t kMaxBytes = int64_t{64} << 20;
// Failed probes are logged at most this often (LinkProbeServer::Serve).
constexpr std::chrono::seconds kWarningInterval{1};

using Clock = std::chrono::steady_clock;

absl::Status Errno(const std::string& what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// Waits until fd is ready for `events` or the deadline passes.
absl::Status WaitFor(int fd, short events, Clock::time_point deadline,
                     const char* what) {
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - Clock::now())
                          .count();
    if (left <= 0) {
      return absl::DeadlineExceededError(
          absl::StrCat("link probe: deadline exceeded while ", what));
    }
    pollfd p{fd, events, 0};
    const int r = poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (r > 0) return absl::OkStatus();
    if (r < 0 && errno != EINTR) return Errno("poll");
  }
}

absl::Status SendAll(int fd, const char* data, size_t n,
                     Clock::time_point deadline) {
  while (n > 0) {
    const ssize_t k = send(fd, data, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      data += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (absl::Status s = WaitFor(fd, POLLOUT, deadline, "sending"); !s.ok()) {
        return s;
      }
      continue;
    }
    return Errno("link probe: send");
  }
  return absl::OkStatus();
}

absl::Status RecvAll(int fd, char* data, size_t n, Clock::time_point deadline) {
  while (n > 0) {
    const ssize_t k = recv(fd, data, n, MSG_DONTWAIT);
    if (k > 0) {
      data += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    if (k == 0) {
      return absl::UnavailableError(
          "link probe: the peer closed the connection");
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      if (absl::Status s = WaitFor(fd, POLLIN, deadline, "receiving");
          !s.ok()) {
        return s;
      }
      continue;
    }
    return Errno("link probe: recv");
  }
  return absl::OkStatus();
}

void PutU64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
uint64_t GetU64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= uint64_t{static_cast<uint8_t>(p[i])} << (8 * i);
  return v;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LinkProbeServer>> LinkProbeServer::Start(
    const std::string& host, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("link probe: '", host, "' is not an IPv4 address"));
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("link probe: socket");
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(fd, 4) != 0) {
    const absl::Status s =
        Errno(absl::StrCat("link probe: bind/listen on ", host, ":", port));
    close(fd);
    return s;
  }
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return std::unique_ptr<LinkProbeServer>(
      new LinkProbeServer(fd, ntohs(addr.sin_port)));
}

LinkProbeServer::LinkProbeServer(int fd, int port)
    : listen_fd_(fd), port_(port) {
  thread_ = std::thread([this] { Serve(); });
}

LinkProbeServer::~LinkProbeServer() {
  stopping_ = true;
  shutdown(listen_fd_, SHUT_RDWR);
  thread_.join();
  close(listen_fd_);
}

void LinkProbeServer::Serve() {
  std::vector<char> buffer(1 << 20);
  // Any host that reaches the port can fail probes as fast as it connects
  // (thousands a second with junk): at most one warning a second, counting
  // the ones left out, so that it cannot fill the worker's log.
  Clock::time_point last_warning{};
  int64_t unreported = 0;
  while (!stopping_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, 200) <= 0) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    // A peer gets 60 s per probe and 5 s for its header; a stalled or
    // silent one cannot hold the server for long.
    const Clock::time_point deadline = Clock::now() + std::chrono::seconds(60);
    char header[16];
    absl::Status s = RecvAll(fd, header, sizeof(header),
                             Clock::now() + std::chrono::seconds(5));
    if (s.ok() && GetU64(header) != kMagic) {
      s = absl::InvalidArgumentError("link probe: bad magic");
    }
    const uint64_t want = s.ok() ? GetU64(header + 8) : 0;
    if (s.ok() && want > static_cast<uint64_t>(kMaxBytes)) {
      s = absl::InvalidArgumentError("link probe: byte count too large");
    }
    uint64_t got = 0;
    while (s.ok() && got < want) {
      const size_t chunk =
          static_cast<size_t>(std::min<uint64_t>(want - got, buffer.size()));
      s = RecvAll(fd, buffer.data(), chunk, deadline);
      if (s.ok()) got += chunk;
    }
    if (s.ok()) {
      char ack[8];
      PutU64(ack, got);
      s = SendAll(fd, ack, sizeof(ack), deadline);
    }
    close(fd);
    if (s.ok()) continue;
    if (Clock::now() - last_warning < kWarningInterval) {
      ++unreported;
      continue;
    }
    AQ_LOG_WARN("link probe from a peer failed: {}{}", s.ToString(),
                unreported == 0
                    ? ""
                    : absl::StrCat(" (and ", unreported,
                                   " more since the previous warning)"));
    last_warning = Clock::now();
    unreported = 0;
  }
}

namespace {

// One probe of `bytes` bytes on a fresh connection; the seconds from the
// first byte sent to the acknowledgement.
absl::StatusOr<double> RunProbe(const std::string& host, int port,
                                int64_t bytes, Clock::time_point end) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints,
                  &result) != 0 ||
      result == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("link probe: cannot resolve '", host, "'"));
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    freeaddrinfo(result);
    return Errno("link probe: socket");
  }
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  const int rc = connect(fd, result->ai_addr, result->ai_addrlen);
  freeaddrinfo(result);
  if (rc != 0 && errno != EINPROGRESS) {
    return Errno(absl::StrCat("link probe: connect to ", host, ":", port));
  }
  if (absl::Status s = WaitFor(fd, POLLOUT, end, "connecting"); !s.ok()) {
    return s;
  }
  int err = 0;
  socklen_t len = sizeof(err);
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) {
    errno = err;
    return Errno(absl::StrCat("link probe: connect to ", host, ":", port));
  }
  char header[16];
  PutU64(header, kMagic);
  PutU64(header + 8, static_cast<uint64_t>(bytes));
  const Clock::time_point start = Clock::now();
  if (absl::Status s = SendAll(fd, header, sizeof(header), end); !s.ok()) {
    return s;
  }
  std::vector<char> payload(std::min<int64_t>(bytes, 1 << 20), 'a');
  int64_t sent = 0;
  while (sent < bytes) {
    const size_t chunk =
        static_cast<size_t>(std::min<int64_t>(bytes - sent, payload.size()));
    if (absl::Status s = SendAll(fd, payload.data(), chunk, end); !s.ok()) {
      return s;
    }
    sent += static_cast<int64_t>(chunk);
  }
  char ack[8];
  if (absl::Status s = RecvAll(fd, ack, sizeof(ack), end); !s.ok()) return s;
  const double seconds =
      std::chrono::duration<double>(Clock::now() - start).count();
  if (GetU64(ack) != static_cast<uint64_t>(bytes)) {
    return absl::DataLossError(
        absl::StrCat("link probe: the peer acknowledged ", GetU64(ack),
                     " bytes of ", bytes));
  }
  return seconds;
}

}  // namespace

absl::StatusOr<LinkMeasurement> MeasureLink(const std::string& host, int port,
                                            int64_t bytes,
                                            absl::Duration deadline) {
  if (bytes <= 0 || bytes > kMaxBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("link probe: byte count ", bytes, " is out of range"));
  }
  const Clock::time_point end =
      Clock::now() +
      std::chrono::microseconds(absl::ToInt64Microseconds(deadline));
  LinkMeasurement m;
  m.bytes = bytes;
  auto ping = RunProbe(host, port, 1, end);
  if (!ping.ok()) return ping.status();
  m.round_trip_ms = *ping * 1e3;
  auto bulk = RunProbe(host, port, bytes, end);
  if (!bulk.ok()) return bulk.status();
  m.bytes_per_second = *bulk > 0 ? bytes / *bulk : 0;
  return m;
}

}  // namespace aqueduct
