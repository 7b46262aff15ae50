#include "common/grpc_security.h"

#include "grpc/grpc_security_constants.h"
#include "grpcpp/security/auth_context.h"

namespace aqueduct {

std::shared_ptr<grpc::ServerCredentials> ServerCredentials(
    const SecurityConfig& config, ClientCertificates client_certificates) {
  if (!config.tls()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options(
      client_certificates == ClientCertificates::kRequire
          ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
          : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = config.ca_pem;
  options.pem_key_cert_pairs.push_back({config.key_pem, config.cert_pem});
  return grpc::SslServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(
    const SecurityConfig& config) {
  if (!config.tls()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = config.ca_pem;
  options.pem_private_key = config.key_pem;
  options.pem_cert_chain = config.cert_pem;
  return grpc::SslCredentials(options);
}

void AddBearerToken(grpc::ClientContext* ctx, const std::string& token) {
  if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
}

std::string IncomingBearerToken(const grpc::ServerContext& ctx) {
  const auto& metadata = ctx.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) return "";
  const absl::string_view value(it->second.data(), it->second.size());
  return std::string(BearerToken(value));
}

bool PeerHasVerifiedCertificate(const grpc::ServerContext& ctx) {
  std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
  return auth != nullptr && auth->IsPeerAuthenticated();
}

absl::StatusOr<Principal> Authenticate(const grpc::ServerContext& ctx,
                                       const TokenTable* tokens) {
  if (tokens == nullptr) {
    Principal anonymous;
    anonymous.anonymous = true;
    return anonymous;
  }
  const std::string token = IncomingBearerToken(ctx);
  if (token.empty()) {
    return absl::UnauthenticatedError(
        "no credential: send 'authorization: Bearer <token>' (aq: "
        "--token_file or AQ_TOKEN)");
  }
  std::optional<Principal> principal = tokens->Find(token);
  if (!principal.has_value()) {
    return absl::UnauthenticatedError("the bearer token is not known");
  }
  return *std::move(principal);
}

}  // namespace aqueduct
