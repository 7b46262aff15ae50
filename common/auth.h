// Who may call what: the credentials Aqueduct's daemons accept and the
// identities behind them, without gRPC (the gRPC adapters read the bearer
// token and the peer's address off each call and ask here).
//
// A token file lists one credential a line:
//
//   # token                             role    name
//   3f9c0e1d7a...(at least 32 chars)    user    alice
//   5d20aa7e91...                       admin   ops
//   9b1e44d0c2...                       worker  gpu-node-3:0
//
// A user may submit, watch, cancel and read jobs and workers; an admin may
// do what a user may and give jobs any priority (a user: up to the
// coordinator's --max_user_priority); a worker may
// register, heartbeat, report progress, upload its job's model and use the
// rendezvous store only as the worker named (its --worker_id) and only for
// the job it is assigned to. Tokens are kept as SHA-256 digests: a lookup
// hashes the presented token, so its time does not depend on how much of a
// real token a guess matches.
//
// Thread-safety: a loaded TokenTable is immutable and thread-safe.
#ifndef AQUEDUCT_COMMON_AUTH_H_
#define AQUEDUCT_COMMON_AUTH_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace aqueduct {

enum class Role { kUser, kWorker, kAdmin };

// "user", "worker" or "admin".
const char* RoleName(Role role);

// An authenticated caller. Without authentication (no token file: loopback
// development only) every caller is `anonymous`, which may do anything.
struct Principal {
  Role role = Role::kUser;
  std::string name;
  bool anonymous = false;
};

// Shortest token accepted in a token file (128 bits as hex).
inline constexpr int kMinTokenChars = 32;

class TokenTable {
 public:
  // Parses a token file's text; `source` names it in errors (which never
  // quote a token).
  static absl::StatusOr<TokenTable> Parse(absl::string_view text,
                                          absl::string_view source);
  // Reads and parses `path`, refusing a file that others than its owner
  // may read or write (mode & 077).
  static absl::StatusOr<TokenTable> Load(const std::string& path);

  // The principal a bearer token stands for; nullopt for an unknown token.
  std::optional<Principal> Find(absl::string_view token) const;
  int size() const { return static_cast<int>(by_digest_.size()); }

 private:
  absl::flat_hash_map<std::string, Principal> by_digest_;
};

// The token in an "authorization" header value ("Bearer <token>"); empty if
// the value has another form.
absl::string_view BearerToken(absl::string_view header);

// `n` bytes from the kernel's CSPRNG (getrandom(2)).
absl::StatusOr<std::string> SecureRandomBytes(size_t n);

// A new random token of 64 hex characters (256 bits from getrandom(2)).
absl::StatusOr<std::string> NewRandomToken();

// Compares two secrets in time independent of where they differ.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

// The host of a gRPC peer string ("ipv4:10.0.0.5:4321",
// "ipv6:[::1]:4321"); empty for other transports.
std::string PeerHost(absl::string_view peer);

// OK if a worker calling from `peer_host` may advertise `address`
// (host:port): its host must be the peer's own address, or one of
// `allowed_hosts` (the coordinator's --allowed_worker_hosts).
// PERMISSION_DENIED naming both otherwise; INVALID_ARGUMENT for an address
// that is not host:port.
absl::Status CheckAdvertisedAddress(absl::string_view address,
                                    absl::string_view peer_host,
                                    const std::vector<std::string>& allowed);

// OK if a server may listen on `listen` (host:port): loopback hosts always;
// any other host (0.0.0.0 included) only with TLS or when `insecure` was
// given explicitly (--insecure).
absl::Status CheckListenAddress(absl::string_view listen, bool tls,
                                bool insecure);

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_AUTH_H_
