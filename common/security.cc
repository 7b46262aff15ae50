#include "common/security.h"

#include <cstdlib>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/file_system.h"
#include "common/status.h"

ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA certificates the peers' certificates must chain to; turns "
          "TLS on (env AQ_TLS_CA)");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain this process presents (env AQ_TLS_CERT)");
ABSL_FLAG(std::string, tls_key, "",
          "PEM private key of --tls_cert (env AQ_TLS_KEY)");
ABSL_FLAG(std::string, token_file, "",
          "file holding this process's bearer token (env AQ_TOKEN_FILE; aq "
          "also takes the token itself in AQ_TOKEN)");

namespace aqueduct {
namespace {

constexpr size_t kMaxPemBytes = 1 << 20;

// The flag's value, else the environment variable's.
std::string FlagOrEnv(const absl::Flag<std::string>& flag, const char* env) {
  std::string value = absl::GetFlag(flag);
  if (!value.empty()) return value;
  const char* from_env = std::getenv(env);
  return from_env != nullptr ? from_env : "";
}

// The content of the file `flag` names ("" if none).
absl::Status ReadNamed(const absl::Flag<std::string>& flag, const char* env,
                       const char* flag_name, std::string* out) {
  const std::string path = FlagOrEnv(flag, env);
  if (path.empty()) return absl::OkStatus();
  absl::StatusOr<std::string> text = DefaultFileSystem()->ReadFile(path);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag_name, ": ", text.status().message()));
  }
  if (text->empty() || text->size() > kMaxPemBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag_name, ": ", path, " is empty or larger than 1 MiB"));
  }
  *out = *std::move(text);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SecurityConfig> SecurityConfigFromFlags(bool need_cert) {
  SecurityConfig c;
  RETURN_IF_ERROR(ReadNamed(FLAGS_tls_ca, "AQ_TLS_CA", "tls_ca", &c.ca_pem));
  RETURN_IF_ERROR(
      ReadNamed(FLAGS_tls_cert, "AQ_TLS_CERT", "tls_cert", &c.cert_pem));
  RETURN_IF_ERROR(
      ReadNamed(FLAGS_tls_key, "AQ_TLS_KEY", "tls_key", &c.key_pem));
  RETURN_IF_ERROR(
      ReadNamed(FLAGS_token_file, "AQ_TOKEN_FILE", "token_file", &c.token));
  c.token = std::string(absl::StripAsciiWhitespace(c.token));
  if (c.token.empty()) {
    const char* env = std::getenv("AQ_TOKEN");
    if (env != nullptr) c.token = std::string(absl::StripAsciiWhitespace(env));
  }
  if (c.cert_pem.empty() != c.key_pem.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert and --tls_key go together: give both or neither");
  }
  if (!c.cert_pem.empty() && !c.tls()) {
    return absl::InvalidArgumentError(
        "--tls_cert needs --tls_ca (the CA its peers' certificates chain to)");
  }
  if (need_cert && c.tls() && c.cert_pem.empty()) {
    return absl::InvalidArgumentError(
        "TLS is on (--tls_ca) but --tls_cert and --tls_key are missing");
  }
  return c;
}

std::vector<FlagUse> SecurityFlags() {
  return {{"tls_ca", "FILE", ""},
          {"tls_cert", "FILE", ""},
          {"tls_key", "FILE", ""},
          {"token_file", "FILE", ""}};
}

}  // namespace aqueduct
