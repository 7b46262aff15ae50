// http_port_server: the daemons' HTTP server (common/http_server) alone, as
// the coordinator and workers configure it (DaemonHttpOptions on loopback,
// the default bounds), serving a /metrics page of --metrics_bytes, for
// tests/bench/http_port_bench.py to attack and scrape. Writes its port to
// --port_file and serves until SIGTERM or SIGINT.
//
//   http_port_server [--listen 127.0.0.1:0] --port_file F
//                    [--metrics_bytes 20000]
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "common/http_server.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:0", "host:port to serve on");
ABSL_FLAG(std::string, port_file, "", "file to write the bound port to");
ABSL_FLAG(int, metrics_bytes, 20000, "size of the /metrics page");

namespace aqueduct {
namespace {

// A Prometheus-looking page of about `bytes`.
std::string MetricsPage(int bytes) {
  std::string page = "# TYPE aq_bench_value gauge\n";
  for (int i = 0; static_cast<int>(page.size()) < bytes; ++i) {
    absl::StrAppend(&page, "aq_bench_value{series=\"", i, "\"} ", i, "\n");
  }
  return page;
}

int Run() {
  // SIGTERM and SIGINT are waited for, not delivered.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  absl::StatusOr<HttpServerOptions> options =
      DaemonHttpOptions("--listen", absl::GetFlag(FLAGS_listen), "", "",
                        nullptr, /*insecure=*/false);
  if (!options.ok()) {
    fprintf(stderr, "%s\n", options.status().ToString().c_str());
    return 2;
  }
  absl::StatusOr<std::unique_ptr<HttpServer>> server =
      HttpServer::Create(*options);
  if (!server.ok()) {
    fprintf(stderr, "%s\n", server.status().ToString().c_str());
    return 1;
  }
  const std::string page = MetricsPage(absl::GetFlag(FLAGS_metrics_bytes));
  (*server)->Handle("/metrics", [&page](const HttpRequest&) {
    HttpResponse response;
    response.body = page;
    return response;
  });
  if (absl::Status s = (*server)->Start(); !s.ok()) {
    fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  if (!port_file.empty()) {
    std::ofstream(port_file + ".tmp") << (*server)->port() << "\n";
    std::rename((port_file + ".tmp").c_str(), port_file.c_str());
  }
  int signal = 0;
  sigwait(&stop, &signal);
  return 0;
}

}  // namespace
}  // namespace aqueduct

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return aqueduct::Run();
}
