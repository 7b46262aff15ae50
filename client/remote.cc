#include "client/remote.h"

#include <cstdlib>
#include <iostream>
#include <string>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "client/cli.h"
#include "client/contexts.h"
#include "client/terminal_text.h"
#include "common/grpc_coordinator_client.h"
#include "common/security.h"
#include "google/protobuf/util/json_util.h"

namespace aqueduct {

std::string CoordinatorAddress() {
  const std::string flag = absl::GetFlag(FLAGS_coordinator);
  if (!flag.empty()) return flag;
  const char* env = std::getenv("AQ_COORDINATOR");
  return env != nullptr && *env != '\0' ? env : "127.0.0.1:7070";
}

namespace {

// TLS and the token from --tls_* / --token_file or the environment; exits
// 2 naming the flag when they are bad.
SecurityConfig ClientSecurity() {
  absl::StatusOr<SecurityConfig> config = SecurityConfigFromFlags(false);
  if (!config.ok()) {
    std::cerr << "aq: " << config.status().message() << "\n";
    std::exit(kExitUsage);
  }
  return *std::move(config);
}

// The context's settings applied (contexts.h), then the address; exits 2
// naming the problem when the context or its file is bad.
std::string AddressInContext(std::string* context) {
  absl::StatusOr<std::string> name = ApplyContext();
  if (!name.ok()) {
    std::cerr << "aq: " << Printable(name.status().message()) << "\n";
    std::exit(kExitUsage);
  }
  *context = *std::move(name);
  return CoordinatorAddress();
}

}  // namespace

Remote::Remote() {
  address_ = AddressInContext(&context_);
  const SecurityConfig security = ClientSecurity();
  tls_ = security.tls();
  client_ = NewGrpcCoordinatorClient(address_, security);
}

std::string TlsMismatchHint(const absl::Status& status, bool tls) {
  const absl::string_view message = status.message();
  // A plaintext HTTP/2 preface to a TLS port: the server closes at once.
  if (!tls && absl::StrContains(message, "Socket closed")) {
    return " (a coordinator that speaks TLS closes plaintext connections "
           "so: pass --tls_ca CA_FILE, and --token_file, or source "
           "<state-dir>/aq.env for a cluster of "
           "deploy/local/aqueduct-local.sh)";
  }
  if (tls && (absl::StrContains(message, "andshake") ||
              absl::StrContains(message, "SSL"))) {
    return " (the TLS handshake failed: does the coordinator speak TLS, and "
           "did --tls_ca's CA sign its certificate?)";
  }
  return "";
}

Remote::Remote(std::string address, std::unique_ptr<CoordinatorClient> client)
    : address_(std::move(address)), client_(std::move(client)) {}

int Remote::Failed(const absl::Status& status) const {
  if (absl::IsUnauthenticated(status) || absl::IsPermissionDenied(status)) {
    std::cerr << "aq: the coordinator at " << address_
              << " refused the call: " << Printable(status.message()) << "\n";
    return kExitFailed;
  }
  if (absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status)) {
    std::cerr << "aq: cannot reach the coordinator at " << address_
              << (context_.empty() ? "" : " (context " + context_ + ")") << ": "
              << Printable(status.message()) << TlsMismatchHint(status, tls_)
              << "\n";
    return kExitUnreachable;
  }
  // gRPC answers a method a server does not have with UNIMPLEMENTED and no
  // message (e.g. aq pointed at a daemon's --health_listen port, which
  // serves grpc.health.v1 alone): "aq: " and nothing said nothing.
  if (absl::IsUnimplemented(status)) {
    std::cerr << "aq: " << address_ << " does not serve this call ("
              << absl::StatusCodeToString(status.code())
              << (status.message().empty() ? "" : ": ")
              << Printable(status.message())
              << "): is it a coordinator's --listen address (not a "
                 "--health_listen port), and of aq's version (aq --version)?\n";
    return kExitFailed;
  }
  std::cerr << "aq: "
            << (status.message().empty()
                    ? absl::StatusCodeToString(status.code())
                    : Printable(status.message()))
            << "\n";
  return kExitFailed;
}

std::string ProtoJson(const google::protobuf::Message& message,
                      bool print_defaults) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = print_defaults;
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  return out;
}

}  // namespace aqueduct
