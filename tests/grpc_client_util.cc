#include "tests/grpc_client_util.h"

#include <fstream>
#include <sstream>

#include "common/grpc_security.h"

namespace aqueduct {

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

SecurityConfig TlsFromFiles(const std::string& ca, const std::string& cert,
                            const std::string& key) {
  SecurityConfig tls;
  if (!ca.empty()) tls.ca_pem = ReadFileOrEmpty(ca);
  if (!cert.empty()) tls.cert_pem = ReadFileOrEmpty(cert);
  if (!key.empty()) tls.key_pem = ReadFileOrEmpty(key);
  return tls;
}

void PrepareCall(grpc::ClientContext* ctx, const std::string& token,
                 absl::Duration timeout) {
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  AddBearerToken(ctx, token);
}

}  // namespace aqueduct
