// A small HTTP(S) server for the daemons' read-only pages: Prometheus
// metrics (/metrics) and the coordinator's dashboard. It wraps Debian's
// cpp-httplib so that no other file includes <httplib.h>, and bounds it: a
// few serving threads, short read/write and keep-alive timeouts, and a tiny
// request body (every route is a GET).
//
// Authentication mirrors the gRPC services': when `tokens` is given, every
// request needs a token of the daemon's token file (any role), presented as
// an `Authorization: Bearer <token>` header (Prometheus, curl), as the cookie
// `aq_token` (browsers), or once as `?token=<token>` in the URL, which then
// sets that cookie (HttpOnly, SameSite=Strict; Secure over HTTPS) so a
// dashboard opened as https://host:port/?token=... keeps working. Anything
// else is answered 401 with a one-line reason.
//
// Thread-safety: Handle() and Start() are called by one thread (the
// daemon's main) before serving; handlers then run on the server's own
// threads, concurrently, and must be thread-safe.
#ifndef AQUEDUCT_COMMON_HTTP_SERVER_H_
#define AQUEDUCT_COMMON_HTTP_SERVER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/auth.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace aqueduct {

struct HttpRequest {
  std::string path;                           // e.g. "/api/jobs"
  std::map<std::string, std::string> params;  // query parameters ("token"
                                              // removed), first of each name
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; version=0.0.4; charset=utf-8";
  std::string body;
};

// Runs on one of the server's threads; must be thread-safe and must not
// block for long (the server has few threads).
using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

struct HttpServerOptions {
  std::string listen;  // host:port ("[::1]:port" for IPv6); port 0 picks one
                       // (see port())
  // HTTPS when a certificate and its key are set (the daemon's TLS
  // material): either the files' paths, or their PEM text (the daemons pass
  // what they read for gRPC). PEM text wins over a path.
  std::string cert_file;
  std::string key_file;
  std::string cert_pem;
  std::string key_pem;
  // When set (not owned; must outlive the server), every request needs a
  // valid token (any role).
  const TokenTable* tokens = nullptr;
  // Bounds (the defaults suit a scrape every few seconds and a dashboard).
  int threads = 4;
  int timeout_seconds = 5;  // read, write and keep-alive idle timeouts
};

class HttpServer {
 public:
  // INVALID_ARGUMENT naming the field for a bad `listen`, an unreadable
  // certificate or key, or a certificate and key that do not match.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Create(
      HttpServerOptions options);

  // Serves GET `path` (exact match, e.g. "/metrics") with `handler`. Call
  // before Start(); a second handler for a path replaces the first.
  void Handle(const std::string& path, HttpHandler handler);

  // Binds `listen` and serves on the server's own threads. UNAVAILABLE
  // naming the address if it cannot bind; FAILED_PRECONDITION if called
  // twice.
  absl::Status Start();

  // The bound port once started (the chosen one for port 0); 0 before.
  int port() const { return port_; }
  // "http" or "https".
  const char* scheme() const;

  // Stops serving and joins the server's threads.
  ~HttpServer();

  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

 private:
  HttpServer(HttpServerOptions options, std::string host, int port,
             std::unique_ptr<httplib::Server> server);
  void Install();

  const HttpServerOptions options_;
  const std::string host_;
  const int requested_port_;
  std::unique_ptr<httplib::Server> server_;
  std::map<std::string, HttpHandler> handlers_;
  int port_ = 0;
  std::thread thread_;
};

// The options of a daemon's HTTP server on `listen` (the value of flag
// `flag`, e.g. "--http_listen"): HTTPS with the daemon's certificate and key
// when it has them, its token table when it has one. The rule of the gRPC
// --listen applies (auth.h CheckListenAddress): a non-loopback address needs
// TLS and tokens unless `insecure`; FAILED_PRECONDITION or INVALID_ARGUMENT
// naming `flag` otherwise.
absl::StatusOr<HttpServerOptions> DaemonHttpOptions(const std::string& flag,
                                                    const std::string& listen,
                                                    const std::string& cert_pem,
                                                    const std::string& key_pem,
                                                    const TokenTable* tokens,
                                                    bool insecure);

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_HTTP_SERVER_H_
