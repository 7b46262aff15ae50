// The bytes Gloo's rendezvous puts in the store for each rank: in
// gloo/rendezvous/context.cc (connectFullMesh), under the key "<rank>", one
// gloo::transport::tcp::Address per other rank, each its raw Impl: a struct
// sockaddr_storage (128 bytes) then an 8-byte sequence number. getsockname
// fills only the family's sockaddr (16 bytes for IPv4, 28 for IPv6); the
// rest of the 128 is whatever the stack held, heap pointers included, and
// would go to the store, and to whoever reads it, as it is. The
// communicator scrubs those bytes before they leave the process.
//
// Thread-safe: stateless functions.
#ifndef AQUEDUCT_COMMON_COMM_GLOO_ADDRESS_H_
#define AQUEDUCT_COMMON_COMM_GLOO_ADDRESS_H_

#include <sys/socket.h>
#include <sys/types.h>

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace aqueduct {

// The size of one stored address (Gloo's tcp::Address::Impl).
inline constexpr size_t kGlooAddressBytes =
    sizeof(struct sockaddr_storage) + sizeof(ssize_t);

// Whether `key` (after Gloo's PrefixStore: "<prefix>/<name>") holds a rank's
// pair addresses: its last component is a rank, all digits.
bool IsGlooAddressKey(absl::string_view key);

// Zeroes every byte of `value` (a rank's pair addresses) that is not part
// of an address: each sockaddr_storage past its family's sockaddr, and an
// IPv4 sockaddr's sin_zero. INVALID_ARGUMENT, `value` unchanged, when it is
// not a whole number of addresses or holds one that is neither IPv4 nor
// IPv6 (nothing of it may leave then).
absl::Status ScrubGlooAddresses(std::string* value);

// "<ip>:<port>" of the `index`-th address of `value`; INVALID_ARGUMENT when
// there is none or it is neither IPv4 nor IPv6.
absl::StatusOr<std::string> DescribeGlooAddress(absl::string_view value,
                                                size_t index);

// The numeric address of `host` (a name or an address) that the data plane
// binds its listening sockets to, picked as Gloo picks it (the first
// address getaddrinfo gives that this host can bind). INVALID_ARGUMENT
// naming `host` for a wildcard address (0.0.0.0, ::), which would listen on
// every interface, and UNAVAILABLE when it does not resolve or none of its
// addresses is this host's.
absl::StatusOr<std::string> DataPlaneBindAddress(const std::string& host);

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_COMM_GLOO_ADDRESS_H_
