// What the test and benchmark gRPC clients (tests/hostile_client.cc,
// tests/bench/control_plane_load.cc) share: reading their TLS material and
// token files, and preparing a call (deadline, bearer token).
#ifndef AQUEDUCT_TESTS_GRPC_CLIENT_UTIL_H_
#define AQUEDUCT_TESTS_GRPC_CLIENT_UTIL_H_

#include <string>

#include "absl/time/time.h"
#include "common/security.h"
#include "grpcpp/client_context.h"

namespace aqueduct {

// The file's bytes; "" when it cannot be read (the caller's checks and the
// server's refusals then say what is missing).
std::string ReadFileOrEmpty(const std::string& path);

// TLS material from PEM files; an empty path leaves that part empty (a
// client without a certificate: no mutual TLS).
SecurityConfig TlsFromFiles(const std::string& ca, const std::string& cert,
                            const std::string& key);

// A call's deadline, `timeout` from now, and its bearer token (none when
// empty).
void PrepareCall(grpc::ClientContext* ctx, const std::string& token,
                 absl::Duration timeout);

}  // namespace aqueduct

#endif  // AQUEDUCT_TESTS_GRPC_CLIENT_UTIL_H_
