#include "common/auth.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "openssl/sha.h"

namespace aqueduct {
namespace {

constexpr int64_t kMaxTokenFileBytes = int64_t{64} << 20;

std::string Digest(absl::string_view token) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(),
         digest);
  return std::string(reinterpret_cast<const char*>(digest), sizeof(digest));
}

absl::StatusOr<Role> ParseRole(absl::string_view role) {
  if (role == "user") return Role::kUser;
  if (role == "worker") return Role::kWorker;
  if (role == "admin") return Role::kAdmin;
  return absl::InvalidArgumentError(absl::StrCat(
      "role '", role.substr(0, 32), "' is not user, admin or worker"));
}

// One line's principal; `where` is "file:line".
absl::Status ParseLine(absl::string_view line, const std::string& where,
                       absl::flat_hash_map<std::string, Principal>* table) {
  std::vector<absl::string_view> fields =
      absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
  if (fields.size() != 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": want 'token role name', found ", fields.size(), " fields"));
  }
  if (fields[0].size() < kMinTokenChars) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": the token is shorter than ", kMinTokenChars, " characters"));
  }
  absl::StatusOr<Role> role = ParseRole(fields[1]);
  if (!role.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": ", role.status().message()));
  }
  Principal p;
  p.role = *role;
  p.name = std::string(fields[2]);
  if (!table->emplace(Digest(fields[0]), std::move(p)).second) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": the token is listed twice"));
  }
  return absl::OkStatus();
}

absl::Status Errno(const std::string& what, const std::string& path) {
  return absl::Status(
      errno == ENOENT ? absl::StatusCode::kNotFound
                      : absl::StatusCode::kPermissionDenied,
      absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

// The text of a regular file of at most kMaxTokenFileBytes that only its
// owner may read or write.
absl::StatusOr<std::string> ReadPrivateFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return Errno("cannot open token file", path);
  struct stat st;
  std::string text;
  absl::Status status;
  if (fstat(fd, &st) != 0) {
    status = Errno("cannot stat token file", path);
  } else if (!S_ISREG(st.st_mode) || st.st_size > kMaxTokenFileBytes) {
    status = absl::InvalidArgumentError(absl::StrCat(
        "token file ", path, " is not a regular file of at most 64 MiB"));
  } else if ((st.st_mode & 077) != 0) {
    status = absl::PermissionDeniedError(absl::StrCat(
        "token file ", path, " may be read or written by others (mode ",
        absl::StrCat(absl::Hex(st.st_mode & 0777)), "); chmod 600 it"));
  } else {
    text.resize(static_cast<size_t>(st.st_size));
    const ssize_t n = pread(fd, text.data(), text.size(), 0);
    if (n != st.st_size) status = Errno("cannot read token file", path);
  }
  close(fd);
  if (!status.ok()) return status;
  return text;
}

}  // namespace

const char* RoleName(Role role) {
  switch (role) {
    case Role::kWorker:
      return "worker";
    case Role::kAdmin:
      return "admin";
    case Role::kUser:
      break;
  }
  return "user";
}

absl::StatusOr<TokenTable> TokenTable::Parse(absl::string_view text,
                                             absl::string_view source) {
  TokenTable table;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    const std::string where = absl::StrCat(source, ":", line_number);
    if (absl::Status s = ParseLine(line, where, &table.by_digest_); !s.ok()) {
      return s;
    }
  }
  if (table.by_digest_.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, " lists no credentials"));
  }
  return table;
}

absl::StatusOr<TokenTable> TokenTable::Load(const std::string& path) {
  absl::StatusOr<std::string> text = ReadPrivateFile(path);
  if (!text.ok()) return text.status();
  return Parse(*text, path);
}

std::optional<Principal> TokenTable::Find(absl::string_view token) const {
  if (token.empty()) return std::nullopt;
  auto it = by_digest_.find(Digest(token));
  if (it == by_digest_.end()) return std::nullopt;
  return it->second;
}

absl::string_view BearerToken(absl::string_view header) {
  constexpr absl::string_view kPrefix = "Bearer ";
  if (!absl::StartsWith(header, kPrefix)) return "";
  return absl::StripAsciiWhitespace(header.substr(kPrefix.size()));
}

