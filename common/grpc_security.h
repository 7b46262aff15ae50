// gRPC credentials from a SecurityConfig (security.h), the bearer token on
// outgoing calls, and the caller of an incoming call as a Principal
// (auth.h). For the daemons' mains, aq, the gRPC adapters and their tests.
#ifndef AQUEDUCT_COMMON_GRPC_SECURITY_H_
#define AQUEDUCT_COMMON_GRPC_SECURITY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/auth.h"
#include "common/security.h"
#include "grpcpp/client_context.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_context.h"

namespace aqueduct {

// Whether a TLS server asks its clients for certificates.
enum class ClientCertificates {
  // Asked for and verified against the CA when sent (the coordinator: aq
  // users may have none; workers must, which the adapter checks).
  kVerifyIfSent,
  // Required and verified (a worker's service: only the coordinator calls).
  kRequire,
};

// Insecure credentials without TLS; otherwise TLS with `config`'s
// certificate, key and CA.
std::shared_ptr<grpc::ServerCredentials> ServerCredentials(
    const SecurityConfig& config, ClientCertificates client_certificates);

// Insecure credentials without TLS; otherwise TLS verifying the server
// against `config`'s CA and presenting its certificate when it has one.
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(
    const SecurityConfig& config);

// Sends `token` as "authorization: Bearer <token>" with the call (nothing
// when empty).
void AddBearerToken(grpc::ClientContext* ctx, const std::string& token);

// The bearer token an incoming call carries ("" if none).
std::string IncomingBearerToken(const grpc::ServerContext& ctx);

// Whether the caller presented a certificate that TLS verified.
bool PeerHasVerifiedCertificate(const grpc::ServerContext& ctx);

// The caller of an incoming call: anonymous when `tokens` is null
// (authentication off); otherwise the token's principal, or
// UNAUTHENTICATED (no token, or one the table does not hold).
absl::StatusOr<Principal> Authenticate(const grpc::ServerContext& ctx,
                                       const TokenTable* tokens);

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_GRPC_SECURITY_H_
