#include "worker/runtime/peer_reach.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace aqueduct {

std::optional<int> PeerRankOf(absl::string_view message) {
  for (absl::string_view marker : {"from rank ", "to rank "}) {
    const size_t at = message.find(marker);
    if (at == absl::string_view::npos) continue;
    absl::string_view rest = message.substr(at + marker.size());
    size_t digits = 0;
    while (digits < rest.size() && rest[digits] >= '0' && rest[digits] <= '9') {
      ++digits;
    }
    int rank = 0;
    if (digits > 0 && absl::SimpleAtoi(rest.substr(0, digits), &rank)) {
      return rank;
    }
  }
  return std::nullopt;
}

namespace {

// "host:port" or "[v6]:port" split at the last colon.
bool SplitHostPort(const std::string& address, std::string* host,
                   std::string* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  *host = address.substr(0, colon);
  *port = address.substr(colon + 1);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  return !host->empty() && !port->empty();
}

// One non-blocking connect to `ai`, waited for up to `timeout`.
PeerReach ConnectOnce(const addrinfo& ai, absl::Duration timeout) {
  const int fd = socket(ai.ai_family, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (fd < 0) return {false, absl::StrCat("socket: ", std::strerror(errno))};
  PeerReach reach;
  int rv = connect(fd, ai.ai_addr, ai.ai_addrlen);
  if (rv != 0 && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    rv = poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout)));
    if (rv == 0) {
      close(fd);
      return {false,
              absl::StrCat("no answer within ", absl::FormatDuration(timeout))};
    }
    int error = 0;
    socklen_t len = sizeof(error);
    if (rv < 0) {
      error = errno;
    } else {
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len);
    }
    errno = error;
    rv = error == 0 ? 0 : -1;
  }
  if (rv == 0) {
    reach = {true, "connected"};
    reach.accepted = true;
  } else if (errno == ECONNREFUSED) {
    reach = {true, "refused"};  // A host that says no is there.
  } else {
    reach = {false, std::strerror(errno)};
  }
  close(fd);
  return reach;
}

}  // namespace

PeerReach ProbeTcp(const std::string& address, absl::Duration timeout) {
  std::string host, port;
  if (!SplitHostPort(address, &host, &port)) {
    return {false, absl::StrCat("'", address, "' is not host:port")};
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rv = getaddrinfo(host.c_str(), port.c_str(), &hints, &found);
      rv != 0) {
    return {false, absl::StrCat("resolving ", host, ": ", gai_strerror(rv))};
  }
  const PeerReach reach = ConnectOnce(*found, timeout);
  freeaddrinfo(found);
  return reach;
}

}  // namespace aqueduct
