// A grpc.health.v1 client for the tests, in the manner of
// grpc_health_probe (which Debian does not ship):
//
//   health_probe ADDRESS [--service NAME] [--timeout_ms MS]
//                [--tls_ca FILE [--tls_cert FILE --tls_key FILE]]
//
// Prints the status Check answers (SERVING, NOT_SERVING, ...) or the
// call's error, and exits 0 for SERVING, 1 for any other status, 3 when
// the call fails (unreachable, refused, unknown service) and 2 for bad
// usage. With --tls_ca it speaks TLS, verifying the server against the CA
// and presenting the certificate when one is given; otherwise plaintext.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "tests/health/health.grpc.pb.h"

namespace {

struct Args {
  std::string address;
  std::string service;
  std::string tls_ca, tls_cert, tls_key;
  int timeout_ms = 3000;
};

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "health_probe: cannot read %s\n", path.c_str());
    return false;
  }
  std::stringstream text;
  text << in.rdbuf();
  *out = text.str();
  return true;
}

bool ParseArgs(int argc, char** argv, Args* args) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--service" && has_value) {
      args->service = argv[++i];
    } else if (arg == "--timeout_ms" && has_value) {
      args->timeout_ms = std::atoi(argv[++i]);
    } else if (arg == "--tls_ca" && has_value) {
      args->tls_ca = argv[++i];
    } else if (arg == "--tls_cert" && has_value) {
      args->tls_cert = argv[++i];
    } else if (arg == "--tls_key" && has_value) {
      args->tls_key = argv[++i];
    } else if (arg[0] != '-' && args->address.empty()) {
      args->address = arg;
    } else {
      std::fprintf(stderr, "health_probe: bad argument '%s'\n", arg.c_str());
      return false;
    }
  }
  if (args->address.empty() || args->timeout_ms <= 0) {
    std::fprintf(stderr,
                 "usage: health_probe ADDRESS [--service NAME] "
                 "[--timeout_ms MS] [--tls_ca FILE [--tls_cert FILE "
                 "--tls_key FILE]]\n");
    return false;
  }
  return true;
}

// Plaintext without --tls_ca; null (after saying why) if a file is
// unreadable.
std::shared_ptr<grpc::ChannelCredentials> Credentials(const Args& args) {
  if (args.tls_ca.empty()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  if (!ReadFile(args.tls_ca, &options.pem_root_certs)) return nullptr;
  if (!args.tls_cert.empty() &&
      (!ReadFile(args.tls_cert, &options.pem_cert_chain) ||
       !ReadFile(args.tls_key, &options.pem_private_key))) {
    return nullptr;
  }
  return grpc::SslCredentials(options);
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!ParseArgs(argc, argv, &args)) return 2;
  std::shared_ptr<grpc::ChannelCredentials> credentials = Credentials(args);
  if (credentials == nullptr) return 2;
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(args.address, credentials));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(args.timeout_ms));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(args.service);
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = stub->Check(&ctx, request, &response);
  if (!status.ok()) {
    std::printf("error %d: %s\n", static_cast<int>(status.error_code()),
                status.error_message().c_str());
    return 3;
  }
  std::printf("%s\n", grpc::health::v1::HealthCheckResponse::ServingStatus_Name(
                          response.status())
                          .c_str());
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING
             ? 0
             : 1;
}
