// A small HTTP(S) server for the daemons' read-only pages: Prometheus
// metrics (/metrics) and the coordinator's dashboard. It wraps Debian's
// libmicrohttpd (event-driven: a few threads each poll many connections, so
// a slow client holds a connection, never a thread) so that no other file
// includes <microhttpd.h>, and bounds what a hostile client can hold:
// connections in all and per client address, the memory of each (its
// request line and headers must fit; more is answered 431 and closed), the
// time a request's header may take to arrive, the time a connection may
// idle, and the methods (GET and HEAD; no request body).
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
// threads (`threads` of them), concurrently, and must be thread-safe.
#ifndef AQUEDUCT_COMMON_HTTP_SERVER_H_
#define AQUEDUCT_COMMON_HTTP_SERVER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/auth.h"

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
  int threads = 4;  // each polls its share of the connections
  // A connection idle this long is closed, and a request's line and headers
  // must arrive within it (counted from the connection's start, or from the
  // end of its previous response), however slowly they trickle.
  int timeout_seconds = 5;
  // Connections open at once; more wait in the kernel's accept queue. At
  // most half the process's open-file limit (RLIMIT_NOFILE), so that the
  // HTTP port cannot starve the gRPC port of descriptors.
  int max_connections = 1024;
  // Connections open at once from one client address; more are closed on
  // arrival.
  int max_connections_per_ip = 64;
  // Memory of one connection, which its request line and headers must fit
  // in: a longer request is answered 431 (or 414 for a long URL) and the
  // connection closed.
  int max_request_bytes = 64 << 10;
};

class HttpServer {
 public:
  // INVALID_ARGUMENT naming the field for a bad `listen`, an unreadable
  // certificate or key, a certificate and key that do not match, or a bound
  // below 1.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Create(
      HttpServerOptions options);

  // Serves GET (and HEAD) `path` (exact match, e.g. "/metrics") with
  // `handler`. Call before Start(); a second handler for a path replaces the
  // first.
  void Handle(const std::string& path, HttpHandler handler);

  // Binds `listen` and serves on the server's own threads. UNAVAILABLE
  // naming the address if it cannot bind; INTERNAL with libmicrohttpd's
  // message if it cannot start; FAILED_PRECONDITION if called twice.
  absl::Status Start();

  // The bound port once started (the chosen one for port 0); 0 before.
  int port() const { return port_; }
  // "http" or "https".
  const char* scheme() const;

  // Stops serving, closes every connection and joins the server's threads.
  ~HttpServer();

  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

 private:
  class Impl;  // libmicrohttpd's daemon, the routes, the header deadlines

  explicit HttpServer(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
  int port_ = 0;
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
