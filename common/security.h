// What a process needs to speak to Aqueduct's daemons securely: TLS
// material (PEM text) and its bearer token, from the flags every daemon and
// `aq` share (defined in security.cc) or their environment variables:
//
//   --tls_ca    AQ_TLS_CA    CA certificates peers' certificates must chain
//                            to; giving it turns TLS on
//   --tls_cert  AQ_TLS_CERT  this process's certificate chain (servers, and
//                            workers as clients: mutual TLS)
//   --tls_key   AQ_TLS_KEY   its private key
//   --token_file AQ_TOKEN_FILE  a file holding this process's bearer token
//                            (aq also takes the token itself in AQ_TOKEN)
//
// No gRPC here: grpc_security.h turns a SecurityConfig into credentials.
#ifndef AQUEDUCT_COMMON_SECURITY_H_
#define AQUEDUCT_COMMON_SECURITY_H_

#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "common/command_line.h"

// The flags SecurityConfigFromFlags reads (aq also fills them from a
// context: client/contexts.h).
ABSL_DECLARE_FLAG(std::string, tls_ca);
ABSL_DECLARE_FLAG(std::string, tls_cert);
ABSL_DECLARE_FLAG(std::string, tls_key);
ABSL_DECLARE_FLAG(std::string, token_file);

namespace aqueduct {

struct SecurityConfig {
  std::string ca_pem;
  std::string cert_pem;
  std::string key_pem;
  std::string token;
  bool tls() const { return !ca_pem.empty(); }
};

// Reads the files the flags (or environment) name. INVALID_ARGUMENT naming
// the flag when a file cannot be read, a certificate is given without its
// key (or the reverse), or `need_cert` and TLS is on without a certificate.
absl::StatusOr<SecurityConfig> SecurityConfigFromFlags(bool need_cert);

// The flags above, for a command's --help.
std::vector<FlagUse> SecurityFlags();

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_SECURITY_H_