absl::StatusOr<std::string> SecureRandomBytes(size_t n) {
  std::string bytes(n, '\0');
  size_t got = 0;
  while (got < n) {
    const ssize_t r = getrandom(bytes.data() + got, n - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      return absl::InternalError(absl::StrCat(
          "getrandom: ", r < 0 ? std::strerror(errno) : "returned no bytes"));
    }
    got += static_cast<size_t>(r);
  }
  return bytes;
}

absl::StatusOr<std::string> NewRandomToken() {
  absl::StatusOr<std::string> bytes = SecureRandomBytes(32);
  if (!bytes.ok()) return bytes.status();
  return absl::BytesToHexString(*bytes);
}

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return diff == 0;
}

std::string PeerHost(absl::string_view peer) {
  if (absl::ConsumePrefix(&peer, "ipv4:")) {
    return std::string(peer.substr(0, peer.rfind(':')));
  }
  if (absl::ConsumePrefix(&peer, "ipv6:[")) {
    std::string host(peer.substr(0, peer.find(']')));
    // An IPv4 client of a dual-stack socket.
    if (absl::StartsWith(host, "::ffff:") &&
        host.find('.') != std::string::npos) {
      return host.substr(7);
    }
    return host;
  }
  return "";
}

namespace {

// Splits "host:port" or "[v6]:port"; false if it has neither form or the
// port is not 1..65535 (0 allowed when `allow_port_zero`).
bool SplitHostPort(absl::string_view address, bool allow_port_zero,
                   std::string* host) {
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) return false;
  absl::string_view h = address.substr(0, colon);
  int port = -1;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 ||
      port > 65535 || (port == 0 && !allow_port_zero)) {
    return false;
  }
  if (absl::ConsumePrefix(&h, "[") && !absl::ConsumeSuffix(&h, "]")) {
    return false;
  }
  *host = std::string(h);
  return !host->empty();
}

// The host's IP in network form; false if it is not an IP literal.
bool ParseIp(const std::string& host, std::string* ip) {
  unsigned char buf[16];
  if (inet_pton(AF_INET, host.c_str(), buf) == 1) {
    ip->assign(reinterpret_cast<char*>(buf), 4);
    return true;
  }
  if (inet_pton(AF_INET6, host.c_str(), buf) == 1) {
    ip->assign(reinterpret_cast<char*>(buf), 16);
    return true;
  }
  return false;
}

bool IsLoopback(const std::string& host) {
  if (host == "localhost") return true;
  std::string ip;
  if (!ParseIp(host, &ip)) return false;
  if (ip.size() == 4) return static_cast<unsigned char>(ip[0]) == 127;
  return ip == std::string(15, '\0') + '\1';
}

}  // namespace

absl::Status CheckAdvertisedAddress(absl::string_view address,
                                    absl::string_view peer_host,
                                    const std::vector<std::string>& allowed) {
  std::string host;
  if (address.size() > 255 || !SplitHostPort(address, false, &host)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "info.address '", address.substr(0, 64), "' is not host:port"));
  }
  for (const std::string& a : allowed) {
    if (host == a) return absl::OkStatus();
  }
  std::string ip, peer_ip;
  if (ParseIp(host, &ip) && ParseIp(std::string(peer_host), &peer_ip) &&
      ip == peer_ip) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(
      absl::StrCat("info.address '", address,
                   "': a worker must advertise the address it "
                   "calls from (",
                   peer_host.empty() ? "unknown" : peer_host,
                   ") or a host in the coordinator's --allowed_worker_hosts"));
}

absl::Status CheckListenAddress(absl::string_view listen, bool tls,
                                bool insecure) {
  std::string host;
  if (!SplitHostPort(listen, true, &host)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--listen '", listen, "' is not host:port"));
  }
  if (tls || insecure || IsLoopback(host)) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "--listen ", listen,
      " is not a loopback address and TLS is off: give --tls_cert, "
      "--tls_key and --tls_ca (docs/security.md), or --insecure to serve "
      "plaintext on a trusted network"));
}

}  // namespace aqueduct
