#include "common/comm/gloo_address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace aqueduct {

namespace {

// The bytes of a sockaddr_storage that hold the address of `family`; 0 for
// another family.
size_t AddressBytes(sa_family_t family) {
  if (family == AF_INET) return sizeof(struct sockaddr_in);
  if (family == AF_INET6) return sizeof(struct sockaddr_in6);
  return 0;
}

sa_family_t FamilyAt(const char* record) {
  struct sockaddr_storage ss;
  std::memcpy(&ss, record, sizeof(ss));
  return ss.ss_family;
}

bool IsWildcard(const struct sockaddr* addr) {
  if (addr->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const struct sockaddr_in*>(addr);
    return in->sin_addr.s_addr == htonl(INADDR_ANY);
  }
  if (addr->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const struct sockaddr_in6*>(addr);
    return IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr);
  }
  return false;
}

// Whether this host can bind `addr` (port 0), as Gloo tries before it
// picks an address.
bool Bindable(const struct addrinfo* addr) {
  const int fd = socket(addr->ai_family, addr->ai_socktype, addr->ai_protocol);
  if (fd < 0) return false;
  const bool ok = bind(fd, addr->ai_addr, addr->ai_addrlen) == 0;
  close(fd);
  return ok;
}

std::string Numeric(const struct sockaddr* addr, socklen_t len) {
  char host[NI_MAXHOST] = "";
  getnameinfo(addr, len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST);
  return host;
}

}  // namespace

bool IsGlooAddressKey(absl::string_view key) {
  const size_t slash = key.find_last_of('/');
  const absl::string_view name =
      slash == absl::string_view::npos ? key : key.substr(slash + 1);
  return !name.empty() &&
         std::all_of(name.begin(), name.end(), absl::ascii_isdigit);
}

absl::Status ScrubGlooAddresses(std::string* value) {
  if (value->empty() || value->size() % kGlooAddressBytes != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Gloo's pair addresses: ", value->size(),
                     " bytes are not a whole "
                     "number of ",
                     kGlooAddressBytes, "-byte addresses"));
  }
  for (size_t at = 0; at < value->size(); at += kGlooAddressBytes) {
    if (AddressBytes(FamilyAt(value->data() + at)) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("Gloo's pair address ", at / kGlooAddressBytes,
                       " is neither IPv4 nor IPv6"));
    }
  }
  for (size_t at = 0; at < value->size(); at += kGlooAddressBytes) {
    char* record = value->data() + at;
    const sa_family_t family = FamilyAt(record);
    if (family == AF_INET) {
      std::memset(record + offsetof(struct sockaddr_in, sin_zero), 0,
                  sizeof(sockaddr_in::sin_zero));
    }
    const size_t used = AddressBytes(family);
    std::memset(record + used, 0, sizeof(struct sockaddr_storage) - used);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> DescribeGlooAddress(absl::string_view value,
                                                size_t index) {
  if ((index + 1) * kGlooAddressBytes > value.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no Gloo pair address ", index));
  }
  struct sockaddr_storage ss;
  std::memcpy(&ss, value.data() + index * kGlooAddressBytes, sizeof(ss));
  const size_t used = AddressBytes(ss.ss_family);
  if (used == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Gloo's pair address ", index, " is neither IPv4 nor IPv6"));
  }
  const auto* addr = reinterpret_cast<const struct sockaddr*>(&ss);
  const int port = ss.ss_family == AF_INET
                       ? ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port)
                       : ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return absl::StrCat(Numeric(addr, static_cast<socklen_t>(used)), ":", port);
}

absl::StatusOr<std::string> DataPlaneBindAddress(const std::string& host) {
  struct addrinfo hints;
  std::memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  struct addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("the data plane's address '", host,
                     "' does not resolve: ", gai_strerror(rc)));
  }
  absl::StatusOr<std::string> picked = absl::UnavailableError(
      absl::StrCat("the data plane's address '", host,
                   "' is none of this host's addresses (no bind succeeds)"));
  for (const struct addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (IsWildcard(a->ai_addr)) {
      picked = absl::InvalidArgumentError(absl::StrCat(
          "the data plane's address '", host,
          "' is a wildcard address, which would listen on every interface: "
          "advertise the address peers reach this worker at"));
      break;
    }
    if (Bindable(a)) {
      picked = Numeric(a->ai_addr, a->ai_addrlen);
      break;
    }
  }
  freeaddrinfo(found);
  return picked;
}

}  // namespace aqueduct
